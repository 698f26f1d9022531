"""``.txt`` and ``.md``: the decoded text itself, with Markdown heading blocks.

The invariant a caller relies on: ``doc.text`` is the decoded file with newlines
normalised to ``\\n`` and control characters other than tab/newline removed (a NUL
byte is not text and breaks downstream stores); one page. Blocks are heading
sections: block ``i`` spans ``doc.text`` from its heading line (0 for a preamble)
to the next heading line, blocks are in order and do not overlap.

Headings: ATX (``## Title``) and setext (``Title`` over ``===`` / ``---``, when the
title is a one-line paragraph, so a ruled box of ``=`` in a plain-text file is not
mistaken for one). In a ``.txt`` a run of ``#`` lines is a comment block, not a
heading sequence. Nothing inside a code fence is inspected: a ``# comment`` in a
fenced block is code, and the fence stays whole in one block.

Block ``content`` (the sidecar form) differs from the span on purpose: paragraph
lines are re-joined into one line per paragraph (soft-wrapped prose is one
paragraph; CJK lines join without a space), code lines stay as they are, a GFM pipe
table becomes ``<table id=... format="json">[[...]]</table>`` with its header row as
``table_header``, and a raw HTML ``<table>`` becomes a ``format="html"`` tag. In
Markdown, backslash escapes are undone outside code spans, and YAML front matter,
horizontal rules and pandoc's ``<div>`` wrapper lines are markup, not content.
"""

from __future__ import annotations

import json
import re
import unicodedata

from chunking.model import ParsedDocument, Page
from chunking.parsers.build import Outline, attach_tables, finish_blocks, make_block, table_id_prefix
from chunking.parsers.encoding import decode_text
from chunking.parsers.errors import DocumentError
from chunking.parsers.html import html_table_tag

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,9}[.)]|\(?[a-zA-Z0-9]{1,3}\))\s+")
_TABLE_DELIM = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_HTML_WRAPPER = re.compile(r"^</?(?:div|span|section)(?:\s[^>]*)?>$", re.IGNORECASE)
_HTML_WRAPPER_OPEN = re.compile(r"^<(?:div|span|section)(?:\s[^>]*)?$", re.IGNORECASE)
_THEMATIC_BREAK = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_MAX_HEADING_CHARS = 200
# CommonMark backslash escapes (``\>`` for ``>``): markup, not text.
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def normalise_text(raw: str) -> str:
    return _CONTROL.sub("", raw.replace("\r\n", "\n").replace("\r", "\n"))


def parse_text(data: bytes, source: str, doc_id: str, sha256: str, *, markdown: bool) -> ParsedDocument:
    """Parse a ``.txt`` (``markdown=False``) or ``.md`` file; see the module docstring."""
    raw, encoding = decode_text(data, source)
    text = normalise_text(raw)
    if not text.strip():
        raise DocumentError(source, "no text: the file holds only whitespace or control characters")
    outline, tables = _outline(text, table_id_prefix(doc_id, sha256), markdown=markdown)
    drafts = outline.result()
    # The section of block i runs to the start of block i+1.
    for draft, nxt in zip(drafts, drafts[1:] + [None]):
        if draft.char_start is None:
            draft.char_start = 0
        draft.char_end = nxt.char_start if nxt is not None else len(text)
    finished = finish_blocks(doc_id, drafts)
    blocks = [make_block(i, d, c, b, d.char_start, d.char_end, 0, 0) for i, (d, c, b) in enumerate(finished)]
    return ParsedDocument(
        doc_id=doc_id, source_name=source, format="md" if markdown else "txt", text=text,
        pages=[Page(page_num=0, char_offset=0, text=text)], blocks=blocks,
        tables=attach_tables(tables, finished), encoding=encoding, sha256=sha256,
    )


def _outline(text: str, table_prefix: str, *, markdown: bool) -> tuple[Outline, dict[str, dict]]:
    lines = text.split("\n")
    starts = [0] * len(lines)
    pos = 0
    for i, line in enumerate(lines):
        starts[i] = pos
        pos += len(line) + 1
    outline = Outline()
    tables: dict[str, dict] = {}
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            joined = _join_wrapped(paragraph)
            outline.para(_unescape(joined) if markdown else joined)
            paragraph.clear()

    i = _front_matter_end(lines) if markdown else 0
    n = len(lines)
    previous_blank = True  # start of file counts as after a blank line
    while i < n:
        line = lines[i]
        stripped = line.strip()
        fence = _FENCE.match(line)
        if fence:
            flush()
            marker = fence.group(1)
            end = i + 1
            while end < n and not lines[end].lstrip().startswith(marker[0] * len(marker)):
                end += 1
            outline.para("\n".join(lines[i:end + 1]))
            i = end + 1
            previous_blank = False
            continue
        atx = _ATX.match(line)
        if atx and (atx.group(2) or "").strip() and (markdown or not _comment_block(lines, i)):
            flush()
            heading = atx.group(2)
            outline.heading(_unescape(heading) if markdown else heading, len(atx.group(1)), char_start=starts[i])
            i += 1
            previous_blank = True
            continue
        if (stripped and previous_blank and i + 1 < n and _SETEXT.match(lines[i + 1])
                and not _SETEXT.match(line) and len(stripped) <= _MAX_HEADING_CHARS
                and not (markdown and line.startswith("    "))):
            flush()
            title = _unescape(stripped) if markdown else stripped
            outline.heading(title, 1 if lines[i + 1].strip()[0] == "=" else 2, char_start=starts[i])
            i += 2
            previous_blank = True
            continue
        if "|" in line and i + 1 < n and _TABLE_DELIM.match(lines[i + 1]) and "|" in lines[i + 1]:
            header = _cells(line)
            if len(header) == len(_cells(lines[i + 1])) and len(header) > 0:
                flush()
                end = i + 2
                while end < n and lines[end].strip() and "|" in lines[end]:
                    end += 1
                rows = [header] + [_pad(_cells(r), len(header)) for r in lines[i + 2:end]]
                if markdown:
                    rows = [[_unescape(c) for c in row] for row in rows]
                outline.para(_json_table(tables, table_prefix, rows))
                i = end
                previous_blank = False
                continue
        if markdown and stripped.lower().startswith("<table"):
            end = i
            while end < n and "</table>" not in lines[end].lower():
                end += 1
            flush()
            outline.para(html_table_tag("\n".join(lines[i:end + 1]), tables, table_prefix))
            i = end + 1
            previous_blank = False
            continue
        if not stripped:
            flush()
            previous_blank = True
        elif markdown and _THEMATIC_BREAK.match(line):
            flush()  # a horizontal rule: a boundary, not text
            previous_blank = True
        elif markdown and (_HTML_WRAPPER.match(stripped) or _HTML_WRAPPER_OPEN.match(stripped)):
            # pandoc's <div class="..."> wrappers: markup, not text. The opening tag
            # may wrap its attributes over a few lines.
            flush()
            end = i
            while ">" not in lines[end] and end + 1 < n and end - i < 8:
                end += 1
            i = end
            previous_blank = True
        elif markdown and (line.startswith("    ") or line.startswith("\t")) and (previous_blank or not paragraph):
            # Indented code: its lines stay lines.
            flush()
            outline.para(line)
            previous_blank = False
        else:
            if _LIST_ITEM.match(line) or (paragraph and paragraph[-1].endswith("  ")):
                flush()
            paragraph.append(line)
            previous_blank = False
        i += 1
    flush()
    return outline, tables


def _front_matter_end(lines: list[str]) -> int:
    """Index of the first line after a YAML front matter block (0 when none)."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    for j in range(1, min(len(lines), 200)):
        if lines[j].rstrip() in ("---", "..."):
            return j + 1
    return 0


def _unescape(text: str) -> str:
    """Drop Markdown backslash escapes outside code spans."""
    parts = text.split("`")
    return "`".join(_ESCAPE.sub(r"\1", part) if i % 2 == 0 else part for i, part in enumerate(parts))


def _comment_block(lines: list[str], i: int) -> bool:
    """In plain text, a run of ``#`` lines is a comment block, not a heading sequence."""
    neighbours = [lines[j] for j in (i - 1, i + 1) if 0 <= j < len(lines)]
    return any(line.lstrip().startswith("#") for line in neighbours)


def _join_wrapped(lines: list[str]) -> str:
    out = lines[0].strip()
    for line in lines[1:]:
        line = line.strip()
        if out and line and _is_wide(out[-1]) and _is_wide(line[0]):
            out += line
        else:
            out += " " + line
    return out


def _is_wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def _cells(row: str) -> list[str]:
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(row)]


def _pad(cells: list[str], width: int) -> list[str]:
    return (cells + [""] * width)[:width]


def _json_table(tables: dict[str, dict], prefix: str, rows: list[list[str]]) -> str:
    table_id = f"{prefix}-{len(tables) + 1:04d}"
    body = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    tables[table_id] = {
        "dimension": [len(rows), len(rows[0]) if rows else 0],
        "format": "json",
        "content": body,
        "table_header": json.dumps(rows[:1], ensure_ascii=False),
    }
    return f'<table id="{table_id}" format="json">{body}</table>'
