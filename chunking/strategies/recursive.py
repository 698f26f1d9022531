"""``recursive``: LightRAG's R strategy, with exact token counts and exact offsets.

Cascaded separators (paragraph, newline, CJK sentence punctuation, CJK comma,
space, character) under a token budget, with token overlap between adjacent
chunks. Each separator stays at the start of the piece that follows it, and each
chunk is whitespace-stripped, as in the reference (LangChain's
``RecursiveCharacterTextSplitter`` with ``keep_separator="start"`` and a token
``length_function``).

The invariant a caller relies on::

    for c in split_recursive(text, ...):
        text[c.start:c.end] == c.text and c.tokens <= chunk_token_size

Where we differ from the reference, on purpose:

* Spans are tracked, not searched for: the reference recovers offsets with
  ``str.find`` after the fact and gets repeated text wrong.
* The cap is a hard guarantee: a piece that no separator can break is cut into
  token windows here, where the reference emits it oversized and relies on a
  later hard split before embedding.
* A chunk's token count is measured on its own text; the reference sums the
  counts of its pieces, which is only an estimate of the joined text.
* A piece of exactly ``chunk_token_size`` tokens is kept whole (the reference
  recurses on ``>=``, which only makes chunks smaller for no gain).

Counting: every count is of a span of the input, so the input is tokenized once
and pieces, windows and overlaps are counted from that encoding
(``chunking.tokenizers.span_counter``; exact, and with a tokenizer that offers no
such index each span is encoded on its own).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from pydantic import Field

from chunking.model import Chunk, ParsedDocument, attach_provenance
from chunking.strategies import StrategySpec, TokenBudgetConfig
from chunking.tokenizers import Tokenizer, count_spans, span_counter

# LightRAG's pipeline default. English ". ? !" are left out on purpose: they
# would split numbers like 0.95.
CJK_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", "。", "！", "？", "；", "，", " ", "")
# LightRAG's (and LangChain's) default when ``separators=None``.
PLAIN_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")


class RecursiveConfig(TokenBudgetConfig):
    """Configuration of the ``recursive`` strategy (LightRAG R defaults)."""

    chunk_token_size: int = Field(1200, ge=1, description="Hard cap on tokens per chunk.")
    chunk_overlap_token_size: int = Field(100, ge=0, description="Tokens shared by adjacent chunks, at most.")
    separators: tuple[str, ...] = Field(CJK_SEPARATORS, description="Cascade, strongest boundary first.")


@dataclass(frozen=True)
class Span:
    """A chunk of ``text``: ``text[start:end] == self.text``."""

    start: int
    end: int
    text: str
    tokens: int

    def to_chunk(self, metadata: dict | None = None) -> Chunk:
        return Chunk(
            text=self.text, char_start=self.start, char_end=self.end, token_count=self.tokens, metadata=metadata or {}
        )


def split_recursive(
    text: str,
    tokenizer: Tokenizer,
    chunk_token_size: int = 1200,
    chunk_overlap_token_size: int = 100,
    separators: Sequence[str] = CJK_SEPARATORS,
) -> list[Span]:
    """Split ``text`` into whitespace-stripped spans of at most ``chunk_token_size`` tokens.

    Adjacent spans produced from the same run of pieces share at most
    ``chunk_overlap_token_size`` tokens of whole pieces; empty or all-whitespace
    input gives ``[]``.
    """
    if chunk_overlap_token_size >= chunk_token_size:
        raise ValueError("chunk_overlap_token_size must be smaller than chunk_token_size")
    if not text.strip():
        return []
    splitter = _RecursiveSplitter(text, tokenizer, chunk_token_size, chunk_overlap_token_size)
    return splitter.split(0, len(text), tuple(separators))


class _RecursiveSplitter:
    def __init__(self, text: str, tokenizer: Tokenizer, cap: int, overlap: int) -> None:
        self.text = text
        self.tokenizer = tokenizer
        self.cap = cap
        self.overlap = overlap
        # Exact span counts; with tiktoken, answered from one encoding of the text
        # instead of re-encoding every piece, window and overlap.
        self.count = span_counter(tokenizer, text)

    def split(self, start: int, end: int, separators: tuple[str, ...]) -> list[Span]:
        separator, finer = self.choose_separator(start, end, separators)
        if separator == "":
            return self.split_by_token_window(start, end)
        cuts = self.cuts_at(start, end, separator)
        counts = count_spans(self.count, cuts[:-1], cuts[1:])
        out: list[Span] = []
        small: list[tuple[int, int, int]] = []
        for s, e, n in zip(cuts, cuts[1:], counts):
            # A piece over the cap only because of its leading separator still fits
            # as a chunk of its own (chunks are stripped), so it need not be split.
            if n <= self.cap or self.count(*self.strip(s, e)) <= self.cap:
                small.append((s, e, n))
                continue
            # Small pieces merge among themselves only: an oversized piece is a
            # boundary of the stronger separator, which merging across would hide.
            out.extend(self.merge(small))
            small = []
            out.extend(self.split(s, e, finer) if finer else self.split_by_token_window(s, e))
        out.extend(self.merge(small))
        return out

    def choose_separator(self, start: int, end: int, separators: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        for i, sep in enumerate(separators):
            if sep == "" or self.text.find(sep, start, end) != -1:
                return sep, separators[i + 1 :]
        # No separator occurs: the span is one piece; the caller cuts it by tokens.
        return "", ()

    def cuts_at(self, start: int, end: int, separator: str) -> list[int]:
        """Piece bounds of [start, end) cut before every occurrence of ``separator`` (kept at the piece start).

        ``[start, c1, ..., end]``, strictly ascending: piece k is ``[cuts[k], cuts[k + 1])``.
        An occurrence at ``start`` itself is not a cut.
        """
        text = self.text
        if text.startswith(separator, start):
            # Rare: the search starts at start + 1, so a run like "\n\n\n" is cut
            # at its second character, which str.split would not do.
            cuts = [start]
            at = text.find(separator, start + 1, end)
            while at != -1:
                cuts.append(at)
                at = text.find(separator, at + len(separator), end)
            if cuts[-1] != end:
                cuts.append(end)
            return cuts
        # Leftmost non-overlapping occurrences, as str.split finds them: the
        # separator positions follow from the part lengths, without a Python loop
        # per occurrence.
        parts = text[start:end].split(separator)
        if len(parts) == 1:
            return [start, end]
        step = len(separator)
        positions = itertools.accumulate(map(len, parts[:-1]), lambda at, n: at + n + step, initial=start - step)
        cuts = list(positions)
        cuts[0] = start
        cuts.append(end)
        return cuts

    def strip(self, start: int, end: int) -> tuple[int, int]:
        """[start, end) without leading and trailing whitespace (``str.isspace``, as ``str.strip`` uses)."""
        piece = self.text[start:end]
        stripped = piece.lstrip()
        start += len(piece) - len(stripped)
        return start, start + len(stripped.rstrip())

    def emit(self, start: int, end: int, tokens: int | None = None) -> Span | None:
        start, end = self.strip(start, end)
        if start == end:
            return None
        return Span(start, end, self.text[start:end], self.count(start, end) if tokens is None else tokens)

    def merge(self, pieces: list[tuple[int, int, int]]) -> list[Span]:
        """Greedy packing of consecutive pieces, each already within the cap.

        The sum of piece counts decides where a window ends (one count per piece,
        not one per candidate window); the window's own text is then measured, and
        in the rare case BPE makes the joined text longer than the sum, the window
        gives back pieces until it fits.
        """
        out: list[Span] = []
        i, n = 0, len(pieces)
        while i < n:
            total, j = 0, i
            while j < n and total + pieces[j][2] <= self.cap:
                total += pieces[j][2]
                j += 1
            j = max(j, i + 1)
            span = self.emit(pieces[i][0], pieces[j - 1][1])
            while span is not None and span.tokens > self.cap and j - 1 > i:
                j -= 1
                span = self.emit(pieces[i][0], pieces[j - 1][1])
            if span is not None:
                out.append(span)
            if j >= n:
                break
            # Overlap: the longest run of trailing pieces within the overlap budget
            # that still leaves room for the next piece; always advance past i.
            k, carried = j, 0
            while (
                k - 1 > i
                and carried + pieces[k - 1][2] <= self.overlap
                and carried + pieces[k - 1][2] + pieces[j][2] <= self.cap
            ):
                carried += pieces[k - 1][2]
                k -= 1
            # The budget is a promise about the shared text itself, not the sum of its
            # pieces: measure it once, give back leading pieces in the rare overshoot.
            while k < j and self.count(*self.strip(pieces[k][0], pieces[j - 1][1])) > self.overlap:
                k += 1
            i = k
        return out

    def split_by_token_window(self, start: int, end: int) -> list[Span]:
        """Cut a separator-less run into maximal windows of at most ``cap`` tokens.

        Windows are found by searching on character positions with exact counts,
        so this works with any tokenizer (no token-to-char offset map needed). The
        next window starts as far back as ``overlap`` tokens allow.
        """
        out: list[Span] = []
        s = start
        while s < end:
            e = self.longest_fitting_end(s, end)
            span = self.emit(s, e)
            if span is not None:
                out.append(span)
            if e >= end:
                break
            s = max(self.earliest_overlap_start(s, e), s + 1)
        return out

    def longest_fitting_end(self, s: int, end: int) -> int:
        """Largest e in (s, end] with count(text[s:e]) <= cap (at least s + 1)."""
        # Grow a probe geometrically from ~4 chars per token instead of counting the
        # whole remainder: on a 2 MB run that would re-encode megabytes per window.
        probe = min(end, s + 4 * self.cap + 16)
        tokens = self.tokenizer.encode(self.text[s:probe])
        while len(tokens) <= self.cap:
            if probe == end:
                return end
            probe = min(end, s + 2 * (probe - s))
            tokens = self.tokenizer.encode(self.text[s:probe])
        # Fast path: the text of the first ``cap`` tokens, when it decodes back to a
        # prefix of the source (it does not when the cut falls inside a character).
        prefix = self.tokenizer.decode(tokens[: self.cap])
        if prefix and self.text.startswith(prefix, s) and self.count(s, s + len(prefix)) <= self.cap:
            return s + len(prefix)
        lo, hi = s + 1, probe  # one char must advance even if it alone exceeds the cap
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.count(s, mid) <= self.cap:
                lo = mid
            else:
                hi = mid
        return lo

    def earliest_overlap_start(self, s: int, e: int) -> int:
        """Smallest o in (s, e] whose tail text[o:e] is within the overlap budget."""
        if self.overlap == 0:
            return e
        tokens = self.tokenizer.encode(self.text[s:e])
        suffix = self.tokenizer.decode(tokens[-self.overlap :])
        if suffix and self.text.endswith(suffix, s, e) and self.count(e - len(suffix), e) <= self.overlap:
            return e - len(suffix)
        lo, hi = s, e  # tail from hi fits (empty), tail from lo does not (it is the whole window)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.count(mid, e) <= self.overlap:
                hi = mid
            else:
                lo = mid
        return hi


def chunk_recursive(
    doc: ParsedDocument, config: RecursiveConfig, tokenizer: Tokenizer, embedder: object = None
) -> list[Chunk]:
    spans = split_recursive(
        doc.text, tokenizer, config.chunk_token_size, config.chunk_overlap_token_size, config.separators
    )
    return attach_provenance(doc, [s.to_chunk() for s in spans])


SPEC = StrategySpec(
    name="recursive",
    config_model=RecursiveConfig,
    chunk=chunk_recursive,
    description="LightRAG R: cascaded separators with CJK punctuation under an exact token budget, token overlap.",
)
