"""``paragraph``: LightRAG's P strategy (paragraph-semantic chunking) on the blocks sidecar.

Input is the document's heading-level blocks (``doc.blocks``, one per
``type == "content"`` line of a ``.blocks.jsonl``) and its tables sidecar
(``doc.tables``, the ``.tables.json`` "tables" mapping). The pipeline, stage by
stage (the stage names are the seed's, and the log keywords below are its too)::

    heading_blocks    HeadingBlocks   one content line = one basic block       §3.1
    table_row_split   TableRowSplit   oversized tables cut on row boundaries,
                                      roles first/middle/last/none              §3.2, §3.3.1
    recover_header    HeaderRecovery  the table's header re-injected into its
                                      middle/last slices, budgeted up front     §3.3.3
    table_bridge      TableBridge     bridge text between two split tables
                                      copied to both sides by budget            §3.3.2
    anchor_split      AnchorSplit     over-cap blocks cut at short paragraphs   §3.4
    part_labeling     PartLabeling    ``[part n]`` per original content line    §4.4
    heading_glue      HeadingGlue     body-less heading glued to its child      §3.5
    level_merge       LevelMerge      deepest level first, Phase A / tail
                                      absorption / Phase B                      §3.6

Thresholds derive from N = ``chunk_token_size`` (:class:`Thresholds`). A document
without blocks degrades to the ``recursive`` strategy with a logged warning.

The invariants a caller relies on:

* every chunk has at most N tokens (counted with the given tokenizer on the
  chunk's final text);
* text is duplicated across chunks only where the seed allows it (§3.7): R
  overlap inside one over-long content line, and bridge text between two split
  tables of one content line. Different content lines never share text, table
  row slices never share rows;
* every split table slice is a legal ``<table ...>`` tag with the table's own
  attributes, and its middle/last slices carry the header from ``.tables.json``
  when there is one;
* ``block_ids`` lists every source block a chunk was built from; the char span
  runs from the first to the last of them.

Where we differ from the reference implementation, on purpose:

* Source block ids survive tail absorption (the reference drops them there).
* Tokens are counted about once: each content line once (whole, or line by line
  when AnchorSplit will need the lines), each table row once, R pieces once. A
  merge is decided on its estimate (parts plus joiners, an upper bound since a
  newline join can only let tokens merge across it) and the joined text is
  measured only when the estimate is over the limit by less than the join slack.
  Every chunk is then measured once on its final text; a merge found over the
  cap there (a tokenizer breaking the upper-bound assumption) is undone.
  The lines are laid out in one text as merging joins them, so these counts are
  mostly spans of one encoding of it (``span_counter``; exact, checked against
  the text). A one-line block proven over the cap by a lower bound (its UTF-8
  size over the longest token, or a prefix's count) is not counted at all:
  it goes to R, which measures it anyway.
* Row slices are balanced by row tokens, not by row counts, and a multi-row
  header (JSON rows equal to the stored header, HTML ``<thead>`` rows) is never
  cut from the first data row, so a cut never lands inside a header.
* A table's R fragments (when it has no row structure or a row cannot fit) keep
  the table roles, so they stay frozen against LevelMerge like row slices.
* In AnchorSplit the table role goes to the sub-block that holds the table slice
  (the reference gives it to the first sub-block whatever it holds), and anchors
  found when a sub-block is split again are siblings of the first ones (parent
  path = the content line's path), not children of the anchor before them.
* TableBridge cuts the bridge's prefix and suffix at a word boundary within the
  token budget rather than mid-word.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import math
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping, Sequence

from pydantic import Field

from chunking.model import Block, Chunk, ParsedDocument, attach_provenance
from chunking.strategies import StrategySpec, TokenBudgetConfig
from chunking.strategies.recursive import CJK_SEPARATORS, split_recursive
from chunking.tokenizers import SpanCount, Tokenizer, count_tokens, span_counter

log = logging.getLogger(__name__)

# Threshold ratios of N (the reference's audit-mode constants 8000/6000/5000/3000/1600/1000).
IDEAL_RATIO = 0.75
TABLE_MAX_RATIO = 0.625
TABLE_IDEAL_RATIO = 0.375
TABLE_MIN_LAST_RATIO = 0.32  # of table_max
SMALL_TAIL_RATIO = 0.125
MAX_ANCHOR_CANDIDATE_LENGTH = 100  # characters: an anchor is a short line, whatever N is

# Joining two texts at a newline can shorten their summed token count by at most
# this much for BPE tokenizers (tokens merging across the newline, e.g. ".\n").
JOIN_SLACK = 2
# A block of more characters than this times N is probably over N tokens (English
# runs ~4 characters a token, CJK ~1): its lines are counted instead of the whole.
LIKELY_OVER_CHARS_PER_TOKEN = 3
# A one-line block this many characters times N long is first measured on a
# prefix of that length: when the prefix alone is over N the whole is too, and the
# block goes to R without a count of its own (R measures it anyway).
PREFIX_CHARS_PER_TOKEN = 12
LINE_JOINER = "\n"  # between the paragraphs of one block
BLOCK_JOINER = "\n\n"  # between merged blocks

NONE, FIRST, MIDDLE, LAST = "none", "first", "middle", "last"

_HEADING_LINE = re.compile(r"^#{1,6} +")
_WORD_BEFORE_SPACE = re.compile(r"\S(?= )")
_PART_SUFFIX = re.compile(r"\s*\[part\s+\d+\]\s*$", re.IGNORECASE)
_LEGACY_PART_SUFFIX = re.compile(r"\s*\[表格片段\d+\]\s*$")
_TABLE_TAG = re.compile(r"^<table(?P<attrs>\s[^>]*)?>(?P<body>.*)</table>$", re.DOTALL | re.IGNORECASE)
_ATTR = r'(?:^|\s){name}\s*=\s*"([^"]*)"'
_HTML_ROW = re.compile(r"<tr\b[^>]*>.*?</tr\s*>", re.DOTALL | re.IGNORECASE)
_HTML_SECTION = re.compile(r"<(/?)(thead|tbody|tfoot)\b[^>]*>", re.IGNORECASE)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Thresholds:
    """The seed's §3.8 thresholds, all derived from N = chunk_token_size."""

    target_max: int
    target_ideal: int
    table_max: int
    table_ideal: int
    table_min_last: int
    small_tail: int

    @classmethod
    def from_size(cls, n: int) -> "Thresholds":
        n = max(int(n), 1)
        table_max = max(int(n * TABLE_MAX_RATIO), 1)
        return cls(
            target_max=n,
            target_ideal=max(int(n * IDEAL_RATIO), 1),
            table_max=table_max,
            table_ideal=max(int(n * TABLE_IDEAL_RATIO), 1),
            table_min_last=max(int(table_max * TABLE_MIN_LAST_RATIO), 1),
            small_tail=max(int(n * SMALL_TAIL_RATIO), 1),
        )


class ParagraphConfig(TokenBudgetConfig):
    """Configuration of the ``paragraph`` strategy (LightRAG P defaults)."""

    chunk_token_size: int = Field(2000, ge=1, description="N: the hard cap per chunk; every threshold derives from it.")
    chunk_overlap_token_size: int = Field(
        100, ge=0, description="R overlap inside one over-long content line, and the per-side table bridge budget."
    )
    separators: tuple[str, ...] = Field(CJK_SEPARATORS, description="R cascade for the character-level fallbacks.")

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds.from_size(self.chunk_token_size)


# --------------------------------------------------------------------------- internal model


@dataclass(frozen=True)
class Paragraph:
    """One line of a block. ``role`` is set on a split table's slices (and fragments)."""

    text: str
    is_table: bool = False
    role: str = NONE
    table_fragment: bool = False  # an R piece of a table that had to degrade: partial markup by design
    at: int = -1  # where the line starts in the context's layout text (-1: not laid out)


@dataclass(frozen=True)
class Section:
    """A block between stages: identity, paragraphs, and where it came from.

    ``tokens`` is exact when ``pending == 0``; otherwise it is the sum of the parts
    and their joiners, ``pending`` being the number of joins not yet measured. With
    ``over_cap`` set it is only a lower bound, above target_max: the block is
    known to be over the cap and must be split (AnchorSplit does, first thing).
    """

    heading: str
    base_heading: str  # ``heading`` without a ``[part n]`` suffix: path checks use it
    parent_headings: tuple[str, ...]
    level: int
    paragraphs: tuple[Paragraph, ...]
    content: str
    tokens: int
    pending: int
    sources: tuple[int, ...]  # indices into the document's blocks
    line: int  # the content line it was cut from (PartLabeling numbers per line)
    parts: tuple["Section", ...] = ()  # what a merge joined, to undo it if it overflows
    line_counts: tuple[int, ...] | None = None  # tokens per paragraph, when they were counted
    over_cap: bool = False  # ``tokens`` is a lower bound above target_max, not a count

    @cached_property
    def role(self) -> str:
        """The table role: the role of the split-table slice it holds, else ``none``."""
        for p in self.paragraphs:
            if p.role != NONE:
                return p.role
        return NONE

    @property
    def path(self) -> tuple[str, ...]:
        return (*self.parent_headings, self.base_heading) if self.base_heading else self.parent_headings

    @cached_property
    def heading_only(self) -> bool:
        lines = [ln for ln in self.content.split("\n") if ln.strip()]
        return bool(lines) and all(_HEADING_LINE.match(ln) for ln in lines)


@dataclass(frozen=True)
class ParagraphPiece:
    """One output chunk of :func:`split_paragraph_semantic`."""

    text: str
    tokens: int
    heading: str  # with its ``[part n]`` suffix
    base_heading: str
    level: int
    parent_headings: tuple[str, ...]
    sources: tuple[int, ...]  # indices into the input blocks, in order, unique
    table_fragment: bool = False  # holds R pieces of a degraded table (unbalanced <table> markup)


@dataclass
class _Context:
    tokenizer: Tokenizer
    limits: Thresholds
    overlap: int
    separators: tuple[str, ...]
    tables: Mapping[str, Mapping[str, Any]]
    doc_id: str
    _joiner_tokens: dict[str, int] = field(default_factory=dict)
    _measured: dict[str, int] = field(default_factory=dict)
    _longest_token: int | None = None
    # The blocks' lines laid out as sections join them (lines by LINE_JOINER, blocks
    # by BLOCK_JOINER): a section's text, merged or not, is mostly a span of it.
    layout: str = ""
    _layout_count: SpanCount | None = None

    def count(self, text: str) -> int:
        return count_tokens(self.tokenizer, text) if text else 0

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def count_at(self, text: str, at: int) -> int:
        """``count(text)``; from one encoding of the layout when ``text`` lies at ``at`` in it.

        The layout is checked to hold exactly ``text`` there, so the answer is the
        text's own count whatever ``at`` claims (a stale position only costs a count).
        """
        if at < 0 or not text or not self.layout.startswith(text, at):
            return self.count(text)
        if self._layout_count is None:
            self._layout_count = span_counter(self.tokenizer, self.layout)
        return self._layout_count(at, at + len(text))

    def count_lines(self, paragraphs: Sequence[Paragraph]) -> list[int]:
        return [self.count_at(p.text, p.at) for p in paragraphs]

    def over_limit_bound(self, text: str, limit: int) -> int | None:
        """A lower bound on ``text``'s tokens that proves it is over ``limit``, or None.

        Cheaper than counting a long text: its UTF-8 size over the longest token
        (tokenizers that expose ``token_byte_lengths``, i.e. tiktoken), else the
        count of a prefix ending at a word before a space. A word end before a
        space is a pre-token boundary for GPT-style BPE, so the rest can only add
        tokens; other tokenizers get the ``JOIN_SLACK`` allowance of a join.
        """
        byte_lengths = getattr(self.tokenizer, "token_byte_lengths", None)
        if byte_lengths is not None:
            if self._longest_token is None:
                self._longest_token = max(int(byte_lengths().max()), 1)
            # A cheap upper bound on the UTF-8 size first: 4 bytes a char at most.
            if 4 * len(text) > self._longest_token * limit:
                bound = -(-len(text.encode("utf-8", "surrogatepass")) // self._longest_token)
                if bound > limit:
                    return bound
        start = PREFIX_CHARS_PER_TOKEN * limit
        if len(text) < 2 * start:
            return None
        match = _WORD_BEFORE_SPACE.search(text, start - 1)
        if match is None or match.end() > len(text) // 2:
            return None
        bound = self.count(text[: match.end()]) - JOIN_SLACK
        return bound if bound > limit else None

    def joiner(self, joiner: str) -> int:
        if joiner not in self._joiner_tokens:
            self._joiner_tokens[joiner] = self.count(joiner)
        return self._joiner_tokens[joiner]

    def fits(
        self, tokens: int, pending: int, text: Callable[[], str], limit: int, at: int = -1
    ) -> tuple[bool, int, int]:
        """Is the text within ``limit``? Measures it only when the estimate cannot tell.

        The estimate (parts plus joiners) is an upper bound in practice: a join at a
        newline can only let tokens merge across it, shortening the text by up to
        ``JOIN_SLACK`` per unmeasured join. So an estimate within the limit fits, one
        beyond the limit by more than the slack does not, and only the band between
        is measured. (The final measurement of every chunk backs the upper-bound
        assumption: a merge found over the cap there is undone.) Returns ``(fits,
        tokens, pending)`` with the count to keep for the text; ``at`` is where the
        text starts in the layout (see :meth:`count_at`).
        """
        if tokens <= limit:
            return True, tokens, pending
        if tokens - JOIN_SLACK * pending > limit:
            return False, tokens, pending
        joined = text()
        # LevelMerge retries a refused merge on each pass until nothing changes: measure once.
        exact = self._measured.get(joined)
        if exact is None:
            exact = self._measured[joined] = self.count_at(joined, at)
        return exact <= limit, exact, 0

    def recursive(self, text: str, cap: int, overlap: int) -> list[tuple[str, int]]:
        """R character split (the seed's ``chunking_by_recursive_character`` fallback): (text, tokens)."""
        cap = max(cap, 1)
        spans = split_recursive(text, self.tokenizer, cap, min(overlap, cap - 1), self.separators)
        return [(s.text, s.tokens) for s in spans]


def _section(
    template: Section, paragraphs: Sequence[Paragraph], ctx: _Context, counts: Sequence[int] | None = None, **changes: Any
) -> Section:
    """A section with ``template``'s identity holding ``paragraphs`` (counted, or summed from ``counts``)."""
    content = LINE_JOINER.join(p.text for p in paragraphs)
    if counts is None:
        tokens, pending = ctx.count_at(content, _at(paragraphs)), 0
    else:
        tokens = sum(counts) + ctx.joiner(LINE_JOINER) * (len(paragraphs) - 1)
        pending = len(paragraphs) - 1
    return replace(
        template, paragraphs=tuple(paragraphs), content=content, tokens=tokens, pending=pending, parts=(),
        line_counts=tuple(counts) if counts is not None else None, over_cap=False, **changes,
    )


def _at(paragraphs: Sequence[Paragraph]) -> int:
    """Where text built from ``paragraphs`` starts in the layout (it starts with the first one)."""
    return paragraphs[0].at if paragraphs else -1


def _is_table_line(text: str) -> bool:
    stripped = text.strip()
    return stripped.startswith("<table ") and stripped.endswith("</table>")


def _strip_part_suffix(heading: str) -> str:
    cleaned = (heading or "").rstrip()
    while True:
        shorter = _LEGACY_PART_SUFFIX.sub("", _PART_SUFFIX.sub("", cleaned)).rstrip()
        if shorter == cleaned:
            return cleaned
        cleaned = shorter


# --------------------------------------------------------------------------- HeadingBlocks §3.1


def heading_blocks(blocks: Sequence[Block], ctx: _Context) -> list[Section]:
    """HeadingBlocks: every non-empty content line is one basic block, in order.

    Heading identification is entirely the parser's; a level of 0 (preamble,
    missing) counts as 1. Each block is measured here, once: as a whole, or line
    by line when it is likely over target_max (AnchorSplit needs its line counts
    then). "Likely" is only a cost guess, never a decision: a block counted whole
    and found over the cap has its lines counted by AnchorSplit. A one-line block
    proven over the cap by :meth:`_Context.over_limit_bound` is not counted at all.

    The lines are laid out in ``ctx.layout`` as merging joins them, so most counts
    (lines, blocks, merges, final chunks) are spans of one encoding of it.
    """
    limit = ctx.limits.target_max
    staged: list[tuple[Section, tuple[Paragraph, ...], bool]] = []
    layout: list[str] = []
    at = 0
    for i, block in enumerate(blocks):
        lines = [ln for ln in block.content.split("\n") if ln.strip()]
        if not lines:
            continue
        heading = block.heading or ""
        template = Section(
            heading=heading,
            base_heading=_strip_part_suffix(heading),
            parent_headings=tuple(block.parent_headings or ()),
            level=block.level if block.level and block.level > 0 else 1,
            paragraphs=(),
            content="",
            tokens=0,
            pending=0,
            sources=(i,),
            line=i,
        )
        likely_over = len(block.content) > LIKELY_OVER_CHARS_PER_TOKEN * limit
        if likely_over and len(lines) == 1 and not _is_table_line(lines[0]):
            bound = ctx.over_limit_bound(lines[0], limit)
            if bound is not None:
                # Bound for R, which measures it itself: kept out of the layout.
                paragraphs = (Paragraph(lines[0]),)
                over = replace(template, paragraphs=paragraphs, content=lines[0], tokens=bound, over_cap=True)
                staged.append((over, paragraphs, False))
                continue
        if layout:
            layout.append(BLOCK_JOINER)
            at += len(BLOCK_JOINER)
        paragraphs = []
        for ln in lines:
            # The substring test first: most lines are prose, and it spares a strip.
            paragraphs.append(Paragraph(ln, "</table>" in ln and _is_table_line(ln), at=at))
            at += len(ln) + len(LINE_JOINER)
        at -= len(LINE_JOINER)
        layout.append(LINE_JOINER.join(lines))
        staged.append((template, tuple(paragraphs), likely_over and len(lines) > 1))
    ctx.layout = "".join(layout)
    out = []
    for template, paragraphs, count_lines in staged:
        if template.over_cap:
            out.append(template)
        else:
            out.append(_section(template, paragraphs, ctx, ctx.count_lines(paragraphs) if count_lines else None))
    return out


# --------------------------------------------------------------------------- tables: markup


@dataclass(frozen=True)
class _HtmlRow:
    section: str  # "thead" / "tbody" / "tfoot" / "" (a bare <tr>)
    open_tag: str
    html: str


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
            rows[-1] = replace(rows[-1], html=rows[-1].html + leftover)
        elif leftover:
            prefix += leftover
        rows.append(_HtmlRow(section, open_tag, match.group(0)))
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


# --------------------------------------------------------------------------- HeaderRecovery §3.3.3


def recover_header(attrs: str, fmt: str, ctx: _Context) -> _TableHeader | None:
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


# --------------------------------------------------------------------------- TableRowSplit §3.2


@dataclass(frozen=True)
class _TableLimits:
    slice_max: int  # a slice of several rows must fit this
    slice_ideal: int
    last_min: int  # a smaller last slice is swallowed back when it fits
    row_max: int  # a single-row slice (with its header) must fit this, else the table degrades


class _RowTable:
    """A table with a row structure: serialises any run of units as a legal ``<table>``.

    A unit is a run of rows that is never cut: one row, or a leading header with
    the first row after it.
    """

    def __init__(self, attrs: str, fmt: str, units: list[list[Any]], header: _TableHeader | None,
                 prefix: str = "", suffix: str = "") -> None:
        self.attrs, self.fmt, self.units, self.header = attrs, fmt, units, header
        self.prefix, self.suffix = prefix, suffix

    def unit_text(self, unit: list[Any]) -> str:
        if self.fmt == "json":
            return ", ".join(json.dumps(r, ensure_ascii=False) for r in unit)
        return "".join(r.html for r in unit)

    def header_text(self) -> str:
        return self.header.text if self.header else ""

    def render(self, lo: int, hi: int, n_units: int) -> str:
        rows = [r for unit in self.units[lo:hi] for r in unit]
        first, last = lo == 0, hi == n_units
        if self.fmt == "json":
            if not first and self.header and list(rows[: len(self.header.rows)]) != list(self.header.rows):
                rows = [*self.header.rows, *rows]
            body = json.dumps(rows, ensure_ascii=False)
        else:
            body = _html_body(rows)
            # A slice that already has <thead> rows (a cut inside the header) is not given a second one.
            if not first and self.header and not any(r.section == "thead" for r in rows):
                body = self.header.text + body
            body = (self.prefix if first else "") + body + (self.suffix if last else "")
        return f"<table{self.attrs}>{body}</table>"


def _row_table(text: str, ctx: _Context) -> _RowTable | None:
    """The row structure of a ``<table>`` line, or None when it has none (R handles it)."""
    match = _TABLE_TAG.match(text.strip())
    if not match:
        return None
    attrs, body = match.group("attrs") or "", match.group("body")
    fmt = _table_format(attrs, body)
    if fmt is None:
        return None
    header = recover_header(attrs, fmt, ctx)
    if fmt == "json":
        try:
            rows = json.loads(body)
        except json.JSONDecodeError:
            return None
        if not isinstance(rows, list) or len(rows) < 2:
            return None
        lead = len(header.rows) if header and list(rows[: len(header.rows)]) == list(header.rows) else 0
        units = [rows[: lead + 1]] + [[r] for r in rows[lead + 1 :]] if lead else [[r] for r in rows]
        return _RowTable(attrs, fmt, units, header) if len(units) > 1 else None
    parsed = _html_rows(body)
    if parsed is None:
        return None
    prefix, rows, suffix = parsed
    lead = 0
    while lead < len(rows) and rows[lead].section == "thead":
        lead += 1
    units = [rows[: lead + 1]] + [[r] for r in rows[lead + 1 :]] if lead else [[r] for r in rows]
    return _RowTable(attrs, fmt, units, header, prefix, suffix) if len(units) > 1 else None


def _balanced_cuts(counts: Sequence[int], ideal: int, cap: int) -> list[tuple[int, int]]:
    """Cut units into ``k = max(ceil(T/ideal), ceil(T/cap))`` runs, each cut nearest ``j * T / k``.

    Every run holds at least one unit (``k`` is at most the number of units).
    """
    n, total = len(counts), sum(counts)
    k = min(max(math.ceil(total / max(ideal, 1)), math.ceil(total / max(cap, 1)), 1), n)
    before = [0, *itertools.accumulate(counts)]  # before[c] = tokens of the first c units
    cuts = [0]
    for j in range(1, k):
        target = total * j / k
        lo, hi = cuts[-1] + 1, n - (k - j)
        at = bisect.bisect_left(before, target)
        options = [min(max(c, lo), hi) for c in (at - 1, at)]
        cuts.append(min(options, key=lambda c: abs(before[c] - target)))
    cuts.append(n)
    return list(zip(cuts, cuts[1:]))


def _slice_table(table: _RowTable, ctx: _Context, limits: _TableLimits) -> list[str] | None:
    """Row slices of ``table`` within the limits, or None when a single row cannot fit."""
    n = len(table.units)
    counts = ctx.count_many([table.unit_text(u) for u in table.units])
    # Budget the <table {attrs}></table> wrapper and the header each later slice carries.
    overhead = ctx.count(f"<table{table.attrs}></table>") + ctx.count(table.header_text())
    body_max = max(limits.slice_max - overhead, 1)
    body_ideal = max(min(limits.slice_ideal, limits.slice_max) - overhead, 1)

    slices: list[tuple[int, int, str, int]] = []
    pending = [(lo, hi) for lo, hi in _balanced_cuts(counts, body_ideal, body_max)]
    while pending:
        lo, hi = pending.pop(0)
        text = table.render(lo, hi, n)
        tokens = ctx.count(text)
        if tokens <= limits.slice_max or (hi - lo == 1 and tokens <= limits.row_max):
            slices.append((lo, hi, text, tokens))
        elif hi - lo == 1:
            return None
        else:
            part = counts[lo:hi]
            halves = _balanced_cuts(part, sum(part), max((sum(part) + 1) // 2, 1))
            pending[0:0] = [(lo + a, lo + b) for a, b in (halves if len(halves) > 1 else [(0, 1), (1, hi - lo)])]
    if len(slices) >= 2 and slices[-1][3] < limits.last_min:
        lo = slices[-2][0]
        merged = table.render(lo, n, n)
        tokens = ctx.count(merged)
        if tokens <= limits.slice_max:
            slices[-2:] = [(lo, n, merged, tokens)]
    return [s[2] for s in slices]


def split_table(text: str, ctx: _Context, limits: _TableLimits) -> list[Paragraph]:
    """Slices of one oversized table line, in order (their roles are set by the caller).

    Row slices when the table has a JSON/HTML row structure (header re-injected);
    otherwise, or when a single row cannot fit ``row_max`` with its header, an R
    split of the original tag, header and all, with a warning. Raises ValueError
    for a header whose format disagrees with the table's (HeaderRecovery).
    """
    table = _row_table(text, ctx)
    slices = _slice_table(table, ctx, limits) if table is not None else None
    if slices is not None:
        return [Paragraph(s, is_table=True) for s in slices]
    reason = "has no JSON/HTML row structure" if table is None else "has a row that cannot fit the cap with its header"
    log.warning(
        "paragraph_semantic: document %r: a table (%s...) %s; fallback to recursive_character for that table "
        "(table_chunk_role kept on its fragments)",
        ctx.doc_id, text[:40], reason,
    )
    return [Paragraph(piece, table_fragment=True) for piece, _ in ctx.recursive(text, limits.slice_max, 0)]


def table_row_split(section: Section, ctx: _Context) -> list[Section]:
    """TableRowSplit: cut the tables over table_max and glue slices by role (§3.3.1).

    ``first`` joins the text accumulated before it (the table's lead-in),
    ``middle`` stands alone, ``last`` starts a fresh accumulation (so the trailing
    commentary follows it). Between a ``last`` and the next table's ``first`` the
    bridge text goes to both by :func:`table_bridge`.
    """
    lim = ctx.limits
    tables = [p for p in section.paragraphs if p.is_table]
    if not tables:
        return [section]
    table_counts = dict(zip((p.text for p in tables), ctx.count_lines(tables)))
    if all(table_counts[p.text] <= lim.table_max for p in tables):
        return [section]
    limits = _TableLimits(lim.table_max, lim.table_ideal, lim.table_min_last, lim.target_max)

    out: list[Section] = []
    acc: list[Paragraph] = []

    def flush() -> None:
        if acc:
            out.append(_section(section, acc, ctx))
            acc.clear()

    for para in section.paragraphs:
        if not (para.is_table and table_counts[para.text] > lim.table_max):
            acc.append(para)
            continue
        pieces = split_table(para.text, ctx, limits)
        if len(pieces) <= 1:
            acc.append(para)  # nothing to gain: keep the original line
            continue
        roles = [FIRST] + [MIDDLE] * (len(pieces) - 2) + [LAST]
        for piece, role in zip(pieces, roles):
            piece = replace(piece, role=role)
            if role == FIRST:
                if acc and acc[0].role == LAST:
                    left, middle, right = table_bridge(acc[0], acc[1:], piece, ctx)
                    out.append(_section(section, left, ctx))
                    if middle:
                        out.append(_section(section, middle, ctx))
                    acc[:] = right
                acc.append(piece)
            elif role == MIDDLE:
                flush()
                out.append(_section(section, [piece], ctx))
            else:
                flush()
                acc.append(piece)
    flush()
    return out


# --------------------------------------------------------------------------- TableBridge §3.3.2


def _head_within(text: str, tokens: list[int], budget: int, ctx: _Context) -> str:
    """The longest prefix of ``text`` of at most ``budget`` tokens, cut on a character."""
    if budget <= 0:
        return ""
    guess = ctx.tokenizer.decode(tokens[:budget])
    if guess and text.startswith(guess) and ctx.count(guess) <= budget:
        return guess
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ctx.count(text[:mid]) <= budget else (lo, mid - 1)
    return text[:lo]


def _tail_within(text: str, tokens: list[int], budget: int, ctx: _Context) -> str:
    if budget <= 0:
        return ""
    guess = ctx.tokenizer.decode(tokens[-budget:])
    if guess and text.endswith(guess) and ctx.count(guess) <= budget:
        return guess
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ctx.count(text[mid:]) <= budget else (mid + 1, hi)
    return text[lo:]


def _snap_head(text: str, head: str) -> str:
    """``head`` cut back to its last whitespace when the cut falls inside a word."""
    if len(head) < len(text) and head and not head[-1].isspace() and not text[len(head)].isspace():
        at = max(head.rfind(" "), head.rfind("\n"))
        return head[:at] if at > 0 else head
    return head


def _snap_tail(text: str, tail: str) -> str:
    """``tail`` cut forward to its first whitespace when the cut falls inside a word."""
    start = len(text) - len(tail)
    if 0 < start and tail and not tail[0].isspace() and not text[start - 1].isspace():
        at = min((i for i in (tail.find(" "), tail.find("\n")) if i >= 0), default=-1)
        return tail[at + 1 :] if 0 <= at < len(tail) - 1 else tail
    return tail


def _lines(text: str) -> list[Paragraph]:
    return [Paragraph(line) for line in text.split("\n") if line.strip()]


def table_bridge(
    last_slice: Paragraph, bridge: Sequence[Paragraph], next_first: Paragraph, ctx: _Context
) -> tuple[list[Paragraph], list[Paragraph], list[Paragraph]]:
    """TableBridge: share the text between two split tables with both of them.

    Returns ``(left, middle, right)``: the left table's last slice with the head
    of the bridge, a standalone middle chunk (the whole bridge, when it does not
    fit both sides), and the tail of the bridge to put before the right table's
    first slice. Each side's budget is ``min(overlap, room beside its slice,
    N / 2)``; a bridge within both budgets goes whole to both sides. The middle
    chunk overlaps each side by up to ``overlap`` tokens, which covers the whole
    prefix and suffix: it carries the complete bridge, never table text.
    """
    if ctx.overlap <= 0 or not bridge or any(p.is_table for p in bridge):
        return [last_slice, *bridge], [], []
    text = LINE_JOINER.join(p.text for p in bridge)
    tokens = ctx.tokenizer.encode(text)
    sep = ctx.joiner(LINE_JOINER)
    cap = ctx.limits.target_max
    prev_budget = max(min(ctx.overlap, cap - ctx.count(last_slice.text) - sep, cap // 2), 0)
    next_budget = max(min(ctx.overlap, cap - ctx.count(next_first.text) - sep, cap // 2), 0)
    log.debug("paragraph_semantic: bridge of %d tokens, budgets %d / %d", len(tokens), prev_budget, next_budget)
    if len(tokens) <= prev_budget and len(tokens) <= next_budget:
        return [last_slice, *bridge], [], list(bridge)
    prefix = _snap_head(text, _head_within(text, tokens, prev_budget, ctx))
    suffix = _snap_tail(text, _tail_within(text, tokens, next_budget, ctx))
    return [last_slice, *_lines(prefix)], list(bridge), _lines(suffix)


# --------------------------------------------------------------------------- AnchorSplit §3.4


def anchor_split(section: Section, ctx: _Context, origin: Section | None = None) -> list[Section]:
    """AnchorSplit: cut a block over target_max at short-paragraph anchors.

    Candidates are the block's non-table lines of at most 100 characters after
    its first line; for ``k = max(ceil(T/ideal), ceil(T/max))`` sub-blocks the
    candidate nearest each ideal position ``i * T / k`` is chosen, promoted to the
    heading of the sub-block it starts, and the original heading joins that
    sub-block's parent path. Without candidates: :func:`_pack_without_anchor`.
    Sub-blocks still over the cap are split again; the anchors found then are
    siblings of the first ones (their parent path ends with the content line's
    heading, not with the anchor that headed the sub-block).
    """
    origin = origin or section
    lim = ctx.limits
    fits, tokens, pending = ctx.fits(section.tokens, section.pending, lambda: section.content, lim.target_max, _at(section.paragraphs))
    if fits:
        return [replace(section, tokens=tokens, pending=pending)]
    paragraphs = section.paragraphs
    if section.line_counts is not None:
        counts = list(section.line_counts)
    elif len(paragraphs) == 1 and pending == 0:
        counts = [tokens]
    else:
        counts = ctx.count_lines(paragraphs)
    total = sum(counts)
    k = max(math.ceil(total / lim.target_ideal), math.ceil(total / lim.target_max), 2)
    candidates, position = [], 0
    for i, (para, c) in enumerate(zip(paragraphs, counts)):
        if i > 0 and not para.is_table and 0 < len(para.text.strip()) <= MAX_ANCHOR_CANDIDATE_LENGTH:
            candidates.append((i, position))
        position += c
    if not candidates:
        # Warn once per content line; the same fallback inside its sub-blocks is detail.
        (log.warning if origin is section else log.debug)(
            "paragraph_semantic: document %r: block %r exceeds target_max=%d (~%d tokens) with no anchor "
            "line of at most %d chars; table first, then greedy packing, then fallback to recursive_character",
            ctx.doc_id, section.heading, lim.target_max, total, MAX_ANCHOR_CANDIDATE_LENGTH,
        )
        return _pack_without_anchor(section, paragraphs, counts, lim.target_max, ctx)

    chosen: list[int] = []
    pool = list(candidates)
    for i in range(1, k):
        if not pool:
            break
        ideal = i * total / k
        best = min(pool, key=lambda c: abs(c[1] - ideal))
        pool.remove(best)
        chosen.append(best[0])
    chosen.sort()
    log.debug("paragraph_semantic: anchor split of %r at lines %s", section.heading, chosen)

    subs: list[Section] = []
    bounds = [0, *chosen, len(paragraphs)]
    parents = (*origin.parent_headings, origin.base_heading) if origin.base_heading else origin.parent_headings
    for n, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if n == 0:
            identity: dict[str, Any] = {}
        else:
            anchor = paragraphs[lo].text.strip()
            identity = {"heading": anchor, "base_heading": anchor, "parent_headings": parents}
        subs.append(_section(section, paragraphs[lo:hi], ctx, counts[lo:hi], **identity))
    return [piece for sub in subs for piece in anchor_split(sub, ctx, origin)]


def _pack_without_anchor(
    section: Section, paragraphs: Sequence[Paragraph], counts: Sequence[int], cap: int, ctx: _Context
) -> list[Section]:
    """The no-anchor fallback: tables over the cap by rows, greedy packing, R for a long line."""
    lim = ctx.limits
    pieces: list[tuple[Paragraph, int | None]] = []
    for para, c in zip(paragraphs, counts):
        if para.is_table and c > cap:
            limits = _TableLimits(cap, min(lim.target_ideal, cap), max(int(cap * TABLE_MIN_LAST_RATIO), 1), cap)
            pieces.extend((replace(p, role=para.role), None) for p in split_table(para.text, ctx, limits))
        elif c > cap:
            # Ordinary text keeps R overlap: it is one content line's body (§3.7).
            pieces.extend(
                (replace(para, text=t, is_table=False), n) for t, n in ctx.recursive(para.text, cap, ctx.overlap)
            )
        else:
            pieces.append((para, c))
    texts_to_count = [p.text for p, c in pieces if c is None]
    fresh = iter(ctx.count_many(texts_to_count))
    sized = [(p, c if c is not None else next(fresh)) for p, c in pieces]

    groups: list[tuple[list[Paragraph], list[int]]] = []
    sep = ctx.joiner(LINE_JOINER)
    buf: list[Paragraph] = []
    buf_counts: list[int] = []
    running = 0
    for para, c in sized:
        addition = c + (sep if buf else 0)
        if buf and running + addition > cap:
            groups.append((buf, buf_counts))
            buf, buf_counts, running, addition = [], [], 0, c
        buf.append(para)
        buf_counts.append(c)
        running += addition
    if buf:
        groups.append((buf, buf_counts))
    return [_section(section, paras, ctx, cs) for paras, cs in groups]


# --------------------------------------------------------------------------- PartLabeling §4.4


def part_labeling(sections: Sequence[Section]) -> list[Section]:
    """PartLabeling: the fragments of one content line get ``[part 1]``, ``[part 2]``, ...

    ``sections`` all come from one content line. ``parent_headings`` never gets a
    suffix, and a line left whole keeps its heading as it was.
    """
    if len(sections) <= 1:
        return list(sections)
    out = []
    for n, sec in enumerate(sections, start=1):
        base = _strip_part_suffix(sec.heading)
        out.append(replace(sec, heading=f"{base} [part {n}]" if base else f"[part {n}]", base_heading=base))
    return out


# --------------------------------------------------------------------------- merging primitives


def _join(left: Section, right: Section, ctx: _Context, joiner: str = BLOCK_JOINER, **identity: Any) -> Section:
    """``left`` and ``right`` as one section with ``left``'s identity (``keep="left"``).

    The count is the estimate (parts plus joiner) with the join marked pending;
    callers settle it with :meth:`_Context.fits` before committing.
    """
    return replace(
        left,
        paragraphs=left.paragraphs + right.paragraphs,
        content=left.content + joiner + right.content,
        tokens=left.tokens + ctx.joiner(joiner) + right.tokens,
        pending=left.pending + right.pending + 1,
        sources=left.sources + right.sources,
        parts=(left.parts or (left,)) + (right.parts or (right,)),
        line_counts=None,
        **identity,
    )


def _try_join(left: Section, right: Section, ctx: _Context, limit: int) -> Section | None:
    """The joined section when it stays within ``limit`` tokens, re-measured when it is close."""
    joined = _join(left, right, ctx)
    fits, tokens, pending = ctx.fits(joined.tokens, joined.pending, lambda: joined.content, limit, _at(joined.paragraphs))
    return replace(joined, tokens=tokens, pending=pending) if fits else None


# --------------------------------------------------------------------------- HeadingGlue §3.5


def heading_glue(sections: Sequence[Section], ctx: _Context) -> list[Section]:
    """HeadingGlue: a heading-only block is glued forward into a strictly deeper child.

    The child must be ``none`` or ``first`` (the glued block then stays ``first``);
    the bond keeps the shallow block's heading, level and parents. A chain of
    heading-only blocks collapses until the first block with body. A heading-only
    block followed by a peer or a shallower block is left to LevelMerge.
    """
    out: list[Section] = []
    i, n = 0, len(sections)
    while i < n:
        head = sections[i]
        if not (head.heading_only and head.role == NONE):
            out.append(head)
            i += 1
            continue
        chain = [head]
        j = i + 1
        while (
            j < n
            and chain[-1].heading_only
            and sections[j].level > chain[-1].level
            and sections[j].role in (NONE, FIRST)
        ):
            chain.append(sections[j])
            j += 1
        if len(chain) == 1:
            out.append(head)
        else:
            out.extend(_bond(chain, ctx))
        i = j
    return out


def _bond(chain: Sequence[Section], ctx: _Context) -> list[Section]:
    """Glue ``chain`` (heading-only blocks, then their first child) into one block.

    Over the cap, the heading lines are peeled off, the child's body is packed at
    the full cap, and the headings go back onto its first piece, which alone is
    re-split smaller when it cannot hold them. A heading prefix that alone fills
    the cap is split with the rest (the cap wins over heading integrity).
    """
    cap = ctx.limits.target_max
    prefix = chain[0]
    for sec in chain[1:-1]:
        prefix = _join(prefix, sec, ctx)
    child = chain[-1]
    whole = _join(prefix, child, ctx)
    fits, tokens, pending = ctx.fits(whole.tokens, whole.pending, lambda: whole.content, cap, _at(whole.paragraphs))
    if fits:
        return [replace(whole, tokens=tokens, pending=pending, parts=())]
    log.debug("paragraph_semantic: glued heading %r over the cap; re-splitting its body", prefix.heading)
    prefix_tokens = ctx.count_at(prefix.content + BLOCK_JOINER, _at(prefix.paragraphs))
    if prefix_tokens >= cap:
        return [_section(prefix, _lines(t), ctx, sources=whole.sources) for t, _ in ctx.recursive(whole.content, cap, ctx.overlap)]
    counts = ctx.count_lines(child.paragraphs)
    body = _pack_without_anchor(child, child.paragraphs, counts, cap, ctx)
    first = body[0]
    glued = _try_join(prefix, first, ctx, cap)
    if glued is None:
        first_counts = ctx.count_lines(first.paragraphs)
        body = _pack_without_anchor(first, first.paragraphs, first_counts, cap - prefix_tokens, ctx) + body[1:]
        glued = _join(prefix, body[0], ctx)
    return [replace(glued, parts=()), *body[1:]]


# --------------------------------------------------------------------------- LevelMerge §3.6


def _siblings(a: Section, b: Section) -> bool:
    """Same-level merge needs equal parent paths; an empty path (preamble) is compatible."""
    return a.parent_headings == b.parent_headings or not a.parent_headings or not b.parent_headings


def _on_path(shallow: Section, deep: Section) -> bool:
    """Cross-level absorption needs the shallow block's path to prefix the deep block's parents."""
    path = shallow.path
    if not path or not deep.parent_headings:
        return True
    return tuple(deep.parent_headings[: len(path)]) == path


def _tail_run(blocks: Sequence[Section], i: int, ctx: _Context) -> int:
    """End index of the run of small same-level, same-path, unfrozen blocks after ``blocks[i]``."""
    head, end, total = blocks[i], i + 1, 0
    while end < len(blocks):
        nxt = blocks[end]
        if nxt.level != head.level or nxt.role != NONE or not _siblings(head, nxt) or nxt.tokens >= ctx.limits.small_tail:
            break
        total += nxt.tokens
        end += 1
    return end if end > i + 1 and total < ctx.limits.small_tail else i + 1


def _phase_a(blocks: list[Section], level: int, ctx: _Context) -> tuple[list[Section], bool]:
    lim = ctx.limits
    out: list[Section] = []
    changed = False
    i = 0
    while i < len(blocks):
        cur = blocks[i]
        if cur.level != level or cur.role != NONE:
            out.append(cur)
            i += 1
            continue
        if cur.tokens >= lim.target_ideal:
            end = _tail_run(blocks, i, ctx)
            if end > i + 1:
                absorbed = cur
                for nxt in blocks[i + 1 : end]:
                    absorbed = _join(absorbed, nxt, ctx)
                fits, tokens, pending = ctx.fits(
                    absorbed.tokens, absorbed.pending, lambda: absorbed.content, lim.target_max, _at(absorbed.paragraphs)
                )
                if fits:
                    out.append(replace(absorbed, tokens=tokens, pending=pending))
                    i, changed = end, True
                    continue
            out.append(cur)
            i += 1
            continue
        i, joined = _join_a_neighbour(
            blocks, i, out, ctx,
            takes_next=lambda nxt: nxt.level == level and _siblings(cur, nxt),
            joins_previous=lambda prev: prev.level == level and _siblings(prev, cur),
        )
        changed = changed or joined
    return out, changed


def _phase_b(blocks: list[Section], level: int, ctx: _Context) -> tuple[list[Section], bool]:
    lim = ctx.limits
    out: list[Section] = []
    changed = False
    i = 0
    while i < len(blocks):
        cur = blocks[i]
        if cur.level != level or cur.role != NONE or cur.tokens >= lim.target_ideal:
            out.append(cur)
            i += 1
            continue
        i, joined = _join_a_neighbour(
            blocks, i, out, ctx,
            takes_next=lambda nxt: nxt.level > level and _on_path(cur, nxt),
            joins_previous=lambda prev: prev.level < level and _on_path(prev, cur),
        )
        changed = changed or joined
    return out, changed


def _join_a_neighbour(
    blocks: list[Section],
    i: int,
    out: list[Section],
    ctx: _Context,
    takes_next: Callable[[Section], bool],
    joins_previous: Callable[[Section], bool],
) -> tuple[int, bool]:
    """The step both LevelMerge phases share for a small ``blocks[i]``: join the next
    block into it, else join it into the last block out (itself below target_ideal),
    else keep it. Neither neighbour may be a split-table part, and a join is
    committed only if it fits target_max. Returns the next index and whether it joined."""
    cur, cap = blocks[i], ctx.limits.target_max
    if i + 1 < len(blocks) and blocks[i + 1].role == NONE and takes_next(blocks[i + 1]):
        joined = _try_join(cur, blocks[i + 1], ctx, cap)
        if joined is not None:
            out.append(joined)
            return i + 2, True
    if out and out[-1].role == NONE and out[-1].tokens < ctx.limits.target_ideal and joins_previous(out[-1]):
        joined = _try_join(out[-1], cur, ctx, cap)
        if joined is not None:
            out[-1] = joined
            return i + 1, True
    out.append(cur)
    return i + 1, False


def level_merge(sections: Sequence[Section], ctx: _Context) -> list[Section]:
    """LevelMerge: merge small blocks, deepest level first, without crossing topics.

    Per level: Phase A merges a block below target_ideal with its next (or into
    its previous, itself below target_ideal) same-level block of the same parent
    path; a block at target_ideal absorbs in one go the run of small (each below
    small_tail) same-level, same-path blocks after it when they total below
    small_tail. Phase B lets a shallow block
    absorb a deeper one only along its own path. Split-table blocks (``first``,
    ``middle``, ``last``) never take part. Every merge is committed only when its
    joined text fits target_max; the merged block keeps the left block's identity.
    """
    result = list(sections)
    for level in sorted({s.level for s in result}, reverse=True):
        for phase in (_phase_a, _phase_b):
            changed = True
            while changed:
                result, changed = phase(result, level, ctx)
    return result


# --------------------------------------------------------------------------- entry points


def _within_cap(section: Section, ctx: _Context) -> list[tuple[Section, str, int]]:
    """``(section, final text, exact tokens)``; a merge found over the cap is undone."""
    text = section.content.strip()
    if section.pending == 0 and not section.over_cap and text == section.content:
        tokens = section.tokens
    else:
        at = _at(section.paragraphs)
        tokens = ctx.count_at(text, at + len(section.content) - len(section.content.lstrip()) if at >= 0 else -1)
    cap = ctx.limits.target_max
    if tokens <= cap:
        return [(section, text, tokens)]
    if section.parts:
        log.warning("paragraph_semantic: a merge measured %d > %d tokens on its final text; undone", tokens, cap)
        return [item for part in section.parts for item in _within_cap(replace(part, parts=()), ctx)]
    log.warning("paragraph_semantic: block %r measured %d > %d tokens; fallback to recursive_character", section.heading, tokens, cap)
    return [(section, t, n) for t, n in ctx.recursive(text, cap, ctx.overlap)]


def split_paragraph_semantic(
    blocks: Sequence[Block],
    tokenizer: Tokenizer,
    *,
    tables: Mapping[str, Mapping[str, Any]] | None = None,
    chunk_token_size: int = 2000,
    chunk_overlap_token_size: int = 100,
    separators: Sequence[str] = CJK_SEPARATORS,
    doc_id: str = "",
) -> list[ParagraphPiece]:
    """Run the P pipeline on heading-level blocks; ``[]`` when no block has content.

    Each piece has at most ``chunk_token_size`` tokens. ``tables`` is the
    ``.tables.json`` "tables" mapping (the header source of HeaderRecovery).
    Raises ValueError when a table's stored header has the other format.
    """
    limits = Thresholds.from_size(chunk_token_size)
    overlap = min(max(int(chunk_overlap_token_size), 0), max(limits.target_max - 1, 0))
    ctx = _Context(tokenizer, limits, overlap, tuple(separators), tables or {}, doc_id)
    labelled: list[Section] = []
    for basic in heading_blocks(blocks, ctx):
        fragments = [piece for part in table_row_split(basic, ctx) for piece in anchor_split(part, ctx)]
        labelled.extend(part_labeling(fragments))
    merged = level_merge(heading_glue(labelled, ctx), ctx)
    pieces = []
    for section in merged:
        for sec, text, tokens in _within_cap(section, ctx):
            if text:
                pieces.append(
                    ParagraphPiece(
                        text=text,
                        tokens=tokens,
                        heading=sec.heading,
                        base_heading=sec.base_heading,
                        level=sec.level,
                        parent_headings=sec.parent_headings,
                        sources=tuple(dict.fromkeys(sec.sources)),
                        table_fragment=any(p.table_fragment for p in sec.paragraphs) or _unbalanced_tables(text),
                    )
                )
    return pieces


def _unbalanced_tables(text: str) -> bool:
    """True when a character-level cut left partial ``<table>`` markup in ``text``."""
    return len(re.findall(r"<table[\s>]", text)) != text.count("</table>")


def _span(blocks: Sequence[Block], sources: Iterable[int]) -> tuple[int, int]:
    located = [blocks[i] for i in sources if blocks[i].char_start is not None and blocks[i].char_end is not None]
    if not located:
        return 0, 0
    return min(b.char_start for b in located), max(b.char_end for b in located)


def chunk_paragraph(
    doc: ParsedDocument, config: ParagraphConfig, tokenizer: Tokenizer, embedder: object = None
) -> list[Chunk]:
    """The ``paragraph`` strategy: P on ``doc.blocks``; R with a warning when there are none."""
    if not any(b.content.strip() for b in doc.blocks):
        log.warning(
            "paragraph_semantic: document %r has no blocks sidecar content; fallback to recursive_character "
            "(no heading hierarchy, table roles or bridge overlap)", doc.doc_id,
        )
        spans = split_recursive(
            doc.text, tokenizer, config.chunk_token_size, config.chunk_overlap_token_size, config.separators
        )
        return attach_provenance(doc, [s.to_chunk({"fallback": "recursive"}) for s in spans])
    pieces = split_paragraph_semantic(
        doc.blocks,
        tokenizer,
        tables=doc.tables,
        chunk_token_size=config.chunk_token_size,
        chunk_overlap_token_size=config.chunk_overlap_token_size,
        separators=config.separators,
        doc_id=doc.doc_id,
    )
    chunks = []
    for piece in pieces:
        start, end = _span(doc.blocks, piece.sources)
        chunks.append(
            Chunk(
                text=piece.text,
                char_start=start,
                char_end=end,
                token_count=piece.tokens,
                heading_path=[*piece.parent_headings, piece.base_heading] if piece.base_heading else list(piece.parent_headings),
                block_ids=[doc.blocks[i].block_id for i in piece.sources if doc.blocks[i].block_id],
                verbatim=False,
                metadata={
                    "heading": {
                        "level": piece.level,
                        "heading": piece.heading,
                        "parent_headings": list(piece.parent_headings),
                    },
                    # A table degraded to R (§3.2.2, §6): its pieces carry partial <table> markup on purpose.
                    **({"table_fragment": True} if piece.table_fragment else {}),
                },
            )
        )
    return attach_provenance(doc, chunks)


SPEC = StrategySpec(
    name="paragraph",
    config_model=ParagraphConfig,
    chunk=chunk_paragraph,
    description=(
        "LightRAG P: heading blocks from the sidecar, tables cut on rows with headers re-injected, "
        "anchor splits, [part n] labels, heading glue and hierarchy-aware merging; R without blocks."
    ),
    atomic_markup=("table",),
)
