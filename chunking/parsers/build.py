"""Heading-level blocks and the parsed document, shared by every format.

A format parser emits a stream of headings and paragraphs (:class:`Outline`); this
module turns it into LightRAG sidecar blocks (format 1.0) and a
:class:`~chunking.model.ParsedDocument`.

Invariants a caller relies on:

* A block's ``content`` is its heading line (``"#" * min(max(level, 1), 6) + " " +
  heading``, absent for a preamble) followed by its paragraphs, joined by ``"\\n"``;
  every paragraph is one line (tables, figures and equations are single-line tags),
  control characters stripped, so ``content.split("\\n")`` gives the paragraphs back.
* ``block_id`` is the md5 hex of ``f"{doc_id}:{index}:{heading}:{content}"``: stable
  across re-parses of the same bytes under the same ``doc_id``.
* For structured formats (:func:`assemble_structured`) ``doc.text`` is the block
  contents joined by a blank line, so ``doc.text[b.char_start:b.char_end] ==
  b.content`` for every block, and pages partition ``doc.text`` at the first line
  that lies on each page.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from chunking.limits import check_page_count
from chunking.model import Block, Page, ParsedDocument

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_WS = re.compile(r"\s+")
_TABLE_ID = re.compile(r'^<table\s+(?:[^>]*\s)?id="([^"]+)"')
BLOCK_SEPARATOR = "\n\n"


def strip_control(text: str) -> str:
    """``text`` without C0 control characters other than tab and newline (and DEL)."""
    return _CONTROL.sub("", text)


def one_line(text: str) -> str:
    """Collapse all whitespace (newlines included) to single spaces; strip control chars."""
    return _WS.sub(" ", strip_control(text)).strip()


def heading_line(heading: str, level: int) -> str:
    return "#" * min(max(level, 1), 6) + " " + heading


def block_id(doc_id: str, index: int, heading: str, content: str) -> str:
    return hashlib.md5(f"{doc_id}:{index}:{heading}:{content}".encode("utf-8")).hexdigest()


def table_id_prefix(doc_id: str, sha256: str) -> str:
    """The ``tb-<dochash>`` part of a table id: unique per document, stable per bytes."""
    return "tb-" + hashlib.md5(f"{doc_id}:{sha256}".encode("utf-8")).hexdigest()[:16]


@dataclass
class Para:
    text: str
    page: int = 0


@dataclass
class DraftBlock:
    heading: str = ""
    level: int = 0
    parent_headings: list[str] = field(default_factory=list)
    heading_page: int = 0
    paras: list[Para] = field(default_factory=list)
    # Only for formats whose text is the source itself (txt/md): the span of the
    # heading section in the decoded text.
    char_start: int | None = None
    char_end: int | None = None
    # Only for blocks read from a foreign sidecar: its content lines verbatim, its
    # blockid and positions (kept rather than recomputed).
    raw_lines: list[tuple[str, int]] | None = None
    block_id: str | None = None
    positions: list[dict[str, Any]] = field(default_factory=list)

    def lines(self) -> list[tuple[str, int]]:
        if self.raw_lines is not None:
            return list(self.raw_lines)
        head = [(heading_line(self.heading, self.level), self.heading_page)] if self.heading else []
        return head + [(p.text, p.page) for p in self.paras]


class Outline:
    """Collects headings and paragraphs into heading-level blocks.

    A heading of level ``L`` closes the current block and becomes the ``heading`` of
    the next one; its ``parent_headings`` are the open headings shallower than ``L``
    (a heading no deeper than an open one closes it, as in LightRAG's
    ``current_heading_stack``). Text before the first heading forms a level-0
    preamble block, dropped when empty.
    """

    def __init__(self) -> None:
        self.blocks: list[DraftBlock] = [DraftBlock()]
        self._stack: list[tuple[int, str]] = []

    def heading(self, text: str, level: int, page: int = 0, char_start: int | None = None) -> None:
        # A trailing pilcrow is a permalink that HTML/DOCX/PDF exports carry along.
        text = one_line(text).rstrip("¶").rstrip()
        if not text:
            return
        level = min(max(level, 1), 9)
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        parents = [h for _, h in self._stack]
        self._stack.append((level, text))
        self.blocks.append(DraftBlock(text, level, parents, page, char_start=char_start))

    def para(self, text: str, page: int = 0) -> None:
        for line in strip_control(text).split("\n"):
            line = line.rstrip()
            if line.strip():
                self.blocks[-1].paras.append(Para(line, page))

    def result(self) -> list[DraftBlock]:
        first = self.blocks[0]
        return self.blocks if first.paras else self.blocks[1:]


def finish_blocks(doc_id: str, drafts: list[DraftBlock]) -> list[tuple[DraftBlock, str, str]]:
    """``(draft, content, block_id)`` per block."""
    out = []
    for index, draft in enumerate(drafts):
        content = "\n".join(text for text, _ in draft.lines())
        out.append((draft, content, draft.block_id or block_id(doc_id, index, draft.heading, content)))
    return out


def attach_tables(tables: dict[str, dict[str, Any]], finished: list[tuple[DraftBlock, str, str]]) -> dict[str, dict[str, Any]]:
    """Tables sidecar entries with the owning block's id, heading and parents filled in,
    in the LightRAG field order."""
    out: dict[str, dict[str, Any]] = {}
    for draft, _, bid in finished:
        for line, _ in draft.lines():
            match = _TABLE_ID.match(line.strip())
            if match and match.group(1) in tables:
                entry = tables[match.group(1)]
                out[match.group(1)] = {
                    "id": match.group(1),
                    "blockid": bid,
                    "heading": draft.heading,
                    "parent_headings": list(draft.parent_headings),
                    "dimension": entry["dimension"],
                    "format": entry["format"],
                    "content": entry["content"],
                    "caption": entry.get("caption", ""),
                    "footnotes": entry.get("footnotes", []),
                    **({"table_header": entry["table_header"]} if entry.get("table_header") else {}),
                }
    return out


def _position(page_start: int, page_end: int, char_start: int, char_end: int) -> dict[str, Any]:
    return {"type": "absolute", "page": page_start, "page_end": page_end, "char_start": char_start, "char_end": char_end}


def make_block(index: int, draft: DraftBlock, content: str, bid: str, char_start: int, char_end: int,
               page_start: int, page_end: int) -> Block:
    return Block(
        block_id=bid, index=index, heading=draft.heading, level=draft.level if draft.heading else 0,
        parent_headings=list(draft.parent_headings), content=content,
        positions=[p for p in draft.positions if p.get("type") != "absolute"]
        + [_position(page_start, page_end, char_start, char_end)],
        char_start=char_start, char_end=char_end,
    )


def assemble_structured(
    *, doc_id: str, source_name: str, fmt: str, sha256: str, drafts: list[DraftBlock],
    tables: dict[str, dict[str, Any]] | None = None, page_count: int = 1, encoding: str | None = None,
    metadata: dict[str, Any] | None = None, max_pages: int | None = None,
) -> ParsedDocument:
    """A document whose text is its block contents joined by a blank line.

    ``page_count`` lets trailing or intermediate empty pages exist (an image-only PDF
    page): each page starts at the first line that lies on it or a later page.
    ``max_pages``: refuse (``LimitExceeded``) before building more pages than that.
    """
    finished = finish_blocks(doc_id, drafts)
    pieces: list[str] = []
    line_starts: list[tuple[int, int]] = []  # (char offset, page) of every line
    spans: list[tuple[int, int]] = []
    pos = 0
    for i, (draft, content, _) in enumerate(finished):
        if i:
            pieces.append(BLOCK_SEPARATOR)
            pos += len(BLOCK_SEPARATOR)
        start = pos
        for j, (line, page) in enumerate(draft.lines()):
            if j:
                pos += 1
            line_starts.append((pos, page))
            pos += len(line)
        pieces.append(content)
        spans.append((start, pos))
    text = "".join(pieces)
    pages_needed = max([page_count] + [p + 1 for _, p in line_starts])
    check_page_count(pages_needed, max_pages, source_name)
    page_offsets = [0] * pages_needed
    # Page k starts at the first line on page >= k; pages only move forward.
    next_page = 1
    for offset, page in line_starts:
        while next_page <= page:
            page_offsets[next_page] = offset
            next_page += 1
    for k in range(next_page, pages_needed):
        page_offsets[k] = len(text)
    bounds = page_offsets + [len(text)]
    pages = [Page(page_num=k, char_offset=bounds[k], text=text[bounds[k]:bounds[k + 1]]) for k in range(pages_needed)]
    doc = ParsedDocument(doc_id=doc_id, source_name=source_name, format=fmt, text=text, pages=pages,
                         encoding=encoding, sha256=sha256, metadata=dict(metadata or {}))
    blocks = []
    for i, ((draft, content, bid), (s, e)) in enumerate(zip(finished, spans)):
        blocks.append(make_block(i, draft, content, bid, s, e, doc.page_at(s), doc.page_at(max(e - 1, s))))
    doc.blocks = blocks
    doc.tables = attach_tables(tables or {}, finished)
    return doc


def document_problems(doc: ParsedDocument) -> list[str]:
    """Violations of the :mod:`chunking.model` invariants (``ParsedDocument.invariant_problems``),
    and of what a parser of this package makes (every block located, its id and heading line);
    empty for a sound document.

    Cheap enough to run on every parsed document (an asset check, a test helper).
    """
    problems = doc.invariant_problems()
    for block in doc.blocks:
        if block.char_start is None or block.char_end is None:
            problems.append(f"block {block.index} has no char span")
            continue
        if doc.metadata.get("sidecar"):
            continue  # ids and content lines are the foreign tool's own
        if block.block_id != block_id(doc.doc_id, block.index, block.heading, block.content):
            problems.append(f"block {block.index} id is not md5(doc_id:index:heading:content)")
        if block.heading and not block.content.startswith(heading_line(block.heading, block.level)):
            problems.append(f"block {block.index} content does not start with its heading line")
    return problems
