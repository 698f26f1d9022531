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
such index each span is encoded on its own). The cascade is planned one depth at
a time, so all pieces of a depth are counted in one batch and all windows in one
more (``count_spans``): the Python work is per span of a depth and per chunk,
not one counting call per piece.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Callable, Sequence

from pydantic import Field

from chunking.model import Chunk, ParsedDocument, attach_provenance
from chunking.strategies import StrategySpec, TokenBudgetConfig
from chunking.tokenizers import Tokenizer, count_spans, span_counter

# LightRAG's pipeline default. English ". ? !" are left out on purpose: they
# would split numbers like 0.95.
CJK_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", "。", "！", "？", "；", "，", " ", "")
# LightRAG's (and LangChain's) default when ``separators=None``.
PLAIN_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")
# Leading / trailing whitespace is looked for in this many characters first.
_STRIP_PROBE_CHARS = 32
# A span this long is cut at a one-character separator by comparing its code points with
# numpy (~5 us a call, then ~0.5 ns a character) rather than by a regex scan making a match
# object per occurrence (~0.2 us each).
_ARRAY_CUTS_MIN_CHARS = 512


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
        return Chunk.of(
            {"text": self.text, "char_start": self.start, "char_end": self.end, "token_count": self.tokens,
             "metadata": metadata or {}}
        )


def split_recursive(
    text: str,
    tokenizer: Tokenizer,
    chunk_token_size: int = 1200,
    chunk_overlap_token_size: int = 100,
    separators: Sequence[str] = CJK_SEPARATORS,
    *,
    reference_mode: bool = False,
) -> list[Span]:
    """Split ``text`` into whitespace-stripped spans of at most ``chunk_token_size`` tokens.

    Adjacent spans produced from the same run of pieces share at most
    ``chunk_overlap_token_size`` tokens of whole pieces; empty or all-whitespace
    input gives ``[]``.

    ``reference_mode`` (what ``chunking.compat.lightrag`` runs) gives LangChain's
    ``RecursiveCharacterTextSplitter`` output instead (keep_separator "start", token
    length, stripped), quirks included: a piece is split further when its count *with*
    its leading separator reaches the cap (``>=``); an occurrence of the separator at a
    piece's start is consumed before the next is looked for (``"\n\n\n"`` stays one
    piece at ``"\n\n"``); the empty separator cuts every character; a piece no
    separator is left for is emitted as it is, over the cap; windows are decided by the
    sum of their pieces' counts only, overlaps too (a chunk may count over the cap, or
    repeat the last one); ``chunk_overlap_token_size`` may equal the size. The
    spans and counts stay exact (the reference recovers offsets with ``str.find``).
    """
    if reference_mode:
        if chunk_overlap_token_size > chunk_token_size:
            raise ValueError(f"Got a larger chunk overlap ({chunk_overlap_token_size}) than chunk size "
                             f"({chunk_token_size}), should be smaller.")
    elif chunk_overlap_token_size >= chunk_token_size:
        raise ValueError(f"chunk_overlap_token_size ({chunk_overlap_token_size}) must be smaller than "
                         f"chunk_token_size ({chunk_token_size})")
    if not text.strip():
        return []
    splitter = _RecursiveSplitter(text, tokenizer, chunk_token_size, chunk_overlap_token_size, reference_mode)
    return splitter.split(0, len(text), tuple(separators))


class _RecursiveSplitter:
    """The cascade, planned level by level so that counting is done in bulk.

    Output is what the depth-first definition gives: a span is cut before every
    occurrence of the first separator it contains; runs of pieces within the cap are packed
    greedily (:meth:`windows`); a piece over the cap is split again with the
    finer separators, or cut into token windows when none is left. Planning
    handles every span of one depth together, so the pieces of all of them are
    counted in one ``count_spans`` call, and the windows of all runs are measured
    in one more: per piece there is no Python-level count call.
    """

    def __init__(self, text: str, tokenizer: Tokenizer, cap: int, overlap: int, reference: bool = False) -> None:
        self.text = text
        self.tokenizer = tokenizer
        self.cap = cap
        self.overlap = overlap
        self.reference = reference  # LangChain's quirks (split_recursive's reference_mode)
        # Exact span counts; with tiktoken, answered from one encoding of the text
        # instead of re-encoding every piece, window and overlap.
        self.count = span_counter(tokenizer, text)

    def split(self, start: int, end: int, separators: tuple[str, ...]) -> list[Span]:
        """The chunks of [start, end) in text order: whitespace-stripped, each within the cap."""
        root = _Level(start, end, separators)
        self.plan(root)
        return self.emit_all(root)

    def plan(self, root: "_Level") -> None:
        """Fill ``items`` of ``root`` and of every span below it, one depth at a time."""
        level = [root]
        while level:
            cut: list[tuple[_Level, list[int], tuple[str, ...]]] = []
            for node in level:
                separator, finer = self.choose_separator(node.start, node.end, node.separators)
                if self.reference and separator is None:
                    node.items.append(self.emit_whole(node.start, node.end))  # no separator occurs
                elif self.reference and separator == "":
                    cut.append((node, list(range(node.start, node.end + 1)), ()))  # every character
                elif separator == "":
                    node.items.append(self.split_by_token_window(node.start, node.end))
                else:
                    cut.append((node, self.cuts_at(node.start, node.end, separator), finer))
            starts = list(itertools.chain.from_iterable(cuts[:-1] for _, cuts, _ in cut))
            ends = list(itertools.chain.from_iterable(cuts[1:] for _, cuts, _ in cut))
            counts = count_spans(self.count, starts, ends)
            oversized = self.oversized(starts, ends, counts)
            level = []
            at = 0  # index of the node's first piece in starts / ends / counts
            for node, cuts, finer in cut:
                stop = at + len(cuts) - 1
                run = at
                for k in oversized[bisect_left(oversized, at) : bisect_left(oversized, stop)]:
                    # Small pieces merge among themselves only: an oversized piece is a
                    # boundary of the stronger separator, which merging across would hide.
                    if k > run:
                        node.items.append(_Run(starts[run:k], ends[run:k], counts[run:k], finer))
                    child = _Level(starts[k], ends[k], finer)
                    if not finer:
                        child.items.append(self.emit_whole(child.start, child.end) if self.reference
                                           else self.split_by_token_window(child.start, child.end))
                    else:
                        level.append(child)
                    node.items.append(child)
                    run = k + 1
                if stop > run:
                    node.items.append(_Run(starts[run:stop], ends[run:stop], counts[run:stop], finer))
                at = stop

    def oversized(self, starts: list[int], ends: list[int], counts: list[int]) -> list[int]:
        """Ascending indexes of the pieces that must be split further.

        A piece over the cap only because of its leading separator still fits as a
        chunk of its own (chunks are stripped), so it need not be split.
        """
        cap = self.cap
        if self.reference:
            return [k for k, n in enumerate(counts) if n >= cap]  # LangChain keeps only pieces under the size
        over = [k for k, n in enumerate(counts) if n > cap]
        if not over:
            return over
        stripped = [self.strip(starts[k], ends[k]) for k in over]
        stripped_counts = count_spans(self.count, [s for s, _ in stripped], [e for _, e in stripped])
        return [k for k, n in zip(over, stripped_counts) if n > cap]

    def choose_separator(self, start: int, end: int, separators: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
        for i, sep in enumerate(separators):
            if sep == "" or self.text.find(sep, start, end) != -1:
                return sep, separators[i + 1 :]
        # No separator occurs: the span is one piece; the caller cuts it by tokens (reference
        # mode: emits it as it is, and tells that case from "" by None).
        return (None if self.reference else ""), ()

    def cuts_at(self, start: int, end: int, separator: str) -> list[int]:
        """Piece bounds of [start, end) cut before every occurrence of ``separator`` (kept at the piece start).

        ``[start, c1, ..., end]``, strictly ascending: piece k is ``[cuts[k], cuts[k + 1])``.
        An occurrence at ``start`` itself is not a cut.
        """
        # A separator at ``start`` itself is not a cut, so the search starts at
        # start + 1 then (a run like "\n\n\n" is cut at its second character,
        # which str.split on the whole span would not do). Leftmost non-overlapping
        # occurrences, as str.split finds them, found in place by the regex engine's
        # literal search: no copy of the span, no string per piece.
        if self.text.startswith(separator, start):
            # The reference (re.split on the piece) consumes that occurrence first, so the next
            # one is looked for after it: "\n\n\n" at "\n\n" is one piece there.
            offset = start + (len(separator) if self.reference else 1)
        else:
            offset = start
        if len(separator) == 1 and end - offset >= _ARRAY_CUTS_MIN_CHARS:
            # A long span cut at one character ("\n" in a long paragraph): one numpy
            # comparison over its code points instead of a match object per occurrence.
            import numpy as np

            from chunking.segmenter import code_points  # one copy per document, shared with the span counter

            hits = np.flatnonzero(code_points(self.text)[offset:end] == ord(separator))
            return [start, *(hits + offset).tolist(), end]
        return [start, *map(_MATCH_START, _literal(separator).finditer(self.text, offset, end)), end]

    def strip(self, start: int, end: int) -> tuple[int, int]:
        """[start, end) without leading and trailing whitespace (``str.isspace``, as ``str.strip`` uses)."""
        text = self.text
        # Pieces start with their separator, so most spans have leading whitespace,
        # but only a few characters of it: strip a short probe, not a copy of the span.
        if start < end and text[start].isspace():
            probe = text[start : min(end, start + _STRIP_PROBE_CHARS)]
            rest = probe.lstrip()
            start = start + len(probe) - len(rest) if rest else end - len(text[start:end].lstrip())
        if start < end and text[end - 1].isspace():
            probe = text[max(start, end - _STRIP_PROBE_CHARS) : end]
            rest = probe.rstrip()
            end = end - len(probe) + len(rest) if rest else start + len(text[start:end].rstrip())
        return start, end

    def emit_whole(self, start: int, end: int) -> list[Span]:
        """A piece as one chunk whatever its count (reference mode: nothing is left to split it)."""
        span = self.emit(start, end)
        return [span] if span is not None else []

    def emit(self, start: int, end: int, tokens: int | None = None) -> Span | None:
        start, end = self.strip(start, end)
        if start == end:
            return None
        return Span(start, end, self.text[start:end], self.count(start, end) if tokens is None else tokens)

    def emit_all(self, root: "_Level") -> list[Span]:
        """The spans of a planned tree in text order: its runs packed, its token windows as they are.

        Each run is packed first on the assumption that every window and overlap it
        measures fits its budget (:meth:`windows` only records them); all of those
        spans are then counted in one ``count_spans`` call. A run where one did not
        fit (BPE made joined text longer than the sum of its pieces, rare) is packed
        again with those counts, taking the same decisions as packing it one measured
        window at a time.
        """
        items = list(_in_text_order(root))
        queried: list[tuple[int, int, int]] = []
        packed: list[list[tuple[int, int]]] = []
        for item in items:
            if isinstance(item, _Run):
                first = len(queried)

                def assume_fits(s: int, e: int, budget: int) -> bool:
                    queried.append((s, e, budget))
                    return True

                packed.append(self.windows(item, assume_fits))
                item.queries = (first, len(queried))
        counts = count_spans(self.count, [q[0] for q in queried], [q[1] for q in queried])
        measured = {(s, e): n for (s, e, _), n in zip(queried, counts)}

        def count(s: int, e: int) -> int:
            n = measured.get((s, e))
            if n is None:
                n = measured[(s, e)] = self.count(s, e)
            return n

        out: list[Span] = []
        text = self.text
        runs = iter(packed)
        for item in items:
            if not isinstance(item, _Run):
                out.extend(item)
                continue
            windows = next(runs)
            first, stop = item.queries
            if not self.reference and any(n > q[2] for q, n in zip(queried[first:stop], counts[first:stop])):
                windows = self.windows(item, lambda s, e, budget: count(s, e) <= budget)
            for s, e in windows:
                n = count(s, e)
                if n > self.cap and not self.reference:
                    # One piece, within the cap with its leading separator but not once
                    # stripped (" naïve" is 2 tokens, "naïve" 3): split further, as a piece
                    # over the cap is.
                    out.extend(self.split(s, e, item.finer))
                else:
                    out.append(Span(s, e, text[s:e], n))
        return out

    def windows(self, run: "_Run", fits: Callable[[int, int, int], bool]) -> list[tuple[int, int]]:
        """Greedy packing of a run of consecutive pieces, each already within the cap: stripped spans.

        The sum of piece counts decides where a window ends (a binary search over
        the run's cumulative counts, not a step per piece); ``fits(start, end,
        budget)`` then says whether the window's own text is within the cap, and in
        the rare case BPE makes the joined text longer than the sum, the window
        gives back pieces until it fits. Overlap: the longest run of trailing pieces
        within the overlap budget that still leaves room for the next piece, checked
        with ``fits`` on the shared text itself.
        """
        starts, ends, counts = run.starts, run.ends, run.counts
        cap, overlap = self.cap, self.overlap
        prefix = list(itertools.accumulate(counts, initial=0))
        out: list[tuple[int, int]] = []
        i, n = 0, len(counts)
        while i < n:
            j = max(bisect_right(prefix, prefix[i] + cap) - 1, i + 1)
            s, e = self.strip(starts[i], ends[j - 1])
            while s != e and not fits(s, e, cap) and j - 1 > i:
                j -= 1
                s, e = self.strip(starts[i], ends[j - 1])
            # A window past the last one only by whitespace (its overlap, then a piece of only
            # whitespace, which the chunk strips) is a suffix of the last chunk: nothing to add
            # (the reference emits it all the same).
            if s != e and (not out or e > out[-1][1] or self.reference):
                out.append((s, e))
            if j >= n:
                break
            # Always advance past i.
            k, carried = j, 0
            while k - 1 > i and carried + counts[k - 1] <= overlap and carried + counts[k - 1] + counts[j] <= cap:
                carried += counts[k - 1]
                k -= 1
            # The budget is a promise about the shared text itself, not the sum of its
            # pieces: give back leading pieces in the rare overshoot.
            while k < j and not fits(*self.strip(starts[k], ends[j - 1]), overlap):
                k += 1
            i = k
        return out

    def split_by_token_window(self, start: int, end: int) -> list[Span]:
        """Cut a separator-less run into maximal windows of at most ``cap`` tokens.

        Windows are found by searching on character positions with exact counts,
        so this works with any tokenizer (no token-to-char offset map needed). The
        next window starts as far back as ``overlap`` tokens allow, and where it would
        add nothing but whitespace to the last one, where the last one ended: every
        window adds text.
        """
        out: list[Span] = []
        s, last_end = start, start
        while s < end:
            e = self.longest_fitting_end(s, end)
            if last_end < end and (e <= last_end or not self.text[last_end:e].strip()):
                # What follows the last window takes more than the room the overlap leaves, or
                # is only whitespace, which the chunk strips: this one would be a suffix of
                # the last chunk, adding nothing.
                s = last_end
                e = self.longest_fitting_end(s, end)
            span = self.emit(s, e)
            if span is not None and span.tokens > self.cap and span.start > s:
                # The window was measured with its leading whitespace, which the chunk drops, and
                # the rest can take more tokens without it (" 👩" shares a token): measured again
                # from where the chunk starts.
                s = span.start  # the window's start, also for its overlap below
                e = self.longest_fitting_end(s, end)
                span = self.emit(s, e)
            if span is not None:
                out.append(span)
            if e >= end:
                break
            last_end = e
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
        """Smallest o in (s, e] whose tail text[o:e] is within the overlap budget, stripped.

        The tail is measured as the two chunks share it: both are stripped, and without
        its leading whitespace a tail can take more tokens (" Über" is one fewer than "Über").
        """
        if self.overlap == 0:
            return e
        tokens = self.tokenizer.encode(self.text[s:e])
        suffix = self.tokenizer.decode(tokens[-self.overlap :])
        if suffix and self.text.endswith(suffix, s, e) and self.count(*self.strip(e - len(suffix), e)) <= self.overlap:
            return e - len(suffix)
        lo, hi = s, e  # tail from hi fits (empty), tail from lo does not (it is the whole window)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.count(*self.strip(mid, e)) <= self.overlap:
                hi = mid
            else:
                lo = mid
        return hi


_MATCH_START = operator.methodcaller("start")


@functools.lru_cache(maxsize=64)
def _literal(separator: str) -> re.Pattern[str]:
    """``separator`` as a compiled literal pattern (finditer: leftmost, non-overlapping, like str.split)."""
    return re.compile(re.escape(separator))


class _Run:
    """Consecutive pieces of one span, each within the cap: packed together into chunks."""

    __slots__ = ("starts", "ends", "counts", "finer", "queries")

    def __init__(self, starts: list[int], ends: list[int], counts: list[int], finer: tuple[str, ...] = ()) -> None:
        self.starts, self.ends, self.counts = starts, ends, counts
        self.finer = finer  # the separators that split one of these pieces further
        self.queries = (0, 0)  # this run's slice of the spans measured in bulk (emit_all)


class _Level:
    """A span to cut at the first of ``separators`` it contains; ``items`` in text order once planned:
    runs, the spans too large for them (each a ``_Level`` of its own) and token windows (lists of spans)."""

    __slots__ = ("start", "end", "separators", "items")

    def __init__(self, start: int, end: int, separators: tuple[str, ...]) -> None:
        self.start, self.end, self.separators = start, end, separators
        self.items: list = []


def _in_text_order(node: _Level):
    """The runs and token-window span lists under ``node``, depth first (text order)."""
    for item in node.items:
        if isinstance(item, _Level):
            yield from _in_text_order(item)
        else:
            yield item


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
