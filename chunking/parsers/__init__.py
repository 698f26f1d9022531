"""Parse a document file into pages, heading-level blocks and a tables sidecar.

One obvious entry point::

    from chunking.parsers import parse_document, DocumentError
    try:
        doc = parse_document("corpus/html/glossary.html", doc_id="html/glossary.html")
    except DocumentError as err:   # the only exception bad input raises
        print(err)                 # "glossary.html: <specific cause>"

Invariants a caller relies on (see :mod:`chunking.model`):

* ``doc.text == "".join(p.text for p in doc.pages)`` and every page's
  ``char_offset`` is exact; blocks carry exact, ordered, non-overlapping
  ``char_start``/``char_end`` and their sidecar fields (``block_id`` stable for the
  same bytes and ``doc_id``).
* Any input that cannot be parsed raises :class:`DocumentError` naming the file and
  the cause; no other exception type escapes for bad input.
* A ``<base>.blocks.jsonl`` (and optional ``<base>.tables.json``) beside the file,
  written by LightRAG, mineru, docling or chunkyard, is used instead of our own
  parse after validation (:func:`chunking.sidecar.document_from_sidecar`).

One module per format, each with its own docstring: :mod:`.text` (``.txt``,
``.md``: the text is the decoded file), :mod:`.html`, :mod:`.docx`, :mod:`.pdf`
(the text is the block contents joined by blank lines, :mod:`.build`),
:mod:`.json_doc`; :mod:`.encoding` detects text encodings. A file over
``max_bytes`` is refused before it is read; DOCX parts are inflated under a cap.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Callable

from chunking.model import ParsedDocument
from chunking.parsers.build import document_problems
from chunking.parsers.errors import DocumentError

__all__ = ["DEFAULT_MAX_BYTES", "DocumentError", "SUPPORTED_EXTENSIONS", "document_problems", "is_sidecar_path",
           "parse_bytes", "parse_document"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 1024 * 1024

_FORMATS: dict[str, str] = {
    ".txt": "txt", ".text": "txt",
    ".md": "md", ".markdown": "md",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".json": "json",
    ".docx": "docx",
    ".pdf": "pdf",
}
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(_FORMATS)
_SIDECAR_SUFFIXES = (".blocks.jsonl", ".tables.json")


def is_sidecar_path(path: str | Path) -> bool:
    """True for ``<base>.blocks.jsonl`` / ``<base>.tables.json``: not documents of their own."""
    return str(path).lower().endswith(_SIDECAR_SUFFIXES)


def parse_document(path: str | Path, doc_id: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ParsedDocument:
    """Read and parse one file; a sidecar beside it wins over our own parse."""
    path = Path(path)
    source = path.name
    if is_sidecar_path(path):
        raise DocumentError(source, "a LightRAG sidecar, not a document: it is read with the document beside it "
                                    "(skip it when listing documents: chunking.parsers.is_sidecar_path)")
    if path.suffix.lower() not in _FORMATS:
        raise DocumentError(source, f"unsupported file type {path.suffix or '(no extension)'!r}; "
                                    f"supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}")
    try:
        if not path.is_file():
            raise DocumentError(source, "not a regular file" if path.exists() else "no such file")
        size = path.stat().st_size
        if size > max_bytes:
            raise DocumentError(source, f"file is {size} bytes, over the {max_bytes}-byte size limit")
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise DocumentError(source, f"cannot read file: {exc.strerror or exc}") from None
    blocks_path = path.with_name(path.stem + ".blocks.jsonl")
    if blocks_path.is_file():
        from chunking.sidecar import document_from_sidecar

        tables_path = path.with_name(path.stem + ".tables.json")
        return document_from_sidecar(data, source, doc_id, blocks_path, tables_path,
                                     fmt=_FORMATS[path.suffix.lower()])
    return parse_bytes(data, source, doc_id, max_bytes=max_bytes)


def parse_bytes(data: bytes, filename: str, doc_id: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> ParsedDocument:
    """Parse the bytes of a file named ``filename`` (its extension picks the format)."""
    source = Path(filename).name or filename
    fmt = _FORMATS.get(Path(filename).suffix.lower())
    if fmt is None:
        raise DocumentError(source, f"unsupported file type {Path(filename).suffix or '(no extension)'!r}")
    if len(data) > max_bytes:
        raise DocumentError(source, f"file is {len(data)} bytes, over the {max_bytes}-byte size limit")
    if not data:
        raise DocumentError(source, "file is empty")
    sha256 = hashlib.sha256(data).hexdigest()
    parser = _parser(fmt)
    try:
        doc = parser(data, source, doc_id, sha256, max_bytes)
    except DocumentError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise DocumentError(source, f"{fmt} too deeply nested or too large to parse ({type(exc).__name__})") from None
    except Exception as exc:  # a library's internal error on hostile bytes
        log.warning("%s parser failed on %s", fmt, source, exc_info=True)
        raise DocumentError(source, f"unparseable {fmt}: {type(exc).__name__}: {exc}") from None
    if not doc.text.strip():
        raise DocumentError(source, f"no extractable text in this {fmt} file")
    return doc


def _parser(fmt: str) -> Callable[[bytes, str, str, str, int], ParsedDocument]:
    if fmt in ("txt", "md"):
        from chunking.parsers.text import parse_text

        return lambda d, s, i, h, _m: parse_text(d, s, i, h, markdown=fmt == "md")
    if fmt == "json":
        from chunking.parsers.json_doc import parse_json

        return lambda d, s, i, h, _m: parse_json(d, s, i, h)
    if fmt == "html":
        from chunking.parsers.html import parse_html

        return lambda d, s, i, h, _m: parse_html(d, s, i, h)
    if fmt == "docx":
        from chunking.parsers.docx import parse_docx

        return parse_docx
    from chunking.parsers.pdf import parse_pdf

    return lambda d, s, i, h, _m: parse_pdf(d, s, i, h)
