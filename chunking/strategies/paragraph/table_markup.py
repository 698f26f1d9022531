"""Table markup shared by TableRowSplit and HeaderRecovery: tag attributes, format, HTML rows."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Sequence


_TABLE_TAG = re.compile(r"^<table(?P<attrs>\s[^>]*)?>(?P<body>.*)</table>$", re.DOTALL | re.IGNORECASE)
_ATTR = r'(?:^|\s){name}\s*=\s*"([^"]*)"'
_HTML_ROW = re.compile(r"<tr\b[^>]*>.*?</tr\s*>", re.DOTALL | re.IGNORECASE)
_HTML_SECTION = re.compile(r"<(/?)(thead|tbody|tfoot)\b[^>]*>", re.IGNORECASE)


@dataclass(frozen=True)
class _HtmlRow:
    section: str  # "thead" / "tbody" / "tfoot" / "" (a bare <tr>)
    open_tag: str
    html: str
    span: tuple[int, int] = (0, 0)  # where the row (and any leftover after it) lies in the body


@dataclass(frozen=True)
class _TableHeader:
    """A table's repeating header as stored in ``.tables.json`` (HeaderRecovery)."""

    fmt: str
    text: str  # the JSON rows serialised as in a slice, or the raw <thead> fragment
    rows: tuple[Any, ...] = ()  # JSON header rows


def _attr(attrs: str, name: str) -> str | None:
    match = re.search(_ATTR.format(name=re.escape(name)), attrs or "")
    return match.group(1) if match else None


def _table_format(attrs: str, body: str) -> str | None:
    declared = (_attr(attrs, "format") or "").lower()
    if declared in ("json", "html"):
        return declared
    sniff = body.lstrip()
    if sniff.startswith("["):
        return "json"
    if re.search(r"<(tr|thead|tbody)\b", body, re.IGNORECASE):
        return "html"
    return None


def _html_rows(body: str) -> tuple[str, list[_HtmlRow], str] | None:
    """``(prefix, rows, suffix)`` of an HTML table body, or None without a row structure.

    Section tags (``<thead>``/``<tbody>``/``<tfoot>``) are remembered per row and
    re-emitted around runs of rows; anything else between rows stays with the row
    before it, so no text is lost.
    """
    if re.search(r"<table\b", body, re.IGNORECASE):
        return None  # nested tables have no safe row boundary
    rows: list[_HtmlRow] = []
    prefix, pos, section, open_tag = "", 0, "", ""
    for match in _HTML_ROW.finditer(body):
        between = body[pos : match.start()]
        for tag in _HTML_SECTION.finditer(between):
            section, open_tag = ("", "") if tag.group(1) else (tag.group(2).lower(), tag.group(0))
        leftover = _HTML_SECTION.sub("", between).strip()
        if leftover and rows:
            rows[-1] = replace(rows[-1], html=rows[-1].html + leftover, span=(rows[-1].span[0], match.start()))
        elif leftover:
            prefix += leftover
        rows.append(_HtmlRow(section, open_tag, match.group(0), (match.start(), match.end())))
        pos = match.end()
    if not rows:
        return None
    suffix = _HTML_SECTION.sub("", body[pos:]).strip()
    return prefix, rows, suffix


def _html_body(rows: Sequence[_HtmlRow]) -> str:
    out, current = [], None
    for row in rows:
        if row.section != current:
            if current:
                out.append(f"</{current}>")
            if row.section:
                out.append(row.open_tag or f"<{row.section}>")
            current = row.section
        out.append(row.html)
    if current:
        out.append(f"</{current}>")
    return "".join(out)


def _json_row_spans(body: str) -> list[tuple[int, int]] | None:
    """Where each element of the JSON array ``body`` lies in it, or None when it is not one."""
    decoder = json.JSONDecoder()
    pos = len(body) - len(body.lstrip())
    if not body.startswith("[", pos):
        return None
    pos += 1
    spans: list[tuple[int, int]] = []
    while True:
        while pos < len(body) and body[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(body) or body[pos] == "]":
            return spans
        try:
            _, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError:
            return None
        spans.append((pos, end))
        pos = end
