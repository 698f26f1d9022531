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
  parse after validation (:func:`chunking.sidecar.document_from_sidecar`), only when
  its meta ``document_hash`` is the sha256 of the file's bytes (or
  ``limits.trust_unhashed_sidecars`` and it declares none), never through a symbolic
  link, and within the same size cap. An ignored sidecar is named in
  ``doc.metadata["sidecar_ignored"]`` with the reason.
* Every result is within its :class:`~chunking.limits.DocumentLimits` (bytes,
  characters, blocks, inflated zip entries), else a
  :class:`~chunking.limits.LimitExceeded` names the limit and its chunkyard.toml key.
  Memory and time are bounded by parsing in a worker process
  (:func:`chunking.parsers.worker.parse_in_worker`).

One module per format, each with its own docstring: :mod:`.text` (``.txt``,
``.md``: the text is the decoded file), :mod:`.html`, :mod:`.docx`, :mod:`.pdf`
(the text is the block contents joined by blank lines, :mod:`.build`),
:mod:`.json_doc`; :mod:`.encoding` detects text encodings. A file over
``max_bytes`` is refused before it is read; DOCX parts are inflated under a cap.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
from pathlib import Path
from typing import Callable, Iterable

from chunking.model import ParsedDocument
from chunking.parsers.build import document_problems
from chunking.parsers.errors import DocumentError
from chunking.limits import DocumentLimits, LimitExceeded, check_parsed_budget, limit_key

__all__ = ["DEFAULT_MAX_BYTES", "DocumentError", "FolderNames", "SUPPORTED_EXTENSIONS", "document_problems",
           "is_sidecar_path", "parse_bytes", "parse_document", "sha256_file", "sidecars_beside"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = DocumentLimits().max_bytes

_FORMATS: dict[str, str] = {
    ".txt": "txt", ".text": "txt",
    ".md": "md", ".markdown": "md",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".json": "json",
    ".docx": "docx",
    ".pdf": "pdf",
}
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(_FORMATS)


class FolderNames:
    """The file names of one folder, indexed once for :func:`is_sidecar_path`: a scan of a
    folder of many ``*.tables.json`` then costs one pass over its names, not one listing each."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)
        # "report.PDF" reads "report.tables.json": its stem is the base, any case of suffix.
        self.document_stems = frozenset(Path(n).stem for n in self.names if Path(n).suffix.lower() in _FORMATS)


def is_sidecar_path(path: str | Path, folder_names: FolderNames | None = None) -> bool:
    """True for a sidecar, not a document of its own: every ``<base>.blocks.jsonl``, and a
    ``<base>.tables.json`` beside a ``<base>.blocks.jsonl`` or a document named ``<base>.<ext>``
    (looked up in ``folder_names``, the names of its folder, when given; else its folder is listed).

    Any other ``*.tables.json`` is an ordinary JSON document that happens to be named so: no
    document would ever read it as its sidecar (the parse looks for ``<stem>.tables.json`` of
    a document, with its blocks), so leaving it out would drop it from the folder unsaid."""
    name = Path(path).name
    if name.lower().endswith(".blocks.jsonl"):
        return True  # never a document in any case (.jsonl is no document format)
    # Exactly ".tables.json", the name the parse looks up: "report.TABLES.JSON" is no sidecar
    # of report.txt (never read as one), so it is a JSON document of its own.
    if not name.endswith(".tables.json"):
        return False
    if folder_names is None:
        try:
            folder_names = FolderNames(os.listdir(Path(path).parent))
        except OSError:
            return True  # its folder cannot be listed: as before, never taken for a document
    base = name[: -len(".tables.json")]
    return base + ".blocks.jsonl" in folder_names.names or base in folder_names.document_stems


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes, streamed (the file may be far over any size limit)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sidecars_beside(path: str | Path) -> tuple[Path, Path]:
    """The ``<stem>.blocks.jsonl`` and ``<stem>.tables.json`` that :func:`parse_document` reads
    for the document at ``path`` (whether or not they exist)."""
    path = Path(path)
    return path.with_name(path.stem + ".blocks.jsonl"), path.with_name(path.stem + ".tables.json")


def parse_document(path: str | Path, doc_id: str, *, max_bytes: int | None = None,
                   limits: DocumentLimits | None = None) -> ParsedDocument:
    """Read and parse one file within ``limits`` (``max_bytes`` overrides its size cap).

    A verified sidecar beside the file wins over our own parse (:func:`_sidecar_refusal`);
    the result has at most ``limits.max_chars`` characters, ``limits.max_blocks``
    blocks and ``limits.max_pages`` pages, else :class:`~chunking.limits.LimitExceeded` names the limit.
    """
    limits = _effective_limits(limits, max_bytes)
    path = Path(path)
    source = path.name
    if is_sidecar_path(path):
        raise DocumentError(source, "a LightRAG sidecar, not a document: it is read with the document beside it "
                                    "(skip it when listing documents: chunking.parsers.is_sidecar_path)")
    if path.suffix.lower() not in _FORMATS:
        raise DocumentError(source, f"unsupported file type {path.suffix or '(no extension)'!r}; "
                                    f"supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}")
    data = _read_capped(path, source, limits.max_bytes, "file")
    note = None
    blocks_path, tables_path = sidecars_beside(path)
    # lexists: a link counts (refused below), and a name too long to exist (a document's stem near
    # the file-name limit) is absent rather than the error Path.exists raises for it on 3.11.
    if os.path.lexists(blocks_path):
        sha256 = hashlib.sha256(data).hexdigest()
        note = _sidecar_refusal(blocks_path, path, sha256, limits)
        if note is None:
            from chunking.sidecar import document_from_sidecar

            if tables_path.is_symlink():
                raise DocumentError(source, f"{tables_path.name} is a symbolic link; sidecars are not followed")
            if tables_path.exists() and not tables_path.is_file():
                # A named pipe would block the read until the parse timeout, which no limit can fix.
                raise DocumentError(source, f"{tables_path.name} is not a regular file; sidecars are read only "
                                            f"from regular files")
            if tables_path.is_file():
                _check_size(tables_path, source, limits.max_bytes, f"sidecar {tables_path.name}")
            doc = document_from_sidecar(data, source, doc_id, blocks_path, tables_path,
                                        fmt=_FORMATS[path.suffix.lower()], max_pages=limits.max_pages)
            check_parsed_budget(doc, limits, source)
            return doc
        log.warning("%s: sidecar %s ignored: %s", source, blocks_path.name, note)
    doc = parse_bytes(data, source, doc_id, limits=limits)
    if note is not None:
        doc.metadata["sidecar_ignored"] = f"{blocks_path.name}: {note}"
    return doc


def _effective_limits(limits: DocumentLimits | None, max_bytes: int | None) -> DocumentLimits:
    limits = limits or DocumentLimits()
    return limits if max_bytes is None else limits.model_copy(update={"max_bytes": max_bytes})


def _check_size(path: Path, source: str, max_bytes: int, what: str) -> int:
    size = path.stat().st_size
    if size > max_bytes:
        raise LimitExceeded(source, "max_bytes", f"{what} size", f"{size} bytes", f"{max_bytes} bytes")
    return size


def _read_capped(path: Path, source: str, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file no larger than ``max_bytes``; refused before reading."""
    try:
        if not path.is_file():
            raise DocumentError(source, "not a regular file" if path.exists() else "no such file")
        _check_size(path, source, max_bytes, what)
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise DocumentError(source, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise LimitExceeded(source, "max_bytes", f"{what} size", f"over {max_bytes} bytes", f"{max_bytes} bytes")
    return data


def _sidecar_refusal(blocks_path: Path, path: Path, sha256: str, limits: DocumentLimits) -> str | None:
    """None when the sidecar beside the document at ``path`` may replace our parse of it; else
    why it is ignored. A sidecar that declares another hash is stale: an error, unless that
    hash is of a document sharing its name (``report.md`` and ``report.txt`` both look for
    ``report.blocks.jsonl``): then it is that document's sidecar, and ignored for this one.

    Trust needs the sidecar's ``document_hash`` to equal the document's sha256 (or
    ``limits.trust_unhashed_sidecars`` for one that declares none); a sidecar is never
    followed through a symbolic link, and is size-capped like a document."""
    from chunking.sidecar import declared_document_hash

    source = path.name
    if blocks_path.is_symlink():
        return "it is a symbolic link (sidecars are not followed)"
    if not blocks_path.is_file():
        return "it is not a regular file"
    _check_size(blocks_path, source, limits.max_bytes, f"sidecar {blocks_path.name}")
    declared = declared_document_hash(blocks_path)
    if declared is None:
        if limits.trust_unhashed_sidecars:
            return None
        return (f"it declares no document_hash, so it cannot be shown to describe these bytes "
                f"(set {limit_key('trust_unhashed_sidecars')} = true in chunkyard.toml to use such sidecars)")
    if declared != sha256:
        owner = _namesake_with_hash(path, declared, limits.max_bytes)
        if owner is not None:
            return f"it describes {owner.name}, which shares this document's name"
        raise DocumentError(f"{source} (sidecar {blocks_path.name})",
                            "sidecar is stale: its document_hash does not match the document's bytes")
    return None


# Namesakes hashed at most when a sidecar's hash is not the document's: a folder holding
# hundreds of case variants of one name must not make every parse read them all.
_MAX_NAMESAKES = 8


def _namesake_with_hash(path: Path, sha256: str, max_bytes: int) -> Path | None:
    """Another document beside ``path`` with the same stem whose bytes have this sha256, if any
    (regular files within ``max_bytes``, the first :data:`_MAX_NAMESAKES` by name, streamed)."""
    namesakes = [other for other in sorted(path.parent.glob(glob.escape(path.stem) + ".*"))
                 if other != path and other.stem == path.stem and other.suffix.lower() in _FORMATS]
    for other in namesakes[:_MAX_NAMESAKES]:
        try:
            if other.is_symlink() or not other.is_file() or other.stat().st_size > max_bytes:
                continue
            if sha256_file(other) == sha256:
                return other
        except OSError:
            continue
    return None


def parse_bytes(data: bytes, filename: str, doc_id: str, *, max_bytes: int | None = None,
                limits: DocumentLimits | None = None) -> ParsedDocument:
    """Parse the bytes of a file named ``filename`` (its extension picks the format),
    within ``limits`` (see :func:`parse_document`)."""
    limits = _effective_limits(limits, max_bytes)
    source = Path(filename).name or filename
    fmt = _FORMATS.get(Path(filename).suffix.lower())
    if fmt is None:
        raise DocumentError(source, f"unsupported file type {Path(filename).suffix or '(no extension)'!r}")
    if len(data) > limits.max_bytes:
        raise LimitExceeded(source, "max_bytes", "file size", f"{len(data)} bytes", f"{limits.max_bytes} bytes")
    if not data:
        raise DocumentError(source, "file is empty")
    sha256 = hashlib.sha256(data).hexdigest()
    parser = _parser(fmt)
    try:
        doc = parser(data, source, doc_id, sha256, limits)
    except DocumentError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise DocumentError(source, f"{fmt} too deeply nested or too large to parse ({type(exc).__name__})") from None
    except Exception as exc:  # a library's internal error on hostile bytes
        log.warning("%s parser failed on %s", fmt, source, exc_info=True)
        raise DocumentError(source, f"unparseable {fmt}: {type(exc).__name__}: {exc}") from None
    if not doc.text.strip():
        raise DocumentError(source, f"no extractable text in this {fmt} file")
    check_parsed_budget(doc, limits, source)
    return doc


def _parser(fmt: str) -> Callable[[bytes, str, str, str, DocumentLimits], ParsedDocument]:
    if fmt in ("txt", "md"):
        from chunking.parsers.text import parse_text

        return lambda d, s, i, h, _m: parse_text(d, s, i, h, markdown=fmt == "md")
    if fmt == "json":
        from chunking.parsers.json_doc import parse_json

        return lambda d, s, i, h, _m: parse_json(d, s, i, h)
    if fmt == "html":
        from chunking.parsers.html import parse_html

        return lambda d, s, i, h, lim: parse_html(d, s, i, h, max_chars=lim.max_chars)
    if fmt == "docx":
        from chunking.parsers.docx import parse_docx

        return lambda d, s, i, h, lim: parse_docx(d, s, i, h, max_part_bytes=lim.max_inflated_bytes,
                                                  max_pages=lim.max_pages,
                                                  max_compression_ratio=lim.max_compression_ratio)
    from chunking.parsers.pdf import parse_pdf

    return lambda d, s, i, h, lim: parse_pdf(d, s, i, h, max_pages=lim.max_pages)
