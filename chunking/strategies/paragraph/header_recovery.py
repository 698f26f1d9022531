"""HeaderRecovery (seed §3.3.3): a split table's header from ``.tables.json``, budgeted up front."""

from __future__ import annotations

import json
import re
from typing import Mapping

from chunking.strategies.paragraph.model import _Context
from chunking.strategies.paragraph.table_markup import _TableHeader, _attr


def run(attrs: str, fmt: str, ctx: _Context) -> _TableHeader | None:
    """HeaderRecovery: the ``table_header`` of this table's ``.tables.json`` entry.

    None when the tag has no id, the sidecar has no entry for it or the entry has
    no header: a missing header is normal. A header whose format disagrees with
    the table's (a JSON array for an HTML table or a ``<thead>`` for a JSON one)
    means the sidecar is corrupted or mis-attributed: ``ValueError``.
    """
    table_id = _attr(attrs, "id")
    entry = ctx.tables.get(table_id) if table_id else None
    raw = entry.get("table_header") if isinstance(entry, Mapping) else None
    if not isinstance(raw, str) or not raw.strip():
        return None
    stripped = raw.strip()
    header_fmt = "json" if stripped.startswith("[") else "html" if stripped.lower().startswith("<thead") else None
    if header_fmt != fmt:
        kind = {"json": "a JSON 2-D array", "html": "a <thead> fragment"}.get(header_fmt, "neither a JSON array nor a <thead> fragment")
        raise ValueError(
            f"paragraph_semantic: document {ctx.doc_id!r}: table {table_id!r} is format={fmt!r} but its "
            f"table_header in .tables.json is {kind}; the tables sidecar is corrupted or mis-attributed"
        )
    if fmt == "html":
        # Tags stay single-line: content.split("\n") must give the paragraphs back.
        return _TableHeader("html", re.sub(r"\s*\n\s*", " ", stripped))
    try:
        rows = json.loads(stripped)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"paragraph_semantic: document {ctx.doc_id!r}: table {table_id!r} has a table_header in "
            f".tables.json that is not valid JSON ({err}); the tables sidecar is corrupted"
        ) from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        raise ValueError(
            f"paragraph_semantic: document {ctx.doc_id!r}: table {table_id!r} has a table_header that is "
            f"not a JSON 2-D array; the tables sidecar is corrupted"
        )
    return _TableHeader("json", json.dumps(rows, ensure_ascii=False), tuple(rows))
