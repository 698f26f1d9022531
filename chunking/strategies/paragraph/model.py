"""The P pipeline's shared model: thresholds, config, the section every stage passes on,
the counting context, and the merge primitives HeadingGlue and LevelMerge share."""

from __future__ import annotations

import bisect
import logging
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Mapping, Sequence

from pydantic import Field

from chunking.strategies import TokenBudgetConfig
from chunking.strategies.recursive import CJK_SEPARATORS, Span, split_recursive
from chunking.tokenizers import SpanCount, Tokenizer, count_tokens, span_counter


# One logger for the whole package (the name LightRAG compat routes).
log = logging.getLogger("chunking.strategies.paragraph")

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

# LightRAG's defaults for reference dropping (its CHUNK_P_REFERENCES_* settings).
DEFAULT_REFERENCES_HEADINGS: tuple[str, ...] = ("References", "Bibliography", "参考文献")
DEFAULT_REFERENCES_TAIL_N = 0

_HEADING_LINE = re.compile(r"^#{1,6} +")
_WORD_BEFORE_SPACE = re.compile(r"\S(?= )")
_PART_SUFFIX = re.compile(r"\s*\[part\s+\d+\]\s*$", re.IGNORECASE)
_LEGACY_PART_SUFFIX = re.compile(r"\s*\[表格片段\d+\]\s*$")


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
    drop_references: bool = Field(False, description="Leave out the reference section (blocks headed References, ...).")
    references_headings: tuple[str, ...] = Field(
        DEFAULT_REFERENCES_HEADINGS, min_length=1,
        description="Heading prefixes of a reference section (LightRAG's CHUNK_P_REFERENCES_HEADINGS default).",
    )
    references_tail_n: int = Field(
        DEFAULT_REFERENCES_TAIL_N, ge=0, description="Search only the last N content blocks for the reference section; 0 searches all."
    )

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds.from_size(self.chunk_token_size)


@dataclass(frozen=True, eq=False)
class CharMap:
    """Where each character of a block's content comes from in the source, for content a
    parser derived from its source span ``[start, end)`` (reflowed lines, rendered markup).

    ``positions[i]`` is the source position of ``content[i]``, non-decreasing. The
    spans it gives the pieces of the block tile the block's span: a piece starts
    just after the source of the character before it (the block's start for the
    first piece) and the piece holding the last character ends at the block's
    end, so source characters the parser rendered away (markup, escapes) stay
    inside some chunk's span; source whitespace at either end is trimmed.
    """

    content: str
    positions: Sequence[int]
    start: int
    end: int
    source: str = field(default="", repr=False)

    @cached_property
    def last(self) -> int:
        return len(self.content.rstrip()) - 1

    def span(self, first: int, last: int) -> tuple[int, int]:
        """The source span of ``content[first:last + 1]`` (both non-space characters)."""
        if first == 0:
            lo = self.start
        else:
            lo = self.positions[first - 1] + (0 if self.content[first - 1].isspace() else 1)
        hi = self.end if last >= self.last else self.positions[last] + 1
        lo = min(max(lo, self.start), self.end)
        hi = min(max(hi, lo), self.end)
        # Source whitespace at either end holds nothing of the piece: trimmed.
        while lo < hi and self.source[lo : lo + 1].isspace():
            lo += 1
        while hi > lo and self.source[hi - 1 : hi].isspace():
            hi -= 1
        return lo, hi


@dataclass(frozen=True)
class Paragraph:
    """One line of a block. ``role`` is set on a split table's slices (and fragments)."""

    text: str
    is_table: bool = False
    role: str = NONE
    table_fragment: bool = False  # an R piece of a table that had to degrade: partial markup by design
    at: int = -1  # where the line starts in the context's layout text (-1: not laid out)
    # Provenance in the parsed document's text (the source), carried through every stage:
    src: int = -1  # ``text == source[src:src + len(text)]``; -1 when the text is not a verbatim copy
    region: tuple[int, int] | None = None  # for rewritten text (a table slice): the source span it came from
    block: int = -1  # index of the block it belongs to
    # A block whose content a parser derived from its source span (reflowed lines,
    # rendered markup): the source position of each content character
    # (``charmap[charmap_at + i]`` for ``text[i]``), shared by the block's lines.
    charmap: "CharMap | None" = field(default=None, compare=False, repr=False)
    charmap_at: int = 0

    def source_span(self) -> tuple[int, int] | None:
        """The source characters this text came from: exact when verbatim, else its region."""
        if self.src >= 0:
            return self.src, self.src + len(self.text)
        if self.charmap is not None:
            return self._mapped_span()
        return self.region

    def _mapped_span(self) -> tuple[int, int] | None:
        """The span of a derived text through its block's character map (see :class:`CharMap`)."""
        cm = self.charmap
        first = self.charmap_at + len(self.text) - len(self.text.lstrip())
        last = self.charmap_at + len(self.text.rstrip()) - 1
        if first > last:
            return None
        return cm.span(first, last)

    def cut(self, start: int, end: int, **changes: Any) -> "Paragraph":
        """``text[start:end]`` as a paragraph of its own, keeping its provenance (and layout position)."""
        return replace(
            self,
            text=self.text[start:end],
            src=self.src + start if self.src >= 0 else -1,
            at=self.at + start if self.at >= 0 else -1,
            charmap_at=self.charmap_at + start,
            **changes,
        )


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
    # The tightest source span covering the characters the piece was built from
    # (None when the blocks' contents are not located in a source text).
    span: tuple[int, int] | None = None


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
    # The parsed document's text the blocks index into ("" when unknown): provenance only.
    source: str = ""
    # chunking.compat.lightrag: character-level splits as the reference's R makes them
    # (LangChain's splitter, over-cap pieces and all), not the native recursive.
    reference_recursive: bool = False

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

    def recursive(self, text: str, cap: int, overlap: int) -> list[Span]:
        """R character split (the seed's ``chunking_by_recursive_character`` fallback).

        Each span holds ``text[start:end]`` and its exact token count, so the
        pieces keep their place in the source.
        """
        cap = max(cap, 1)
        return split_recursive(text, self.tokenizer, cap, min(overlap, cap - 1), self.separators,
                               reference_mode=self.reference_recursive)


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


def _positions(paragraphs: Sequence[Paragraph], content: str) -> list[int]:
    """Where each paragraph's text starts in ``content`` (which joins them, in order)."""
    out, pos = [], 0
    for p in paragraphs:
        at = content.find(p.text, pos)
        if at < 0:  # not a join of these paragraphs: a caller bug, never silent provenance
            raise AssertionError(f"paragraph text not found in its section content: {p.text[:40]!r}")
        out.append(at)
        pos = at + len(p.text)
    return out


def _lines_of(paragraphs: Sequence[Paragraph], content: str, start: int, end: int) -> list[Paragraph]:
    """The non-blank lines of ``content[start:end]`` as paragraphs that keep their provenance.

    ``content`` joins ``paragraphs`` (by newlines), so each line lies inside one
    of them; the text of the result is ``[ln for ln in content[start:end].split("\n")
    if ln.strip()]`` exactly.
    """
    positions = _positions(paragraphs, content)
    out, pos = [], start
    for line in content[start:end].split("\n"):
        if line.strip():
            i = bisect.bisect_right(positions, pos) - 1
            para = paragraphs[i]
            offset = pos - positions[i]
            out.append(para.cut(offset, offset + len(line), is_table=False, role=NONE, table_fragment=False))
        pos += len(line) + 1
    return out


def _source_of(
    paragraphs: Sequence[Paragraph], content: str, start: int, end: int
) -> tuple[tuple[int, int] | None, tuple[int, ...]]:
    """The source span and blocks of ``content[start:end]`` (``content`` joins ``paragraphs``).

    The span is the tightest one covering the source characters of the
    paragraphs it overlaps: the exact characters of verbatim ones, the region of
    rewritten ones. ``None`` when none of them has a source.
    """
    lo = hi = None
    blocks: list[int] = []
    for para, at in zip(paragraphs, _positions(paragraphs, content)):
        a, b = max(start, at), min(end, at + len(para.text))
        if a >= b:
            continue
        if para.block >= 0 and para.block not in blocks:
            blocks.append(para.block)
        if para.src >= 0:  # verbatim: no copy needed
            s, e = para.src + (a - at), para.src + (b - at)
        else:
            located = para.cut(a - at, b - at).source_span()
            if located is None:
                continue
            s, e = located
        lo, hi = (s, e) if lo is None else (min(lo, s), max(hi, e))
    return (None if lo is None else (lo, hi)), tuple(blocks)
