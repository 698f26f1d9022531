"""LightRAG sidecar files (format 1.0): ``<base>.blocks.jsonl`` and ``<base>.tables.json``.

See ``notes/compatibility.md`` §3. Invariants a caller relies on:

* ``read_blocks_jsonl(write_sidecars(doc, d)[0]) == doc.blocks`` for a document
  chunkyard parsed (char spans travel in an ``{"type": "absolute", ...}`` position),
  and ``read_tables_json(...)[1] == doc.tables``.
* Readers follow the format's tolerance: only ``type == "content"`` lines count,
  lines that are not valid JSON are skipped, a missing or unreadable tables file
  means no tables (``{}``).
* :func:`document_from_sidecar` (used by :func:`chunking.parsers.parse_document`
  when a sidecar sits beside a document) is strict instead: a sidecar that does not
  describe the document raises :class:`~chunking.parsers.DocumentError`. It is used
  only when its meta line's ``document_hash`` is the document's sha256 (or the user
  opted in to unhashed sidecars), and only within the document's size caps.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from chunking.model import Block, ParsedDocument

__all__ = ["blocks_jsonl_lines", "declared_document_hash", "document_from_sidecar", "read_blocks_jsonl",
           "read_tables_json", "sidecar_basename", "sidecar_paths", "tables_json", "write_sidecars"]

FORMAT_VERSION = "1.0"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_TABLE_TAG = re.compile(r'^<table\s+(?:[^>]*\s)?id="([^"]+)"[^>]*\sformat="(json|html)"|'
                        r'^<table\s+(?:[^>]*\s)?format="(json|html)"[^>]*\sid="([^"]+)"')


def sidecar_basename(doc_id: str) -> str:
    """A file-system-safe name derived from ``doc_id``; a short hash keeps two ids
    that sanitise alike ("a/b", "a_b") apart."""
    safe = _UNSAFE.sub("_", doc_id).strip("._")[:120]
    if safe != doc_id or not safe:
        safe = f"{safe or 'doc'}-{hashlib.md5(doc_id.encode('utf-8')).hexdigest()[:8]}"
    return safe


def _meta(doc: ParsedDocument) -> dict[str, Any]:
    title = doc.metadata.get("doc_title") or next((b.heading for b in doc.blocks if b.level == 1 and b.heading), "")
    return {
        "type": "meta",
        "format": "lightrag",
        "version": FORMAT_VERSION,
        "document_name": doc.source_name or doc.doc_id,
        "document_format": doc.format,
        "document_hash": f"sha256:{doc.sha256}",
        "table_file": bool(doc.tables),
        "equation_file": False,
        "drawing_file": False,
        "asset_dir": False,
        "blocks": len(doc.blocks),
        "doc_id": doc.doc_id,
        "parse_engine": doc.metadata.get("parse_engine", "chunkyard"),
        "parse_time": doc.metadata.get("parse_time") or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "doc_title": title or Path(doc.source_name or doc.doc_id).stem,
    }


def _content_line(block: Block) -> dict[str, Any]:
    return {
        "type": "content",
        "blockid": block.block_id,
        "format": "plain_text",
        "content": block.content,
        "heading": block.heading,
        "parent_headings": list(block.parent_headings),
        "level": block.level,
        "session_type": block.session_type,
        "table_slice": "none",
        "positions": list(block.positions),
        # Optional in the format: written only for the document title's block.
        **({"is_title_block": True} if block.is_title_block else {}),
    }


def blocks_jsonl_lines(doc: ParsedDocument) -> list[str]:
    """The lines of ``<base>.blocks.jsonl`` (no trailing newlines): meta, then one per block."""
    dump = lambda obj: json.dumps(obj, ensure_ascii=False)  # noqa: E731
    return [dump(_meta(doc))] + [dump(_content_line(b)) for b in doc.blocks]


def tables_json(doc: ParsedDocument) -> dict[str, Any]:
    return {"version": FORMAT_VERSION, "tables": doc.tables}


def sidecar_paths(doc_id: str, directory: Path) -> tuple[Path, Path]:
    """Where :func:`write_sidecars` puts a document's ``.blocks.jsonl`` and ``.tables.json``."""
    base = sidecar_basename(doc_id)
    return Path(directory) / f"{base}.blocks.jsonl", Path(directory) / f"{base}.tables.json"


def write_sidecars(doc: ParsedDocument, directory: Path) -> tuple[Path, Path]:
    """Write ``<name>.blocks.jsonl`` and ``<name>.tables.json`` into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    blocks_path, tables_path = sidecar_paths(doc.doc_id, directory)
    write_atomic(blocks_path, "\n".join(blocks_jsonl_lines(doc)) + "\n")
    write_atomic(tables_path, json.dumps(tables_json(doc), ensure_ascii=False, indent=1) + "\n")
    return blocks_path, tables_path


def write_atomic(path: Path, text: str) -> None:
    # A reader never sees half a file; two writers (run partitions in parallel
    # processes) never share a temporary file.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# -- reading -------------------------------------------------------------------


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        for line in handle:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def _block(obj: dict[str, Any], index: int) -> Block | None:
    content = obj.get("content")
    if not isinstance(content, str):
        return None
    heading = obj.get("heading") if isinstance(obj.get("heading"), str) else ""
    level = obj.get("level") if isinstance(obj.get("level"), int) and not isinstance(obj.get("level"), bool) else 0
    parents = obj.get("parent_headings")
    parents = [str(p) for p in parents] if isinstance(parents, list) else []
    positions = [p for p in obj.get("positions") or [] if isinstance(p, dict)] if isinstance(obj.get("positions"), list) else []
    span = next((p for p in positions if p.get("type") == "absolute"
                 and isinstance(p.get("char_start"), int) and isinstance(p.get("char_end"), int)), None)
    blockid = obj.get("blockid")
    return Block(
        block_id=blockid if isinstance(blockid, str) and blockid else None,
        index=index, heading=heading, level=level, parent_headings=parents,
        content=_CONTROL.sub("", content),
        session_type=obj.get("session_type") if isinstance(obj.get("session_type"), str) else "body",
        positions=positions,
        char_start=span["char_start"] if span else None,
        char_end=span["char_end"] if span else None,
        is_title_block=obj.get("is_title_block") is True,
    )


def read_blocks_jsonl(path: str | Path) -> list[Block]:
    """The ``type == "content"`` lines of a ``.blocks.jsonl`` file as :class:`Block` s."""
    blocks: list[Block] = []
    for obj in _json_lines(Path(path)):
        if obj.get("type") == "content":
            block = _block(obj, len(blocks))
            if block is not None:
                blocks.append(block)
    return blocks


def read_tables_json(path: str | Path) -> dict[str, dict]:
    """The ``"tables"`` mapping of a ``.tables.json`` file; ``{}`` if missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return {}
    tables = data.get("tables") if isinstance(data, dict) else None
    if not isinstance(tables, dict):
        return {}
    return {str(k): v for k, v in tables.items() if isinstance(v, dict)}


def header_format(header: str) -> str | None:
    """``"json"`` for a JSON 2-D array string, ``"html"`` for a ``<thead>`` fragment."""
    stripped = header.strip()
    if stripped.lower().startswith("<thead"):
        return "html"
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    return "json" if isinstance(value, list) and all(isinstance(r, list) for r in value) else None


# -- a sidecar beside a document --------------------------------------------------

_META_LINE_CAP = 64 * 1024


def declared_document_hash(blocks_path: Path) -> str | None:
    """The lower-case sha256 hex a sidecar's meta line declares for its document, or
    None when it declares none (or no meta line). Reads the first line only, at most
    64 KiB of it: a huge or hostile sidecar is not read to answer this."""
    with open(blocks_path, encoding="utf-8-sig", errors="replace") as handle:
        line = handle.readline(_META_LINE_CAP)
    try:
        meta = json.loads(line)
    except ValueError:
        return None
    declared = meta.get("document_hash") if isinstance(meta, dict) and meta.get("type") == "meta" else None
    if not isinstance(declared, str) or not declared.lower().startswith("sha256:"):
        return None
    return declared[len("sha256:"):].strip().lower()


def document_from_sidecar(data: bytes, source: str, doc_id: str, blocks_path: Path, tables_path: Path,
                          *, fmt: str, max_pages: int | None = None) -> ParsedDocument:
    """The document described by a sidecar beside it, validated for shape.

    Whether the sidecar may describe these bytes at all (its ``document_hash``) and
    its size are the caller's checks, made before it is read whole
    (:func:`chunking.parsers.parse_document`, :func:`declared_document_hash`).

    ``doc.text`` is the block contents joined by a blank line (the layout of every
    structured format), block ids and positions are the sidecar's, pages come from
    the ``page``/``page_idx`` of each block's positions (one page when absent).
    """
    from chunking.parsers.build import DraftBlock, assemble_structured
    from chunking.parsers.errors import DocumentError

    where = f"{source} (sidecar {blocks_path.name})"
    sha256 = hashlib.sha256(data).hexdigest()
    try:
        objects = _json_lines(blocks_path)
    except OSError as exc:
        raise DocumentError(where, f"cannot read sidecar: {exc.strerror or exc}") from None
    meta = next((o for o in objects if o.get("type") == "meta"), {})
    version = str(meta.get("version", FORMAT_VERSION))
    if meta and (meta.get("format", "lightrag") != "lightrag" or not version.startswith("1.")):
        raise DocumentError(where, f"unsupported sidecar format {meta.get('format')!r} version {version!r}")
    contents = [o for o in objects if o.get("type") == "content"]
    for n, obj in enumerate(contents):
        level = obj.get("level", 0)
        if not isinstance(obj.get("content"), str) or not isinstance(level, int) or not 0 <= level <= 9:
            raise DocumentError(where, f"content line {n + 1} is malformed (needs a string content and level 0..9)")
        _refuse_lone_surrogates(obj, f"content line {n + 1}", where)
    blocks = [b for b in (_block(o, i) for i, o in enumerate(contents)) if b is not None]
    if not blocks or not any(b.content.strip() for b in blocks):
        raise DocumentError(where, "sidecar has no content blocks")
    tables = read_tables_json(tables_path)
    _refuse_lone_surrogates(tables, f"the tables sidecar {tables_path.name}", where)
    _check_tables(blocks, tables, where)
    drafts = []
    for block in blocks:
        page = _first_page(block.positions)
        drafts.append(DraftBlock(
            heading=block.heading, level=block.level, parent_headings=list(block.parent_headings),
            heading_page=page, raw_lines=[(line, page) for line in block.content.split("\n")],
            block_id=block.block_id, positions=list(block.positions),
        ))
    doc = assemble_structured(doc_id=doc_id, source_name=source, fmt=fmt, sha256=sha256, drafts=drafts,
                              max_pages=max_pages,
                              metadata={"parse_engine": str(meta.get("parse_engine", "sidecar")),
                                        "sidecar": blocks_path.name,
                                        **({"doc_title": meta["doc_title"]} if meta.get("doc_title") else {})})
    doc.tables = tables
    return doc


def _refuse_lone_surrogates(value: Any, what: str, where: str) -> None:
    """DocumentError when ``value`` holds a lone surrogate (JSON allows ``"\\ud800"``; UTF-8,
    and so the store, cannot hold it): the document fails alone at parse, not its batch at store."""
    from chunking.parsers.errors import DocumentError

    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DocumentError(where, f"{what} holds a lone surrogate (U+{ord(exc.object[exc.start]):04X}), "
                                   "which is not Unicode text") from None


def _first_page(positions: list[dict[str, Any]]) -> int:
    for pos in positions:
        for key in ("page", "page_idx", "page_no"):
            if isinstance(pos.get(key), int) and pos[key] >= 0:
                return pos[key]
    return 0


def _check_tables(blocks: list[Block], tables: dict[str, dict], where: str) -> None:
    from chunking.parsers.errors import DocumentError

    for block in blocks:
        for line in block.content.split("\n"):
            match = _TABLE_TAG.match(line.strip())
            if not match:
                continue
            table_id = match.group(1) or match.group(4)
            table_format = match.group(2) or match.group(3)
            header = tables.get(table_id, {}).get("table_header")
            if header is None:
                continue
            if not isinstance(header, str) or header_format(header) != table_format:
                raise DocumentError(where, f"table {table_id} is {table_format} but its table_header is not: "
                                           "the tables sidecar is corrupt or belongs to another document")
