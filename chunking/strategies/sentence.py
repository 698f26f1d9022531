"""``sentence``: the page-aware SentenceTextSplitter of seeds/sentence-text-splitter.md.

Pipeline, per the seed: for each page, figures (``<figure>...</figure>``) are cut out
as atomic units and the text between them is segmented into sentences
(:func:`chunking.segmenter.sentence_spans`); a span over the token cap is split
recursively (sentence end near the midpoint within the central third -> word
break -> midpoint with a 10% duplicated overlap); an accumulator packs spans under
the hard token cap (500) and the soft character budget (1000), a figure attaching
to the text accumulated before it; then the page boundaries are repaired (full
merge, else carry the trailing fragment forward), chunks are normalized, and a 10%
semantic look-ahead overlap is appended to each chunk from the start of the next.

Invariants a caller relies on (natively; ``reference_mode`` gives the reference's
chunks, which a join's BPE merge can take a token or so over the cap):

* Every chunk that holds no figure has ``token_count <= max_tokens_per_section``
  (exact, measured on the chunk's final text). Chunks holding a figure may exceed
  it and carry ``metadata["cap_exempt"] == "figure"``; a figure is never split,
  never duplicated and never given or taken as overlap.
* Chunks are in document order, ``char_start``/``char_end`` is the source region a
  chunk was built from, and every non-whitespace character of the document is in
  some chunk. ``verbatim`` is set per chunk, true exactly when
  ``text == doc.text[start:end]`` (a space injected at a page join, or an
  overlap copied from a chunk that does not follow on directly, makes it false).
* ``metadata["overlap_chars"]``, when present, is the length of the look-ahead
  suffix copied from the next chunk (strip it to highlight the chunk's own text).
* ``metadata["page_num"]`` is the page that owns the chunk (the Azure ``page_num``):
  the page it was accumulated on, the earlier page after a merge, the later page
  after a carry-forward (natively, a piece of a carry-forward, re-packed or re-split,
  that holds only carried text takes the last page its own text is on, its look-ahead
  overlap aside: ``page_num`` is always within ``page_start``..``page_end``). ``page_start``/``page_end`` are the pages its char span lies on.

Where we differ from the seed's reference, on purpose:

* Sentences come from the shared segmenter, so ``Dr.``, ``e.g.``, ``0.95`` and
  ellipses do not end a span, and a blank line does. The reference cuts at every
  ``. ! ?``.
* Chunks are trimmed of outer whitespace when assembled; the seed's normalization
  (trim only whitespace that causes a small overflow) is then always satisfied,
  and the seed's own worked examples show trimmed chunks. Inner whitespace is
  never touched.
* Cross-page repair, when the full merge does not fit and the previous chunk is
  nothing but the unfinished sentence (so carrying it forward would leave nothing
  behind), first pulls back just the continuation up to its sentence end; the
  rest of the next page keeps its own chunk (the seed's Example 4). A carried
  fragment that makes the next chunk too large re-packs that chunk under the
  normal limits instead of overflowing it.
* A page of only whitespace is skipped as the reference skips it, so a sentence cut by it
  is repaired across it; and a chunk that took a whole page by a merge can take the next
  page's start too (a sentence over three pages stays whole), where the reference holds
  nothing for the third page to merge into.
* The accumulator sums its sentences' counts, as the seed's does; where BPE counts
  the joined text over the cap although the sum fits (an ending merging with the
  next word: CJK text), that chunk's sentences are packed again by the joined text's
  own count, so it becomes two chunks rather than one per sentence.
* The semantic overlap never copies the whole next chunk (a next chunk no longer
  than the overlap target is left out), and a chunk whose exact count ends above
  the cap after overlap (BPE merges across a join) gives the overlap back.
* The document is tokenized once: sentence spans, chunks and verbatim overlaps
  are counted from that one encoding (``chunking.tokenizers.span_counter``,
  exact; any other tokenizer counts each span once). The accumulator sums span
  counts instead of re-tokenizing itself; only text that is not verbatim source
  (a page join, a non-contiguous overlap) is encoded again. The units of a
  page and the chunks are each counted in one ``count_spans`` batch; a
  look-ahead overlap is counted (in one batch, and one more for the shrinking
  ones) only where the tokenizer's bound on its count (``count_bound``: its
  UTF-8 bytes for tiktoken) does not already fit its room. Inside the
  recursive split a piece is not counted when its prefix, or its parent's tokens
  per character, already puts it far over the cap (it is split either way).
* The midpoint overlap (10% of the span cut, each side) is taken only at a cut
  whose two halves are then final pieces; a longer boundary-less run is halved
  without it until then. Where the halves fit the cap only with less overlap, the
  overlap is a fitting one found by bisection on exact counts (the most that fits
  where counts grow with length, as they nearly always do). So chunks stay in
  document order and the run is copied at most about 1.2x (the reference's 10% compounds at every level: a 2 MB run without a
  boundary came out ~10x larger; duplicated once at the first cut, as ``reference_mode``
  does, the chunks of a 2 MB line's second half start at character 800,000 after
  those of its first half ran to 1,200,000).
* ``<|endoftext|>`` and similar text counts as ordinary text (the reference raises).

``reference_mode=True`` (what ``chunking.compat.azure`` runs) reproduces the
reference (its 2025 code, checked byte for byte against its outputs in
``tests/chunking/test_compat_azure_reference_outputs.py``): spans end just after
every sentence-ending character (``word.next``, ``0.95``, ``Dr.``; ``...`` is three
spans) and the whitespace after an ending starts the next span; the accumulator
sums span counts (close to the text's count, as a leading space merges into the
next word) and a piece of an oversized span is a chunk of its own; a figure joins
whatever was accumulated before it; chunks keep their whitespace, trimmed only by
the reference's normalization (leading spaces one at a time while over the soft
budget, then trailing whitespace when at most 3 characters over); a page's first
chunk is merged into the previous page's last when that does not end on an ending
character and this one starts lowercase, not with ``#`` and without a figure in
its first 20 characters, and a page whose chunks all merged so leaves nothing for the
next page to merge into; where the whole merge does not fit, the text after the last
ending character of the previous chunk (found in its text, so inside a figure's
``a.png`` too, which cuts that figure) moves to the next chunk when the two, put
together without the join's space, fit; else it is cut to the budget and then by 50
characters (or one) until it fits, and what is cut off is dropped when it is only
whitespace; a span longer than the soft budget is a chunk of its own and a figure after
it stands alone; a blank piece of an oversized span is a chunk (blank accumulations
are not); a chunk holding ``<figure`` anywhere (an unclosed tag too) is not normalized,
and figures are ``<figure.*?</figure>``; a chunk whose summed span counts fit but whose
joined text counts over the cap is kept as it is; the look-ahead overlap is computed page by page (before
the next page can change a page's last chunk), from the first 10% of the next
chunk extended one character at a time up to twice that, stopping after an ending
or after a word break more than 20 characters past the target (else trailing
alphanumerics dropped), appended directly and shrunk as the reference shrinks it;
the recursive split scans the same window. Kept, because the reference loses or
scrambles text there: where the reference's carry-forward would cut text (not only
whitespace) off the fragment and put that rest before it, out of order, the native
repair runs instead (the continuation pulled back, or the whole fragment carried and
that chunk packed again) and the midpoint
overlap of a boundary-less run is taken once (the reference compounds it).
"""

from __future__ import annotations

import operator
import re
from functools import cached_property
from itertools import accumulate, repeat
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from chunking.model import Chunk, ParsedDocument, attach_provenance
from chunking.segmenter import (
    CJK_SENTENCE_ENDINGS,
    SENTENCE_ENDINGS,
    VECTOR_SCAN_CHARS,
    WORD_BREAKS,
    code_points,
    ends_with_sentence_ending,
    sentence_bounds,
    sentence_bounds_each,
    sentence_end_possible,
)
from chunking.strategies import StrategySpec
from chunking.tokenizers import EstimateTokenizer, Tokenizer, count_bound, count_spans, count_tokens, span_counter

# Reference mode: the look-ahead overlap stops at a word break only this far past its target.
REFERENCE_OVERLAP_WORD_SLACK = 20

FIGURE = re.compile(r"<figure\b.*?</figure\s*>", re.IGNORECASE | re.DOTALL)
# The reference's pattern (reference mode): no word boundary, so ``<figures>`` or a
# ``<figurecaption>`` opens a figure there, and the closing tag is exactly ``</figure>``.
REFERENCE_FIGURE = re.compile(r"<figure.*?</figure>", re.IGNORECASE | re.DOTALL)
# A line that opens a heading or list item: never glued to the previous page.
_HEADING_START = re.compile(r"^\s*(#{1,6}\s|[-*•+]\s|\(?\d+(\.\d+)*[.)]\s|\(?[a-z][.)]\s|[ivxlc]+[.)]\s)")


class SentenceConfig(BaseModel):
    """Configuration of the ``sentence`` strategy (the Azure splitter's defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens_per_section: int = Field(500, ge=1, description="Hard token cap per chunk (figures exempt).")
    max_section_length: int = Field(1000, ge=1, description="Soft character budget per chunk.")
    overflow_tolerance: float = Field(0.2, ge=0, le=1, description="Extra share of the soft budget allowed for merges and overlap.")
    semantic_overlap_percent: int = Field(10, ge=0, le=50, description="Look-ahead overlap, percent of max_section_length; 0 disables.")
    split_overlap_percent: int = Field(10, ge=0, lt=50, description="Each side of the midpoint duplicated when an oversized span has no boundary.")
    sentence_endings: tuple[str, ...] = Field(
        SENTENCE_ENDINGS,
        description="Where the recursive split of an oversized span prefers to cut. Natively, sentences, the "
        "cross-page repair and the look-ahead overlap follow the shared segmenter instead (it knows 'Dr.' and "
        "'0.95'); in reference_mode these characters also cut spans, end a chunk for the repair and stop the overlap.",
    )
    word_breaks: tuple[str, ...] = Field(WORD_BREAKS, description="Where a split or an overlap may cut when no sentence end is near.")
    estimate: bool = Field(False, description="Count ceil(chars/4) instead of exact tokens (each chunk's metadata then has token_count_estimated).")
    reference_mode: bool = Field(
        False,
        description="Reproduce the Azure reference's quirks (chunking.compat.azure): cut after every ending, keep "
        "chunk whitespace, count the joined text, extend the look-ahead overlap one character at a time.",
    )

    @property
    def token_cap(self) -> int:
        return self.max_tokens_per_section

    @property
    def soft_limit(self) -> int:
        return int(self.max_section_length * (1 + self.overflow_tolerance))

    @property
    def section_overlap(self) -> int:
        return self.max_section_length * self.semantic_overlap_percent // 100


class Unit(NamedTuple):
    """An atomic piece of a page: a sentence span, a piece of an oversized one, or a figure.

    Unit ``i`` of a ``_Units``; the packing reads those lists and makes a ``Unit``
    only where one is asked for (page-break repair, a re-split, tests).
    """

    start: int
    end: int
    page: int  # index into doc.pages
    tokens: int
    figure: bool = False
    piece: bool = False  # a piece of an oversized span (reference mode emits each alone)


class _Units:
    """Units in order (a page's, or a run carried across a page break) as parallel lists:
    unit ``i`` is ``Unit(starts[i], ends[i], pages[i], tokens[i], figures[i], pieces[i])``.

    Lists of ints and bools rather than a ``Unit`` per sentence: a document has
    thousands, and every tuple brings the next cyclic garbage collection nearer (a
    full one costs more than a tenth of an encode here; ints are not tracked). The
    packing reads the lists; a ``Unit`` is made only where one is asked for
    (``_Draft.units``: page-break repair, a re-split, tests).
    """

    __slots__ = ("starts", "ends", "pages", "tokens", "figures", "pieces", "_cumulative", "_breaks", "_figures_before")

    def __init__(self, starts: list[int], ends: list[int], pages: list[int], tokens: list[int],
                 figures: list[bool], pieces: list[bool]) -> None:
        self.starts, self.ends, self.pages, self.tokens = starts, ends, pages, tokens
        self.figures, self.pieces = figures, pieces
        self._cumulative: list[int] | None = None  # tokens of units [0, i), built on first use
        self._breaks: list[int] | None = None  # joins that are not contiguous among units [0, i]
        self._figures_before: list[int] | None = None  # figures among units [0, i), built on first use

    @classmethod
    def of(cls, units: list[Unit]) -> "_Units":
        return cls(*(list(field) for field in zip(*units))) if units else cls([], [], [], [], [], [])

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> Unit:
        return Unit(self.starts[i], self.ends[i], self.pages[i], self.tokens[i], self.figures[i], self.pieces[i])

    def __iter__(self):
        return map(tuple.__new__, repeat(Unit), zip(self.starts, self.ends, self.pages, self.tokens, self.figures, self.pieces))

    def tokens_of(self, lo: int, hi: int) -> int:
        """``sum(tokens[lo:hi])``, from cumulative sums."""
        if self._cumulative is None:
            self._cumulative = list(accumulate(self.tokens, initial=0))
        return self._cumulative[hi] - self._cumulative[lo]

    def any_figure(self, lo: int, hi: int) -> bool:
        """``any(figures[lo:hi])``, from cumulative figure counts (asked once per chunk)."""
        if self._figures_before is None:
            self._figures_before = list(accumulate(self.figures, initial=0))
        return self._figures_before[hi] != self._figures_before[lo]

    def contiguous(self, lo: int, hi: int) -> bool:
        """Whether each unit of [lo, hi) starts where the one before ends, on the same page."""
        if self._breaks is None:
            starts, ends, pages = self.starts, self.ends, self.pages
            gaps = map(operator.ne, starts[1:], ends[:-1])
            if pages and pages.count(pages[0]) != len(pages):  # more than one page
                gaps = map(operator.or_, gaps, map(operator.ne, pages[1:], pages[:-1]))
            self._breaks = list(accumulate(gaps, initial=0))
        return hi - lo <= 1 or self._breaks[hi - 1] == self._breaks[lo]


class _Draft:
    """A chunk in the making: units ``[lo, hi)`` of a ``_Units`` (or, once a page-break
    repair or a re-split has set them, a list of ``Unit``); then, set by
    ``_Splitter.assemble``, its text and where that text starts and its units end in
    the source (``text_start``/``text_end`` at the last assemble; read only after it), and
    ``sliced``: true when that text is known to be the source's ``[start, end)``."""

    __slots__ = ("store", "lo", "hi", "_units", "home", "overlap", "overlap_end", "text", "start", "end", "sliced")

    def __init__(self, units: list[Unit] | None, home: int, store: _Units | None = None, lo: int = 0, hi: int = 0):
        self._units = units  # None: units [lo, hi) of store
        self.store, self.lo, self.hi = store, lo, hi
        self.home = home  # index of the owning page
        self.overlap, self.overlap_end = "", 0
        self.text, self.start, self.end = "", 0, 0
        self.sliced = False

    @property
    def units(self) -> list[Unit]:
        if self._units is None:
            self._units = [self.store[i] for i in range(self.lo, self.hi)]
        return self._units

    @units.setter
    def units(self, units: list[Unit]) -> None:
        self._units = units

    @property
    def first_span(self) -> tuple[int, int]:
        if self._units is None:
            return self.store.starts[self.lo], self.store.ends[self.lo]
        return self._units[0].start, self._units[0].end

    @property
    def last_span(self) -> tuple[int, int]:
        if self._units is None:
            return self.store.starts[self.hi - 1], self.store.ends[self.hi - 1]
        return self._units[-1].start, self._units[-1].end

    @property
    def figure(self) -> bool:
        if self._units is None:
            return self.store.any_figure(self.lo, self.hi)
        return any(u.figure for u in self._units)

    @property
    def tokens(self) -> int:
        if self._units is None:
            return self.store.tokens_of(self.lo, self.hi)
        return sum(u.tokens for u in self._units)


def chunk_sentence(
    doc: ParsedDocument, config: SentenceConfig, tokenizer: Tokenizer, embedder: object = None
) -> list[Chunk]:
    if doc.text and not doc.pages:
        raise ValueError(f"document {doc.doc_id!r} has text but no pages: the sentence strategy works page by page")
    splitter = _Splitter(doc.text, config, EstimateTokenizer() if config.estimate else tokenizer)
    drafts: list[_Draft] = []
    repairable = True  # whether drafts[-1] may take the start of the next page
    for index, page in enumerate(doc.pages):
        if not page.text or page.text.isspace():  # (no copy of the page, as strip() would make)
            # A blank page makes no chunk, and a sentence cut by it is still repaired
            # across it (the reference skips such a page; an empty one was skipped already).
            continue
        page_drafts = splitter.page_drafts(splitter.page_units(index, page.char_offset, page.char_offset + len(page.text)))
        previous = drafts[-1] if drafts else None
        if drafts and page_drafts and repairable:
            splitter.repair_boundary(drafts, page_drafts)
        if config.reference_mode and page_drafts:
            # The reference overlaps page by page: the previous page's last chunk with this
            # page's first, then within the page, before the next page can change the
            # page's last chunk (a short last chunk is copied whole into the one before).
            page_drafts = [d for d in page_drafts if splitter.assemble(d)]
            held = ([drafts[-1]] if repairable and drafts and drafts[-1] is previous and splitter.assemble(previous)
                    else [])
            splitter.add_semantic_overlap(held + page_drafts)
        if config.reference_mode:
            # The reference holds only a page's own last chunk for the next page's merge: after
            # a page whose chunks all merged into the previous page's, nothing is held (natively
            # a sentence running over three pages is repaired across both breaks).
            repairable = bool(page_drafts)
        drafts.extend(page_drafts)
    drafts = [d for d in drafts if splitter.assemble(d)]
    if not config.reference_mode:
        splitter.add_semantic_overlap(drafts)
    return attach_provenance(doc, splitter.to_chunks(doc, drafts))


def split_oversized(
    text: str, tokenizer: Tokenizer, config: SentenceConfig | None = None
) -> list[tuple[int, int]]:
    """The seed's recursive split of one span: ``(start, end)`` pieces each within the cap."""
    config = config or SentenceConfig()
    splitter = _Splitter(text, config, tokenizer)
    return [(start, end) for start, end, _ in splitter.split_oversized(0, len(text))]


class _Splitter:
    def __init__(self, text: str, config: SentenceConfig, tokenizer: Tokenizer) -> None:
        self.text = text
        self.config = config
        self.tokenizer = tokenizer
        self.cap = config.max_tokens_per_section
        self.endings = frozenset(config.sentence_endings)
        self.breaks = frozenset(config.word_breaks)
        # Exact counts of source spans; with tiktoken, answered from one encoding
        # of the document instead of encoding each sentence and then each chunk.
        self.count_span = span_counter(self.tokenizer, text)
        self.any_figure = False  # set by page_units on the first figure it cuts out
        self.figure_pattern = REFERENCE_FIGURE if config.reference_mode else FIGURE

    # -- counting --------------------------------------------------------------------

    def count(self, text: str) -> int:
        return count_tokens(self.tokenizer, text)

    def count_at(self, text: str, start: int) -> int:
        """``count(text)``, from the source spans when ``text`` is verbatim at ``start``."""
        if self.text.startswith(text, start):
            return self.count_span(start, start + len(text))
        return self.count(text)

    def count_many_at(self, texts: list[str], starts: list[int]) -> list[int]:
        """``[count_at(t, s) for t, s in zip(texts, starts)]``, the verbatim ones in one ``count_spans`` batch."""
        return self.count_many_verbatim(texts, starts)[0]

    def count_many_verbatim(
        self, texts: list[str], starts: list[int], known: list[bool] | None = None
    ) -> tuple[list[int], list[bool]]:
        """``count_many_at(texts, starts)``, and for each text whether it is the source at its start.

        ``known``: true for each text known to be the source at its start (not compared again).
        """
        if known is None:
            at_start = list(map(self.text.startswith, texts, starts))
        else:
            at_start = list(known)
            startswith = self.text.startswith
            for i in [i for i, flag in enumerate(known) if not flag]:
                at_start[i] = startswith(texts[i], starts[i])
        if all(at_start):  # (natively without overlap: every chunk) no text to count on its own
            return count_spans(self.count_span, starts, list(map(operator.add, starts, map(len, texts)))), at_start
        verbatim = [i for i, flag in enumerate(at_start) if flag]
        counted = count_spans(self.count_span, [starts[i] for i in verbatim], [starts[i] + len(texts[i]) for i in verbatim])
        counts: list[int | None] = [None] * len(texts)
        for i, n in zip(verbatim, counted):
            counts[i] = n
        return [self.count(text) if n is None else n for text, n in zip(texts, counts)], at_start

    def tokens_within_cap(self, start: int, end: int, density: float = 0.0) -> tuple[int | None, float]:
        """The span's token count if it is within the cap (else ``None``), and its tokens per char.

        Avoids encoding what is certainly over the cap: a long span whose prefix
        is already over it, or one that the density measured on its parent puts
        at twice the cap (the 2 MB one-line file is halved ten times).
        """
        length = end - start
        if density * length >= 2 * self.cap:
            return None, density
        if length > 32 * self.cap:
            probe = self.count_span(start, start + 16 * self.cap)
            if probe > self.cap:
                return None, probe / (16 * self.cap)
        tokens = self.count_span(start, end)
        return (tokens if tokens <= self.cap else None), tokens / max(length, 1)

    # -- units -----------------------------------------------------------------------

    def page_units(self, page: int, start: int, end: int) -> _Units:
        """Figures and sentence spans of one page, oversized spans already split."""
        bounds: list[int] = []  # of the spans, as sentence_bounds gives them, figures included
        figures: list[int] = []  # indexes of the figure spans
        at = start
        for match in self.figure_pattern.finditer(self.text, start, end):
            bounds = _extend_bounds(bounds, self.sentence_bounds(at, match.start()))
            figures.append(max(len(bounds) - 1, 0))
            bounds = _extend_bounds(bounds, list(match.span()))
            at = match.end()
            self.any_figure = True
        bounds = _extend_bounds(bounds, self.sentence_bounds(at, end))
        if not bounds:
            return _Units([], [], [], [], [], [])
        starts, ends = bounds[:-1], bounds[1:]
        counts = count_spans(self.count_span, starts, ends)
        is_figure = [False] * len(starts)
        for i in figures:
            is_figure[i] = True
        units = _Units(starts, ends, [page] * len(starts), counts, is_figure, [False] * len(starts))
        cap = self.cap
        oversized = [i for i, n in enumerate(counts) if n > cap and not is_figure[i]]
        for i in reversed(oversized):  # from the end, so the indexes before stay valid
            pieces = self.split_oversized(starts[i], ends[i])
            units.starts[i : i + 1] = [ps for ps, _, _ in pieces]
            units.ends[i : i + 1] = [pe for _, pe, _ in pieces]
            units.tokens[i : i + 1] = [pn for _, _, pn in pieces]
            units.pages[i : i + 1] = [page] * len(pieces)
            units.figures[i : i + 1] = [False] * len(pieces)  # a figure is never split
            units.pieces[i : i + 1] = [True] * len(pieces)
        return units

    def sentence_bounds(self, start: int, end: int) -> list[int]:
        """Bounds of the sentence spans of ``text[start:end]`` (``[]`` when empty), as ``sentence_bounds``."""
        if self.config.reference_mode:
            spans = self.reference_sentences(start, end)
            return [spans[0][0], *(e for _, e in spans)] if spans else []
        if start == 0 and end == len(self.text):  # a one-page document: no slice, no offset
            return sentence_bounds(self.text)
        # A long slice (a page, text between figures) is segmented from a view of the
        # document's code points, which the span counter reads too: one copy.
        codes = code_points(self.text)[start:end] if end - start >= VECTOR_SCAN_CHARS else None
        return sentence_bounds(self.text[start:end], start, codes=codes)

    def reference_sentences(self, start: int, end: int) -> list[tuple[int, int]]:
        """The reference's spans: cut just after every sentence-ending character
        (``word.next``, ``0.95`` and ``Dr.`` too; ``...`` is three spans); the
        whitespace after an ending starts the next span."""
        cuts = [m.end() for m in self.reference_cut_pattern.finditer(self.text, start, end) if m.end() < end]
        bounds = [start, *cuts, end]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]

    @cached_property
    def reference_cut_pattern(self) -> re.Pattern[str]:
        endings = "".join(re.escape(c) for c in sorted(self.endings) if len(c) == 1)
        return re.compile(f"[{endings}]" if endings else "(?!)")

    def split_oversized(
        self,
        start: int,
        end: int,
        duplicated: bool = False,
        boundaries: _SpanBoundaries | None = None,
        density: float = 0.0,
    ) -> list[tuple[int, int, int]]:
        """Recursive split: sentence end near the midpoint, else word break, else midpoint overlap.

        Returns ``(start, end, tokens)`` pieces, starts and ends ascending. ``duplicated``
        marks a piece of a midpoint-overlap split: it is halved without duplicating
        again, so a boundary-less run is copied 1.2x, not 1.2x per recursion level.
        Natively a midpoint cut duplicates only when both its halves then fit the cap
        (:meth:`overlapping_halves`; the pieces stay in document order); the reference
        duplicates at the first midpoint cut, whatever the size.
        """
        tokens, density = self.tokens_within_cap(start, end, density)
        if tokens is not None or end - start <= 1:
            return [(start, end, self.count_span(start, end) if tokens is None else tokens)]
        length = end - start
        middle = start + length // 2
        lo, hi = start + length // 3, end - length // 3
        if self.config.reference_mode:
            # The reference scans outward from the midpoint while ``mid - pos > length // 3``.
            lo, hi = start + length // 3 + 1, start + 2 * (length // 2) - length // 3
        boundaries = boundaries or _SpanBoundaries(self.text, end)
        cut = boundaries.nearest(self.sentence_end_pattern, middle, lo, hi)
        if cut is None:
            # One break character, as the overlap reads them: a class of every break joined was
            # "[]" for word_breaks=("",) (re.error), and "a b" broke at "a", " " and "b".
            cut = boundaries.nearest(self.break_char_pattern, middle, lo, hi)
        # A boundary on the span's last character (a span of two characters: nowhere else is
        # within [lo, hi)) is no cut: just after it is the span itself again, and the recursion
        # never ended (the reference's neither). The midpoint split gives the two characters.
        if cut is not None and cut + 1 < end:
            # Split just after the boundary character: it stays in the first half.
            return self.split_oversized(start, cut + 1, duplicated, boundaries, density) + self.split_oversized(
                cut + 1, end, duplicated, boundaries, density
            )
        overlap = 0 if duplicated else length * self.config.split_overlap_percent // 100
        if self.config.reference_mode or not overlap:
            return self.split_oversized(start, middle + overlap, True, boundaries, density) + self.split_oversized(
                middle - overlap, end, True, boundaries, density
            )
        # Native: the seed's duplicated region only where both halves are then final
        # pieces. Taken higher up, a first half's later pieces start after the second
        # half's first ones (chunks out of document order, the region hundreds of
        # thousands of characters on a megabyte line); taken at every level, it
        # compounds. So a larger span is halved as it is, and its own cuts duplicate.
        pair = self.overlapping_halves(start, middle, end, overlap, density)
        if pair is not None:
            return pair
        return self.split_oversized(start, middle, False, boundaries, density) + self.split_oversized(
            middle, end, False, boundaries, density
        )

    def overlapping_halves(
        self, start: int, middle: int, end: int, overlap: int, density: float
    ) -> list[tuple[int, int, int]] | None:
        """``[start, middle + o)`` and ``[middle - o, end)`` with their counts, both within the cap:
        ``o = overlap`` when that fits, else an ``o < overlap`` that fits, found by bisection on
        exact counts (the largest one where counts grow with length, as BPE's nearly always
        do), so a cut whose plain halves fit keeps some shared text. ``None`` when the plain halves do not fit either (the span is halved first)."""

        def halves(o: int) -> tuple[int, int] | None:
            left = self.tokens_within_cap(start, middle + o, density)[0]
            right = self.tokens_within_cap(middle - o, end, density)[0] if left is not None else None
            return None if right is None else (left, right)

        fitting, at = halves(overlap), overlap
        if fitting is None:
            fitting, at = halves(0), 0
            if fitting is None:
                return None
            # Invariant: ``at`` fits, ``over`` does not.
            over = overlap
            while over - at > 1:
                probe = (at + over) // 2
                counts = halves(probe)
                if counts is None:
                    over = probe
                else:
                    fitting, at = counts, probe
        return [(start, middle + at, fitting[0]), (middle - at, end, fitting[1])]

    @cached_property
    def sentence_end_pattern(self) -> re.Pattern[str]:
        if self.config.reference_mode:  # the reference cuts at any ending, "0.95" included
            chars = "".join(re.escape(c) for c in sorted(self.endings) if len(c) == 1)
            return re.compile(f"[{chars}]" if chars else "(?!)")
        # An ASCII ending only before whitespace or the end (not "0.95"); a CJK one anywhere.
        ascii_endings = "".join(re.escape(c) for c in self.endings if c not in CJK_SENTENCE_ENDINGS)
        cjk_endings = "".join(re.escape(c) for c in self.endings if c in CJK_SENTENCE_ENDINGS)
        parts = [f"[{ascii_endings}](?=\\s|$)"] if ascii_endings else []
        parts += [f"[{cjk_endings}]"] if cjk_endings else []
        return re.compile("|".join(parts) or "(?!)")

    # -- accumulation ----------------------------------------------------------------

    def page_drafts(self, units: _Units) -> list[_Draft]:
        if not len(units):
            return []
        home = units.pages[0]
        return [_Draft(None, home, units, lo, hi) for lo, hi in self.pack(units)]

    def pack(self, units: _Units) -> list[tuple[int, int]]:
        """Greedy packing under the cap and the soft budget; a figure closes its group.

        Groups are index ranges ``[lo, hi)`` of ``units``, in order; the units between
        two groups (whitespace before a figure, nothing else) belong to none.
        """
        groups: list[tuple[int, int]] = []
        lo = chars = tokens = 0  # the accumulated group is [lo, i)
        previous_end = 0
        reference = self.config.reference_mode
        max_chars, cap, text = self.config.max_section_length, self.cap, self.text
        starts, ends = units.starts, units.ends
        rows = zip(starts, ends, units.tokens, units.figures, units.pieces)
        for i, (start, end, count, figure, piece) in enumerate(rows):
            if figure:
                # Attach to the text before it, if there is any text (the reference: any accumulated span).
                has_text = i > lo if reference else any(text[starts[k] : ends[k]].strip() for k in range(lo, i))
                groups.append((lo, i + 1) if has_text else (i, i + 1))
                lo, chars, tokens = i + 1, 0, 0
                continue
            if reference and piece:
                # The reference emits each piece of an oversized span as a chunk of its own.
                if i > lo:
                    groups.append((lo, i))
                groups.append((i, i + 1))
                lo, chars, tokens = i + 1, 0, 0
                continue
            size = end - start
            if reference and size > max_chars:
                # The reference's builder refuses it even when empty, and it is emitted
                # alone: the builder stays empty, so a figure after it stands alone too.
                if i > lo:
                    groups.append((lo, i))
                groups.append((i, i + 1))
                lo, chars, tokens = i + 1, 0, 0
                continue
            # Sum of span counts (the reference's too: its spans start with the whitespace
            # after an ending, which merges into the next word, so the sum is close).
            grown = tokens + count
            # (start < previous_end: midpoint-overlap pieces never share a group.)
            if i > lo and (start < previous_end or chars + size > max_chars or grown > cap):
                groups.append((lo, i))
                lo, chars = i, 0
                grown = count
            chars += size
            tokens = grown
            previous_end = end
        if lo < len(starts):
            groups.append((lo, len(starts)))
        return groups

    # -- cross-page repair -----------------------------------------------------------

    def repair_boundary(self, drafts: list[_Draft], page_drafts: list[_Draft]) -> None:
        """Re-stitch a sentence cut by the page break between ``drafts[-1]`` and ``page_drafts[0]``."""
        prev, nxt = drafts[-1], page_drafts[0]
        prev_text, next_text = self.join(prev.units).strip(), self.join(nxt.units).strip()
        if self.config.reference_mode:
            # The reference's test: the previous chunk does not end on an ending character,
            # the next starts lowercase, not with "#", and no figure in its first 20 characters;
            # a figure later in the next chunk does not prevent the merge.
            if (
                not prev_text
                or prev_text[-1] in self.endings
                or next_text.startswith("#")
                or not next_text[:1].islower()
                or "<figure" in next_text[:20].lower()
            ):
                return
        elif (
            prev.figure
            or nxt.units[0].figure
            or not prev_text
            or ends_with_sentence_ending(prev_text)
            or not next_text[:1].islower()
            or looks_like_heading(next_text)
        ):
            return
        if (self.config.reference_mode or not nxt.figure) and self.fits(prev.units + nxt.units):
            prev.units = prev.units + nxt.units
            del page_drafts[0]
            return
        if self.config.reference_mode and self.carry_as_reference(drafts, page_drafts):
            return
        fragment_at = self.fragment_start(prev.units)
        if fragment_at == 0:
            continuation = self.continuation(nxt.units)
            if continuation and self.fits(prev.units + continuation):
                prev.units = prev.units + continuation
                nxt.units = nxt.units[len(continuation) :]
                if not nxt.units or not self.join(nxt.units).strip():
                    del page_drafts[0]
                return
        fragment, prev.units = prev.units[fragment_at:], prev.units[:fragment_at]
        if not prev.units:
            drafts.pop()
        carried = fragment + nxt.units
        if nxt.figure or self.fits(carried):
            page_drafts[0] = _Draft(carried, nxt.home)
        else:
            store = _Units.of(carried)
            page_drafts[0:1] = [_Draft(None, nxt.home, store, lo, hi) for lo, hi in self.pack(store)]

    def fragment_start(self, units: list[Unit]) -> int:
        """Index of the first unit after the last one that ends a sentence."""
        for i in range(len(units) - 1, -1, -1):
            if ends_with_sentence_ending(self.text[units[i].start : units[i].end]):
                return i + 1
        return 0

    def continuation(self, units: list[Unit]) -> list[Unit]:
        """Leading units up to and including the first that ends a sentence (no figures)."""
        for i, unit in enumerate(units):
            if unit.figure:
                return []
            if ends_with_sentence_ending(self.text[unit.start : unit.end]):
                return units[: i + 1]
        return []

    def carry_as_reference(self, drafts: list[_Draft], page_drafts: list[_Draft]) -> bool:
        """The reference's carry-forward (reference mode), where the whole merge did not fit.

        The fragment is the previous chunk's text after its last ending character, found in
        its text as the reference finds it (inside a figure's markup too: ``a.png``; that unit
        is cut there). It moves to the front of the next page's first chunk when the two,
        put together directly (without the space the join then inserts between two words),
        fit the tolerant budget and the cap. Otherwise the reference cuts the fragment to the
        budget and then 50 characters (or one) at a time until the count fits: where only
        whitespace is cut off that way, it is dropped, as there. Where text would be cut off,
        the reference inserts that rest before the next chunk, out of source order: then nothing
        is changed here and False returned, and the native repair takes over (the continuation
        pulled back, or the whole fragment carried, the chunk packed again if too large).
        """
        prev, nxt = drafts[-1], page_drafts[0]
        units, fragment_at = self.reference_fragment(prev.units)
        fragment, retained = units[fragment_at:], units[:fragment_at]
        following = self.join(nxt.units)
        whole = self.join(fragment)
        moved = self.reference_moved_length(whole, following)
        if moved < len(whole):
            if whole[moved:].strip() or not self.contiguous(fragment):
                return False  # the reference would put the cut-off rest before the chunk
            head = fragment[0]
            fragment = [head._replace(end=head.start + moved, tokens=self.count(whole[:moved]), figure=False, piece=False)
                        ] if moved else []
        prev.units = retained
        if not retained or not self.join(retained).strip():
            drafts.pop()
        page_drafts[0] = _Draft(fragment + nxt.units, nxt.home)
        return True

    def reference_fragment(self, units: list[Unit]) -> tuple[list[Unit], int]:
        """``(units, i)``: ``units[i:]`` is the text after the last ending character of the
        joined text (the reference's ``rfind``); a unit holding that character before its
        end (a figure's ``a.png``) is cut just after it. ``i`` is 0 without an ending."""
        for i in range(len(units) - 1, -1, -1):
            unit = units[i]
            piece = self.text[unit.start : unit.end]
            last = max((piece.rfind(ending) for ending in self.endings), default=-1)
            if last < 0:
                continue
            cut = unit.start + last + 1
            if cut >= unit.end:
                return units, i + 1
            head = unit._replace(end=cut, tokens=self.count(self.text[unit.start : cut]), figure=False)
            tail = unit._replace(start=cut, tokens=self.count(self.text[cut : unit.end]), figure=False)
            return [*units[:i], head, tail, *units[i + 1 :]], i + 1
        return units, 0

    def reference_moved_length(self, fragment: str, following: str) -> int:
        """How much of ``fragment`` the reference moves in front of ``following``: all of it
        when the two fit put together directly, else its cut to the budget, shortened by 50
        characters (one when 50 or fewer are left) while the two count over the cap."""
        limit = self.config.soft_limit

        def fits(candidate: str) -> bool:
            return len(candidate + following) <= limit and self.count(candidate + following) <= self.cap

        if fits(fragment):
            return len(fragment)
        moved = fragment[: limit - len(following)]  # a negative budget cuts from the end, as there
        while moved and self.count(moved + following) > self.cap:
            moved = moved[:-50] if len(moved) > 50 else moved[:-1]
        return len(moved)

    def contiguous(self, units: list[Unit]) -> bool:
        """Whether ``units`` are one slice of the source (joined without any space inserted)."""
        return all(b.start == a.end and b.page == a.page for a, b in zip(units, units[1:]))

    def fits(self, units: list[Unit]) -> bool:
        text = self.join(units)
        tokens = self.count(text) if self.config.reference_mode else sum(u.tokens for u in units)
        return tokens <= self.cap and len(text if self.config.reference_mode else text.strip()) <= self.config.soft_limit

    # -- text ------------------------------------------------------------------------

    def join(self, units: list[Unit]) -> str:
        if self.contiguous(units):
            return self.text[units[0].start : units[-1].end] if units else ""  # nothing to join
        parts: list[str] = []
        previous: Unit | None = None
        for unit in units:
            piece = self.text[unit.start : unit.end]
            if previous is not None and not (unit.start == previous.end and unit.page == previous.page):
                piece = _join_gap(parts[-1], piece)
            parts.append(piece)
            previous = unit
        return "".join(parts)

    def assemble(self, draft: _Draft) -> str:
        """Set ``draft.text`` (its units joined; natively stripped, in reference mode as the
        reference leaves it) and, when not empty, ``draft.start``/``draft.end`` (``text_start``,
        ``text_end``); ``draft.sliced`` is set when the text is known to be the source's
        ``[start, end)``. Returns the text."""
        draft.sliced = False
        store = draft.store
        if draft._units is None and store.contiguous(draft.lo, draft.hi):
            first, last = draft.lo, draft.hi - 1
            if not self.config.reference_mode:
                start = _lstripped_start(self.text, store.starts[first], store.ends[first])
                end = _rstripped_end(self.text, store.starts[last], store.ends[last])
                if start < store.ends[first] and end > store.starts[last]:
                    # The first and the last unit each hold a non-whitespace character, so the
                    # stripped text of the joined units starts and ends inside them, where
                    # text_start and text_end trim them: it is the source between (one copy,
                    # not the joined text's and then its stripped one's).
                    draft.text, draft.start, draft.end, draft.sliced = self.text[start:end], start, end, True
                    return draft.text
            text = self.text[store.starts[first] : store.ends[last]]  # as join would
        else:
            text = self.join(draft.units)
        if not self.config.reference_mode:
            draft.text = text.strip()
        elif not text.strip():
            # The reference drops a blank accumulation, but emits a blank piece of an oversized
            # span, or a blank span over the budget, that it appended directly.
            draft.text = text if self.emitted_directly(draft) else ""
        else:
            # The reference leaves any chunk holding "<figure" as it is, a tag left open too.
            draft.text = text if "<figure" in text.lower() else self.normalize(text)
        if draft.text:
            draft.start, draft.end = self.text_start(draft), self.text_end(draft)
        return draft.text

    def emitted_directly(self, draft: _Draft) -> bool:
        """Whether ``draft`` is one unit the reference appends as a chunk without its builder:
        a piece of an oversized span, or a span longer than the soft budget (reference mode)."""
        units = draft.units
        return len(units) == 1 and (units[0].piece or units[0].end - units[0].start > self.config.max_section_length)

    def normalize(self, text: str) -> str:
        """The reference's normalization (reference mode): trim only whitespace that makes a small overflow.

        Leading spaces go one at a time while the chunk is over the soft budget;
        then trailing whitespace goes when the chunk is at most 3 characters over it
        and ends with a space or newline.
        """
        limit = self.config.soft_limit
        if len(text) <= limit:
            return text
        while text.startswith(" ") and len(text) > limit:  # one at a time, as the reference
            text = text[1:]
        if 0 < len(text) - limit <= 3 and text.endswith((" ", "\n")):
            text = text.rstrip()
        return text

    # -- semantic overlap ------------------------------------------------------------

    def add_semantic_overlap(self, drafts: list[_Draft]) -> None:
        target = self.config.section_overlap
        if target <= 0:
            return
        if self.config.reference_mode:
            self.add_reference_overlap(drafts, target)
            return
        # Each pair's overlap depends on that pair alone. The pairs are taken a step at a
        # time, all together: their prefixes (the windows segmented in one call), their
        # joiners and rooms, then what fits (counted in batches, where the tokenizer's
        # bound does not settle it: fitting_prefixes).
        currents, followings = self.overlap_pairs(drafts, target)
        prefixes = self.native_overlap_prefixes([following.text for following in followings], target)
        kept = [k for k, prefix in enumerate(prefixes) if prefix and not currents[k].text.endswith(prefix)]
        currents, followings, prefixes = [currents[k] for k in kept], [followings[k] for k in kept], [prefixes[k] for k in kept]
        joiners = list(map(self.overlap_joiner, currents, followings, prefixes))
        soft_limit, cap = self.config.soft_limit, self.cap
        room_chars = [soft_limit - len(current.text) - len(joiner) for current, joiner in zip(currents, joiners)]
        room_tokens = [cap - current.tokens - (1 if joiner else 0) for current, joiner in zip(currents, joiners)]
        fitting = self.fitting_prefixes(prefixes, [following.start for following in followings], room_chars, room_tokens)
        for current, following, joiner, prefix in zip(currents, followings, joiners, fitting):
            if prefix:
                self.set_overlap(current, following, joiner, prefix)

    def overlap_pairs(self, drafts: list[_Draft], target: int) -> tuple[list[_Draft], list[_Draft]]:
        """The pairs ``(drafts[i], drafts[i + 1])`` that may take an overlap: the next chunk is longer
        than ``target`` (``native_overlap_prefix`` gives nothing otherwise), neither holds a figure,
        and one on another page continues across the break."""
        size = len(drafts)
        followers = [i for i in range(1, size) if len(drafts[i].text) > target]
        if self.any_figure:
            figures = [draft.figure for draft in drafts]  # is_figure, self.any_figure being true
            followers = [i for i in followers if not (figures[i - 1] or figures[i])]
        currents = [drafts[i - 1] for i in followers]
        followings = [drafts[i] for i in followers]
        crossing = [k for k, (current, following) in enumerate(zip(currents, followings)) if current.home != following.home]
        if crossing:
            stays = [True] * len(followers)
            for k in crossing:
                stays[k] = self.continues_across_pages(currents[k].text, followings[k].text)
            currents = [d for d, keep in zip(currents, stays) if keep]
            followings = [d for d, keep in zip(followings, stays) if keep]
        return currents, followings

    def fitting_prefixes(self, prefixes: list[str], starts: list[int], room_chars: list[int], room_tokens: list[int]) -> list[str]:
        """For each prefix (of a text at ``starts[k]`` in the source, or not verbatim), the first of
        it and its shorter ones (each trimmed back a word from the one before: ``partial_word_trims``)
        within ``room_chars[k]`` characters and then ``room_tokens[k]`` tokens; ``""`` when none is.

        Counted in two batches, as if each were tried in turn: first each prefix's longest
        candidate within its characters (the prefix itself, mostly; a longer one cannot
        fit), unless the tokenizer's bound on its count (``count_bound``) already fits
        the room (most prefixes: a chunk seldom comes near the cap); then, where that
        one is over its tokens, every shorter one.
        """
        firsts = []
        for prefix, chars, tokens in zip(prefixes, room_chars, room_tokens):
            if len(prefix) <= chars or chars < 1 or tokens < 0:
                # (None fits without room: each candidate has a character, and no count is negative.)
                firsts.append(prefix if len(prefix) <= chars and tokens >= 0 else "")
            else:
                firsts.append(next((prefix[:n] for n in self.partial_word_trims(prefix) if n <= chars), ""))
        bound = count_bound(self.tokenizer)

        def surely_within(text: str, tokens: int) -> bool:  # no need to count it
            return bound is not None and bound(text) <= tokens

        fitting = [""] * len(prefixes)
        counted = []
        for k, first in enumerate(firsts):
            if first:
                if surely_within(first, room_tokens[k]):
                    fitting[k] = first
                else:
                    counted.append(k)
        counts = self.count_many_at([firsts[k] for k in counted], [starts[k] for k in counted])
        shrinking: list[int] = []
        shorter: list[list[str]] = []
        for k, tokens in zip(counted, counts):
            if tokens <= room_tokens[k]:
                fitting[k] = firsts[k]
                continue
            candidates = [firsts[k][:n] for n in self.partial_word_trims(firsts[k])]
            # The first whose bound fits is taken unless a longer one fits: only those are counted.
            sure = next((i for i, p in enumerate(candidates) if surely_within(p, room_tokens[k])), len(candidates))
            if sure < len(candidates):
                fitting[k] = candidates[sure]
            if sure:
                shrinking.append(k)
                shorter.append(candidates[:sure])
        texts = [p for candidates in shorter for p in candidates]
        counts = iter(self.count_many_at(texts, [starts[k] for k, candidates in zip(shrinking, shorter) for _ in candidates]))
        for k, candidates in zip(shrinking, shorter):
            fits = [p for p, n in zip(candidates, [next(counts) for _ in candidates]) if n <= room_tokens[k]]
            if fits:
                fitting[k] = fits[0]
        return fitting

    def add_reference_overlap(self, drafts: list[_Draft], target: int) -> None:
        """The reference's look-ahead overlap of each pair of ``drafts`` (reference mode)."""
        for current, following in zip(drafts, drafts[1:]):
            if "<figure" in current.text.lower() or "<figure" in following.text[:60].lower():
                continue
            if current.home == following.home and "<figure" in following.text.lower():
                continue
            if current.home != following.home and not self.reference_continues(current.text, following.text):
                continue
            prefix = self.overlap_prefix(following.text, target)
            if not prefix or current.text.endswith(prefix):
                continue
            self.append_reference_overlap(current, following, prefix)

    def reference_continues(self, text: str, next_text: str) -> bool:
        """The reference's test for a look-ahead overlap across a page break: the chunk does
        not end on a sentence-ending character and the next starts lowercase (a heading-like
        first line never does: the reference's heading tests need an uppercase, digit or
        marker start)."""
        if "<figure" in next_text[:40].lower():
            return False
        last = text.rstrip()[-1:]
        if last in self.endings:
            return False
        first = next_text.lstrip()[:1]
        return bool(first) and first.islower()

    def continues_across_pages(self, text: str, next_text: str) -> bool:
        return not ends_with_sentence_ending(text) and next_text[:1].islower() and not looks_like_heading(next_text)

    def overlap_prefix(self, text: str, target: int) -> str:
        if self.config.reference_mode:
            return self.reference_overlap_prefix(text, target)
        return self.native_overlap_prefix(text, target)

    def reference_overlap_prefix(self, text: str, target: int) -> str:
        """The reference's look-ahead: the first ``target`` characters (none when they are
        blank; all of ``text`` when it is that short), extended one character at a time up
        to twice the target, stopping after a sentence ending, or after a word break at
        index ``i`` once ``i - target > 20``; without such a stop, the trailing
        alphanumeric characters past the target are dropped."""
        if not text[:target].strip():
            return ""
        for i in range(target, min(len(text), 2 * target)):
            char = text[i]
            if char in self.endings or (char in self.breaks and i - target > REFERENCE_OVERLAP_WORD_SLACK):
                return text[: i + 1]
        prefix = text[: min(len(text), 2 * target)]
        while prefix and prefix[-1].isalnum() and len(prefix) > target:
            prefix = prefix[:-1]
        return prefix

    def native_overlap_prefix(self, text: str, target: int) -> str:
        """About ``target`` chars from the start of ``text``, ended on a natural break
        (``native_overlap_prefixes`` of one text)."""
        return self.native_overlap_prefixes([text], target)[0]

    def native_overlap_prefixes(self, texts: list[str], target: int) -> list[str]:
        """For each text, about ``target`` chars from its start, ended on a natural break
        (``""`` for a text no longer than ``target``).

        Extends up to half the target further to end on a sentence boundary (of
        the shared segmenter: not "i.e."), else on a word break; else trims back
        the partial trailing word. The windows that may hold such a sentence end are
        segmented in one call (``sentence_bounds_each``).
        """
        reach_past = max(target // 2, 1)
        prefixes: list[str | None] = [None] * len(texts)
        # A qualifying sentence end is rstripped and passes ends_with_sentence_ending:
        # most windows (over half in prose) can be ruled out by a character search.
        segmented = [
            k for k, text in enumerate(texts)
            if len(text) > target and sentence_end_possible(text, target, min(len(text), target + reach_past))
        ]
        windows = [texts[k][: target + reach_past + 1] for k in segmented]
        for k, window, bounds in zip(segmented, windows, sentence_bounds_each(windows)):
            text = texts[k]
            reach = min(len(text), target + reach_past)
            for start, end in zip(bounds, bounds[1:]):
                if end == len(window) < len(text):
                    break  # cut by the window, not by the segmenter
                sentence_end = start + len(text[start:end].rstrip())
                if target <= sentence_end <= reach and ends_with_sentence_ending(text[start:sentence_end]):
                    prefixes[k] = text[:sentence_end]
                    break
        find_break, trim = self.break_char_pattern.search, self.trim_partial_word
        for k, text in enumerate(texts):
            if prefixes[k] is not None:
                continue
            if len(text) <= target:
                prefixes[k] = ""
                continue
            first_break = find_break(text, target, min(len(text), target + reach_past))
            prefixes[k] = text[: first_break.start()].rstrip() if first_break is not None else trim(text[:target])
        return prefixes

    def trim_partial_word(self, text: str) -> str:
        """``text`` up to its last word break (excluded), right-trimmed; ``""`` without one."""
        lengths = self.partial_word_trims(text)
        return text[: lengths[0]] if lengths else ""

    def partial_word_trims(self, text: str) -> list[int]:
        """The lengths of ``text`` trimmed back a word (up to its last word break, excluded,
        right-trimmed), of that trimmed back a word, and so on while not empty.

        From one regex scan: a trim of ``text[:n]`` is ``rstripped(b)``, the end of the
        last non-whitespace character before ``b``, the last break below ``n``; those
        lengths are the ends of ``word_end_pattern``'s matches (a non-whitespace
        character, then whitespace up to a break). The trims are all of them,
        longest first: the first is the largest (``rstripped`` grows with ``b``), and
        none is skipped between two trims ``m < n``: ``text[n - 1]`` is not
        whitespace, so a break at or past ``n`` gives ``n`` or more, one before the
        last break below ``n`` at most ``m``, and none lies between.
        """
        return [found.end() for found in self.word_end_pattern.finditer(text)][::-1]

    @cached_property
    def word_end_pattern(self) -> re.Pattern[str]:
        # A non-whitespace character followed by whitespace (none or more) then a break.
        return re.compile("\\S(?=\\s*?" + self.break_char_pattern.pattern + ")")

    @cached_property
    def break_char_pattern(self) -> re.Pattern[str]:
        # One character of ``self.breaks`` (as ``c in self.breaks`` tests a character).
        chars = sorted(c for c in self.breaks if len(c) == 1)
        return re.compile("[" + "".join(re.escape(c) for c in chars) + "]" if chars else "(?!)")

    def set_overlap(self, current: _Draft, following: _Draft, joiner: str, prefix: str) -> None:
        """Append ``prefix`` of ``following``'s text to ``current`` as its look-ahead overlap, after ``joiner``."""
        current.overlap = joiner + prefix
        current.overlap_end = self.source_end_of_prefix(following, prefix)

    def append_reference_overlap(self, current: _Draft, following: _Draft, prefix: str) -> None:
        """The reference's append: the prefix joined directly; over the tolerant budget or
        the cap (the joined text counted), it shrinks from its end by as many characters
        as the position of its first break or ending plus one (one without a break)."""
        limit = self.config.soft_limit

        def fits(extra: str) -> bool:
            candidate = current.text + extra
            return len(candidate) <= limit and self.count(candidate) <= self.cap

        shrink = prefix
        while shrink and not fits(shrink):
            cut = next((i + 1 for i, ch in enumerate(shrink) if ch in self.breaks or ch in self.endings), 1)
            shrink = shrink[:-cut] if cut < len(shrink) else ""
        if shrink:
            current.overlap = shrink
            current.overlap_end = self.source_end_of_prefix(following, shrink)

    def overlap_joiner(self, current: _Draft, following: _Draft, prefix: str) -> str:
        """The whitespace that separated the two chunks in the source, else a safe space."""
        if current.last_span[1] <= following.first_span[0]:
            # The trailing whitespace of the last unit, the source between, the leading
            # whitespace of the next chunk's first unit: one contiguous slice.
            gap = self.text[current.end : following.start]
            if gap and gap.isspace():
                return gap
        return " " if current.text[-1:].isalnum() and prefix[:1].isalnum() else ""

    def source_end_of_prefix(self, draft: _Draft, prefix: str) -> int:
        """End of the source region the overlap prefix was copied from: ``len(prefix)`` past
        where the draft's text starts (its first unit less leading whitespace), within its units."""
        return min(draft.start + len(prefix), draft.last_span[1])

    # -- output ----------------------------------------------------------------------

    def to_chunks(self, doc: ParsedDocument, drafts: list[_Draft]) -> list[Chunk]:
        """The chunks of the assembled ``drafts``, in order, each counted on its final text.

        Their values are gathered first and validated as ``Chunk`` objects in one call
        (``Chunk.many``: the same validation as one ``Chunk.of`` each, less per-call cost).
        """
        values: list[dict] = []
        texts = [draft.text + draft.overlap for draft in drafts]
        # A draft without overlap whose text assemble sliced from the source is verbatim, known
        # without comparing the text with the source again.
        sliced = [draft.sliced and not draft.overlap for draft in drafts]
        counts, at_start = self.count_many_verbatim(texts, [draft.start for draft in drafts], sliced)
        page_offsets = [page.char_offset for page in doc.pages]
        figures = [draft.figure for draft in drafts] if self.any_figure else repeat(False)  # is_figure
        cap, chunk_values, reference = self.cap, self.chunk_values, self.config.reference_mode
        for draft, text, tokens, verbatim_at_start, figure in zip(drafts, texts, counts, at_start, figures):
            if tokens > cap and draft.overlap:
                # BPE made the joined text longer than the parts: give the overlap back.
                draft.overlap = ""
                text, tokens, verbatim_at_start = draft.text, self.count_at(draft.text, draft.start), None
            if tokens > cap and not figure and not reference:
                # (The reference emits such a chunk as it is: its accumulator sums span counts
                # and nothing measures the joined text again.)
                values.extend(self.resplit(doc, draft))
                continue
            values.append(chunk_values(doc, draft, text, tokens, figure, page_offsets, verbatim_at_start))
        return Chunk.many(values)

    def resplit(self, doc: ParsedDocument, draft: _Draft) -> list[dict]:
        """The values (``chunk_values``) of the chunks of a draft whose joined text counts over the cap although its units' counts
        sum within it: its units packed again, each chunk measured on its own joined text.

        BPE counts a join higher than its parts where the ending of one sentence merges
        with the next sentence's first word (CJK text: the chunker bench's workload has
        12-15 such drafts). The accumulator's rule, with the exact count: each chunk is a
        run of whole units whose joined, trimmed text fits the cap and would not with the
        next unit (the soft budget holds for any run of units of a draft that held it).
        So a draft becomes two chunks, not one per sentence as before (258 chunks of
        about 20 tokens from 12 drafts). A unit alone over the cap once trimmed takes
        the recursive split.

        The run's end is found by bisection (a joined text's count may not grow with
        every unit added, so any end whose run fits and whose next does not will do):
        a few counts per chunk rather than one per unit.
        """
        units = draft.units
        chunks: list[dict] = []
        lo = 0
        while lo < len(units):
            # The whole draft was measured over the cap by to_chunks (that is why it is here);
            # a remainder may fit as it is.
            end, fits = len(units), (self.measured_run(units, lo, len(units), draft.home) if lo else None)
            if fits is None:
                end, fits = self.fitting_run(units, lo, draft.home)
            if fits is None:  # units[lo] alone is over the cap
                chunks.extend(self.unit_chunks(doc, units[lo], draft.home))
                lo += 1
                continue
            run, tokens = fits
            if run.text:
                chunks.append(self.chunk_values(doc, run, run.text, tokens, False))
            lo = end
        return chunks

    def fitting_run(self, units: list[Unit], lo: int, home: int) -> tuple[int, tuple[_Draft, int] | None]:
        """``(end, measured_run(units, lo, end))`` for an ``end`` whose run fits the cap and
        whose run one unit longer does not, given that ``units[lo:]`` does not fit; ``(lo, None)``
        when ``units[lo]`` alone does not. Bisection: the invariant is that ``[lo, good)`` fits
        (or is empty) and ``[lo, bad)`` does not."""
        good, bad, fits = lo, len(units), None
        while bad - good > 1:
            middle = (good + bad) // 2
            run = self.measured_run(units, lo, middle, home)
            if run is None:
                bad = middle
            else:
                good, fits = middle, run
        return good, fits

    def measured_run(self, units: list[Unit], lo: int, hi: int, home: int) -> tuple[_Draft, int] | None:
        """The draft of ``units[lo:hi]``, assembled, and its text's count; ``None`` when over the cap."""
        run = _Draft(units[lo:hi], home)
        text = self.assemble(run)
        tokens = self.count_at(text, run.start) if text else 0
        return (run, tokens) if tokens <= self.cap else None

    def unit_chunks(self, doc: ParsedDocument, unit: Unit, home: int) -> list[dict]:
        """The values (``chunk_values``) of the chunks of one unit over the cap once trimmed: the
        pieces of its recursive split, each counted, and a piece over the cap once trimmed split
        again from its own text."""
        pieces = []
        for start, end, _ in self.unit_pieces(unit):
            piece = _Draft([unit._replace(start=start, end=end)], home)
            if self.assemble(piece):
                pieces.append(piece)
        # Every piece's text is verbatim source: counted in one batch from the document's encoding.
        counts = self.count_many_at([p.text for p in pieces], [p.start for p in pieces])
        chunks = []
        for piece, n in zip(pieces, counts):
            if n > self.cap and (piece.start, piece.end) != (unit.start, unit.end):
                # The piece was measured with whitespace its chunk drops, and its text can take
                # more tokens without it (" naïve" is 2, "naïve" 3): its own text is split.
                chunks.extend(self.unit_chunks(doc, unit._replace(start=piece.start, end=piece.end, tokens=n), home))
            else:
                chunks.append(self.chunk_values(doc, piece, piece.text, n, False))
        return chunks

    def unit_pieces(self, unit: Unit) -> list[tuple[int, int, int]]:
        """``split_oversized(unit.start, unit.end)``, without counting again a unit known to fit.

        ``unit.tokens`` is the exact count of its span; for a span of at most
        ``32 * cap`` characters ``split_oversized`` measures exactly that count
        first and returns the span whole when it fits, so the answer is the same.
        """
        if unit.tokens <= self.cap and unit.end - unit.start <= 32 * self.cap:
            return [(unit.start, unit.end, unit.tokens)]
        return self.split_oversized(unit.start, unit.end)

    def text_start(self, draft: _Draft) -> int:
        """Where ``draft.text`` starts in the source when it is verbatim (its first unit, trimmed)."""
        return _lstripped_start(self.text, *draft.first_span)

    def text_end(self, draft: _Draft) -> int:
        """Where ``draft``'s units end in the source, trailing whitespace trimmed."""
        return _rstripped_end(self.text, *draft.last_span)

    def is_figure(self, draft: _Draft) -> bool:
        """``draft.figure``, answered without looking at its units in a document without figures."""
        return self.any_figure and draft.figure

    def chunk_values(
        self,
        doc: ParsedDocument,
        draft: _Draft,
        text: str,
        tokens: int,
        figure: bool,
        page_offsets: list[int] | None = None,
        verbatim_at_start: bool | None = None,
    ) -> dict:
        """The values of the chunk of ``draft`` holding ``text`` (``Chunk.many`` validates them).
        ``figure`` is ``self.is_figure(draft)``; ``verbatim_at_start``, when known, is
        ``doc.text.startswith(text, draft.start)`` (the caller compared them already)."""
        start, end = draft.start, draft.end
        overlap = draft.overlap
        if overlap:
            end = max(end, draft.overlap_end)
        if start > end:
            start, end = end, start
        pages = doc.pages
        if len(pages) == 1:  # every unit and offset is on that page, which owns the chunk
            page_start = page_end = page_num = pages[0].page_num
        else:
            # The pages of the span, not of the units: a unit of only whitespace (a page's leading
            # spaces, a piece of an oversize span) packed at a chunk's end adds no text of its page.
            if page_offsets is None:
                page_offsets = [page.char_offset for page in pages]
            page_start, page_end = doc.page_at(start, page_offsets), doc.page_at(max(end - 1, start), page_offsets)
            page_num = pages[draft.home].page_num
        if not self.config.reference_mode and len(pages) > 1:
            # A piece of carried text re-packed or re-split after a carry-forward can hold none
            # of the later page that owns its draft: it is then owned by the last page its own
            # text is on (the look-ahead copied from the next chunk is not its text).
            own_start, own_end = sorted((draft.start, draft.end))
            own_first = doc.page_at(own_start, page_offsets)
            own_last = doc.page_at(max(own_end - 1, own_start), page_offsets)
            page_num = min(max(page_num, own_first), own_last)
        metadata: dict[str, object] = {"page_num": page_num}
        if self.config.estimate:
            metadata["token_count_estimated"] = True  # ceil(chars/4), not the tokenizer's count
        if figure:
            metadata["cap_exempt"] = "figure"
        if overlap:
            metadata["overlap_chars"] = len(overlap)  # look-ahead copied from the next chunk
        # text == doc.text[start:end], compared in place rather than on a copy of the slice
        verbatim = len(text) == end - start and (
            verbatim_at_start if verbatim_at_start is not None and start == draft.start else doc.text.startswith(text, start)
        )
        return {
            "text": text,
            "char_start": start,
            "char_end": end,
            "token_count": tokens,
            "page_start": page_start,
            "page_end": page_end,
            "verbatim": verbatim,
            "metadata": metadata,
        }


def _lstripped_start(text: str, start: int, end: int) -> int:
    """Where ``text[start:end].lstrip()`` starts in ``text`` (``end`` when it is blank)."""
    if start < end and not text[start].isspace():
        return start  # nothing to trim (most units: a sentence starts after the last one's space)
    return end - len(text[start:end].lstrip())


def _rstripped_end(text: str, start: int, end: int) -> int:
    """Where ``text[start:end].rstrip()`` ends in ``text`` (``start`` when it is blank)."""
    if start < end and not text[end - 1].isspace():
        return end
    if start < end - 1 and not text[end - 2].isspace():
        return end - 1  # one whitespace character (most sentences: the space or newline after them)
    raw = text[start:end]
    return end - (len(raw) - len(raw.rstrip()))


def _extend_bounds(bounds: list[int], more: list[int]) -> list[int]:
    """Bounds of contiguous spans followed by more contiguous spans starting where they end."""
    if not bounds:
        return more
    if not more:
        return bounds
    return bounds + more[1:]


class _SpanBoundaries:
    """Where a pattern matches near a midpoint of one oversized span ``[.., end)`` of ``text``.

    ``nearest(pattern, middle, lo, hi)`` is the match start in ``[lo, hi)`` nearest
    ``middle``, the earlier one on a tie, among the matches of
    ``pattern.finditer(text, span_start, end)`` -- for the sentence-end and word-break
    patterns, which match one character, with at most a one-character look-ahead
    (``(?=\\s|$)``) and no look-behind. Found by searching next to the midpoint
    rather than listing every match of the span (a 2,000-character code block has
    hundreds of word breaks; the recursion asks about a few of them).

    Why it is the same answer: each match is one character, so a search from any
    position finds every match start from there on. A match at ``p`` is decided by
    ``text[p]`` and ``text[p + 1]`` (or the end): with ``endpos`` past ``p + 1``,
    or equal to ``end``, the decision is the one the whole span's scan takes (``$``
    then matches only at ``end``, or before a final newline, which is whitespace
    anyway). Matches before the midpoint matter only within the distance of the
    first one after it.
    """

    __slots__ = ("text", "end")

    def __init__(self, text: str, end: int) -> None:
        self.text, self.end = text, end

    def nearest(self, pattern: re.Pattern[str], middle: int, lo: int, hi: int) -> int | None:
        text, end = self.text, self.end
        after = None
        if middle + 1 < hi:
            found = pattern.search(text, middle + 1, min(hi + 1, end))
            if found is not None and found.start() < hi:
                after = found.start()
        before = None
        scan_from = lo if after is None else max(lo, middle - (after - middle))
        if scan_from <= middle:
            for found in pattern.finditer(text, scan_from, min(middle + 2, end)):
                if found.start() > middle:
                    break
                before = found.start()
        if before is None or (after is not None and after - middle < middle - before):
            return after
        return before


def _join_gap(left: str, right: str) -> str:
    """``right``, prefixed by a space when both sides of the join are alphanumeric."""
    if left and right and left[-1].isalnum() and right[0].isalnum():
        return " " + right
    return right


def looks_like_heading(text: str) -> bool:
    """Whether the first line of ``text`` reads as a heading or list item."""
    line = text.lstrip().split("\n", 1)[0].strip()
    if not line:
        return False
    if _HEADING_START.match(line):
        return True
    has_more_lines = "\n" in text.strip()
    short = len(line) <= 80 and not ends_with_sentence_ending(line) and not line.endswith((",", ";", ":"))
    # A short unpunctuated line standing alone above more text.
    return short and has_more_lines and (line.isupper() or line.istitle())


SPEC = StrategySpec(
    name="sentence",
    config_model=SentenceConfig,
    chunk=chunk_sentence,
    description="Azure SentenceTextSplitter: page-aware sentences under a 500-token cap and 1000-char soft budget, atomic figures, cross-page repair, 10% look-ahead overlap.",
    atomic_markup=("figure",),
)
