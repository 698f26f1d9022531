"""``semantic``: chunk boundaries where the meaning shifts (the LightRAG V strategy).

seeds/semantic-chunking.md together with the V strategy of
seeds/paragraph-semantic-chunking.md (LightRAG's ``chunking_by_semantic_vector``,
itself LangChain's ``SemanticChunker``):

1. Units: sentences from the shared segmenter (or ``sentence_split_regex``),
   whitespace-trimmed. A ``<table ...>...</table>`` element (or ``<table .../>``)
   is one unit, so a table is never cut while it fits the cap; a table above the
   cap is re-split by R and its pieces carry ``metadata["table_fragment"]``.
2. Windows: ``window_shape="gap"`` compares, at the gap between unit ``i`` and
   ``i + 1``, the ``buffer_size + 1`` units ending at the gap with the
   ``buffer_size + 1`` units starting after it; ``"centered"`` (the reference)
   compares the window of ``buffer_size`` neighbours each side of unit ``i`` with
   the one of unit ``i + 1``.
   ``window_mode="reembed"`` (the reference) embeds each distinct window's text;
   ``"combine"`` embeds every unit once (a document of more than 4,096 units:
   once per block of them, see ``gap_distances``) and sums the unit vectors of a window,
   weighted by their token counts (mean pooling over the concatenation, up to
   context): several times less model work.
3. Distances: ``d[i] = 1 - cos(left[i], right[i])``.
4. Threshold (``breakpoint_threshold_amount`` None takes the per-type default):
   ``percentile`` (95) ``P(d)``; ``standard_deviation`` (3) ``mean + k std``;
   ``interquartile`` (1.5) ``mean + k IQR``; ``gradient`` (95) ``P(gradient(d))``
   with the gradient as the score; or, with ``number_of_chunks``, the reference's
   linear map of the requested count to a percentile. A break goes where the
   score is strictly greater than the threshold.
5. ``min_chunk_size`` (tokens): a group below it merges into the neighbour across
   the weaker boundary (the smaller distance), when the merged group fits the cap.
6. A group above ``chunk_token_size`` is cut at unit boundaries into balanced
   pieces (before the ``min_chunk_size`` merge, so no stray remainder is left); a
   single unit above the cap (a 500-word sentence, a big table) is re-split by R
   (``split_recursive``, no overlap). No overlap anywhere else.
7. No embedding function: R on the whole text with a logged warning, without
   overlap as V has none (``chunk_overlap_token_size`` sets one).

The invariant a caller relies on::

    for s in split_semantic(text, tokenizer, embed, chunk_token_size=cap):
        text[s.start:s.end] == s.text and s.tokens <= cap

Spans are whitespace-trimmed, in document order, do not overlap, and together
cover every non-whitespace character of ``text`` (a fallback given an overlap overlaps).

Where we differ from the reference, on purpose (``reference_mode``, what
``chunking.compat.lightrag`` runs, is the reference: :func:`reference_spans`):

* ``window_shape="gap"`` is the default. The reference's centred windows at
  the gap ``i | i + 1`` differ only by the sentences ``i - b`` and ``i + 1 + b``,
  so with a real model the largest jump often comes one sentence early or late
  (the first window that takes in a sentence of the new topic): on the
  two-topic texts tried, centred windows with buffer 1 misplaced the split by one
  sentence in 3 of 4, gap windows in none. Gap windows also embed less
  (``reembed``: about ``n`` windows of ``b + 1`` sentences, not ``n`` of ``2b + 1``).
  ``window_shape="centered", window_mode="reembed"`` is the reference.
* ``window_mode="combine"`` is the default: every sentence goes through the
  model once (the few shared by two blocks of a long document twice), where re-embedding windows costs ``b + 1`` (gap) or ``2b + 1``
  (centred) times the tokens, and the seed's speed target needs that. On the
  50k-token workload of bench/bench_semantic.py its breakpoints agree with
  re-embedded gap windows at F1 0.79 exactly and 0.84 within one sentence
  (token-weighted; 0.72 unweighted). Against the reference (centred windows,
  re-embedded, float32) the default agrees at 0.19 exactly and 0.65 within one
  sentence: the shape moves most breaks by one sentence (re-embedded gap windows
  score the same, 0.18 / 0.67), the combining does not.
* Chunks are exact source slices; the reference joins sentences with ``" "``,
  losing paragraph breaks and the way back to the source offsets.
* An oversize group is cut at sentence boundaries first and only an oversize
  sentence goes to R; the reference hands the whole group to R, whose
  separators (newline, space) cut in the middle of sentences needlessly.
* ``min_chunk_size`` is in tokens and merges towards the weaker boundary (the
  seed's rule); the reference counts characters and only ever merges forward,
  leaving a small last chunk alone.
* ``gradient`` on two sentences (one distance) does not split; the reference
  returns each sentence as a chunk because ``np.gradient`` needs two points.
* A zero embedding vector has cosine similarity 0 to everything (distance 1)
  instead of a division by zero.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from chunking.limits import check_time_budget
from chunking.model import Chunk, ParsedDocument, attach_provenance
from chunking.segmenter import sentence_spans
from chunking.strategies import StrategySpec, TokenBudgetConfig
from chunking.strategies.recursive import CJK_SEPARATORS, PLAIN_SEPARATORS, Span, split_recursive
from chunking.tokenizers import Tokenizer, count_spans, count_tokens, span_counter

logger = logging.getLogger(__name__)

ThresholdType = Literal["percentile", "standard_deviation", "interquartile", "gradient"]
WindowMode = Literal["reembed", "combine"]
WindowShape = Literal["gap", "centered"]
EmbedFunction = Callable[[list[str]], np.ndarray]

BREAKPOINT_DEFAULTS: dict[str, float] = {
    "percentile": 95.0,
    "standard_deviation": 3.0,
    "interquartile": 1.5,
    "gradient": 95.0,
}

_TABLE_TAG = re.compile(r"<(/?)table\b[^>]*?(/?)>", re.IGNORECASE)


# The default cap fits the default embedding model (all-MiniLM-L6-v2 reads 256 word
# pieces, [CLS] and [SEP] included, and drops the rest). The seed's 1200 tokens make
# ~600-token chunks, of which the model reads the first ~200 tokens: their vector
# says nothing of the rest. cl100k tokens run 1.05-1.3 word pieces on prose, so 200
# tokens fit; the ``within_model_max_sequence`` check warns where they do not.
SEED_CHUNK_TOKEN_SIZE = 1200
DEFAULT_CHUNK_TOKEN_SIZE = 200


class SemanticConfig(TokenBudgetConfig):
    """Configuration of the ``semantic`` strategy: LightRAG V's, but a cap that fits the default model."""

    chunk_token_size: int = Field(
        DEFAULT_CHUNK_TOKEN_SIZE, ge=1,
        description=f"Hard cap on tokens per chunk (seed: {SEED_CHUNK_TOKEN_SIZE}; {DEFAULT_CHUNK_TOKEN_SIZE} fits "
        "the 256 word pieces all-MiniLM-L6-v2 reads).",
    )
    breakpoint_threshold_type: ThresholdType = "percentile"
    breakpoint_threshold_amount: float | None = Field(
        None, description="None: 95 / 3 / 1.5 / 95 for percentile / standard_deviation / interquartile / gradient."
    )
    number_of_chunks: int | None = Field(None, ge=1, description="Derive the threshold from a wanted chunk count.")
    buffer_size: int = Field(1, ge=0, description="Neighbouring sentences on each side of a window.")
    min_chunk_size: int | None = Field(None, ge=1, description="Tokens; smaller groups merge into a neighbour.")
    window_mode: WindowMode = Field(
        "combine", description="reembed: embed each window's text (reference); combine: embed sentences once."
    )
    window_shape: WindowShape = Field(
        "gap", description="gap: the sentences before a gap against those after it; centered: the reference's windows."
    )
    sentence_split_regex: str | None = Field(
        None, description="Split sentences on this regex instead of the shared segmenter."
    )
    chunk_overlap_token_size: int = Field(0, ge=0, description="Overlap of the R fallback only (no model).")
    # Excluded from model_dump, hence from the config hash: the pipeline always
    # passes the embedding model, so this never changes what an asset stores.
    allow_recursive_fallback: bool = Field(
        False, exclude=True,
        description="Without an embedder, chunk with recursive (R) instead of failing (LightRAG V's fallback).",
    )

    @field_validator("sentence_split_regex")
    @classmethod
    def _regex_compiles(cls, value: str | None) -> str | None:
        if value is not None and _cuts_inside_words(_compile_sentence_regex(value)):
            raise ValueError(f"sentence_split_regex {value!r} matches the empty string between two letters or "
                             "digits: words would be cut into sentences; match what separates sentences "
                             "(whitespace after an ending, an ending itself)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SemanticConfig:
        _check_amount(self.breakpoint_threshold_type, self.breakpoint_threshold_amount)
        default_type = type(self).model_fields["breakpoint_threshold_type"].default
        if self.number_of_chunks is not None and (
            self.breakpoint_threshold_amount is not None or self.breakpoint_threshold_type != default_type
        ):
            # The threshold comes from the wanted count (as in the reference): the others would be
            # ignored, and a config hash of their own would name the same chunks. (The default type
            # is accepted: a config's own dump, which the chunk assets store, names it.)
            raise ValueError("number_of_chunks derives the threshold from a wanted chunk count, so "
                             "breakpoint_threshold_type / breakpoint_threshold_amount would be ignored: give "
                             "number_of_chunks or a threshold, not both")
        if self.min_chunk_size is not None and self.min_chunk_size > self.chunk_token_size:
            raise ValueError(
                f"min_chunk_size ({self.min_chunk_size}) must not exceed chunk_token_size ({self.chunk_token_size})"
            )
        return self


def split_semantic(
    text: str,
    tokenizer: Tokenizer,
    embed: EmbedFunction | None,
    *,
    chunk_token_size: int = DEFAULT_CHUNK_TOKEN_SIZE,
    breakpoint_threshold_type: ThresholdType = "percentile",
    breakpoint_threshold_amount: float | None = None,
    number_of_chunks: int | None = None,
    buffer_size: int = 1,
    sentence_split_regex: str | None = None,
    min_chunk_size: int | None = None,
    window_mode: WindowMode = "combine",
    window_shape: WindowShape = "gap",
    chunk_overlap_token_size: int = 0,
    doc_id: str = "",
    reference_mode: bool = False,
) -> list[Span]:
    """Split ``text`` at semantic breakpoints into spans of at most ``chunk_token_size`` tokens.

    ``embed`` maps a list of strings to a ``(len, dim)`` array; None falls back to
    R (``split_recursive`` with ``chunk_overlap_token_size``) and logs a warning.
    ``doc_id`` names the document in the warnings (a folder's log interleaves many).
    ``reference_mode`` (``chunking.compat.lightrag``'s V): :func:`reference_spans`.
    """
    if chunk_token_size < 1:
        raise ValueError(f"chunk_token_size must be at least 1, got {chunk_token_size}")
    if buffer_size < 0:
        raise ValueError(f"buffer_size must be >= 0, got {buffer_size}")
    if window_mode not in ("reembed", "combine"):
        raise ValueError(f"window_mode must be 'reembed' or 'combine', got {window_mode!r}")
    if window_shape not in ("gap", "centered"):
        raise ValueError(f"window_shape must be 'gap' or 'centered', got {window_shape!r}")
    _check_amount(breakpoint_threshold_type, breakpoint_threshold_amount)
    if not text.strip():
        return []
    if embed is None:
        logger.warning(
            "semantic: %sno embedding function; fallback to recursive_character with chunk_token_size=%d",
            _doc_prefix(doc_id), chunk_token_size,
        )
        return split_recursive(text, tokenizer, chunk_token_size, chunk_overlap_token_size, CJK_SEPARATORS)

    if reference_mode:
        return reference_spans(text, tokenizer, embed, chunk_token_size, breakpoint_threshold_type,
                               breakpoint_threshold_amount, number_of_chunks, buffer_size,
                               sentence_split_regex or LIGHTRAG_SENTENCE_SPLIT_REGEX, min_chunk_size)
    units = sentence_units(text, sentence_split_regex)
    sizes = UnitSizes.measure(text, units, tokenizer)
    distances = gap_distances(text, units, embed, buffer_size, window_mode, window_shape, sizes.tokens)
    breaks = find_breakpoints(distances, breakpoint_threshold_type, breakpoint_threshold_amount, number_of_chunks)
    groups = fit_groups_to_cap(_groups(len(units), breaks), sizes, chunk_token_size)
    if min_chunk_size is not None:
        groups = merge_small_groups(groups, sizes, distances, min_chunk_size, chunk_token_size)
    return _GroupEmitter(text, units, sizes, tokenizer, chunk_token_size, doc_id).emit_all(groups)


# LightRAG's DEFAULT_SENTENCE_SPLIT_REGEX (reference mode): LangChain's English pattern and bare CJK endings.
LIGHTRAG_SENTENCE_SPLIT_REGEX = r"(?<=[.?!])\s+|(?<=[。？！])"


def reference_spans(
    text: str,
    tokenizer: Tokenizer,
    embed: EmbedFunction,
    chunk_token_size: int,
    breakpoint_threshold_type: ThresholdType,
    breakpoint_threshold_amount: float | None,
    number_of_chunks: int | None,
    buffer_size: int,
    sentence_split_regex: str,
    min_chunk_size: int | None,
) -> list[Span]:
    """LightRAG's V as it runs LangChain's ``SemanticChunker``, quirks included, with exact spans.

    Sentences are ``re.split(sentence_split_regex, text)`` (untrimmed, empty ones too, tables
    not kept whole); each sentence's window (``buffer_size`` each side) is embedded as those
    sentences joined by ``" "``, and ``d[i]`` compares the windows of ``i`` and ``i + 1``; the
    thresholds are this module's (the same formulas). One sentence is one chunk; with
    ``gradient`` two sentences are two. A breakpoint whose group, its sentences joined by
    ``" "``, is shorter than ``min_chunk_size`` *characters* is skipped (the group runs on).
    A group is the source from its first sentence to its last, stripped; one over
    ``chunk_token_size`` tokens is split by LightRAG's R (``split_recursive``'s reference
    mode, no overlap). LightRAG recovers each span by searching for the text; here it is known.
    """
    pieces, bounds = _split_with_bounds(_compile_sentence_regex(sentence_split_regex), text)
    if len(bounds) == 1 or (breakpoint_threshold_type == "gradient" and len(bounds) == 2):
        groups = [(i, i) for i in range(len(bounds))]
    else:
        def joined(a: int, z: int) -> str:
            return " ".join(pieces[a : z + 1])

        distances = gap_distances(text, bounds, embed, buffer_size, "reembed", "centered", window_text=joined,
                                  distance=reference_paired_distances)
        breaks = find_breakpoints(distances, breakpoint_threshold_type, breakpoint_threshold_amount, number_of_chunks)
        groups, first = [], 0
        for end in breaks:
            if min_chunk_size is not None and len(joined(first, end)) < min_chunk_size:
                continue
            groups.append((first, end))
            first = end + 1
        if first < len(bounds):
            groups.append((first, len(bounds) - 1))
    out: list[Span] = []
    for first, last in groups:
        start, end = bounds[first][0], bounds[last][1]
        body = text[start:end]
        stripped = body.strip()
        if not stripped:
            continue
        start += len(body) - len(body.lstrip())
        tokens = count_tokens(tokenizer, stripped)
        if tokens <= chunk_token_size:
            out.append(Span(start, start + len(stripped), stripped, tokens))
            continue
        for piece in split_recursive(stripped, tokenizer, chunk_token_size, 0, PLAIN_SEPARATORS, reference_mode=True):
            out.append(Span(start + piece.start, start + piece.end, piece.text, piece.tokens))
    return out


def _split_with_bounds(pattern: re.Pattern[str], text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """``pattern.split(text)`` (its pieces exactly, the pattern's captured groups among them, as
    ``re.split`` returns them and LangChain takes them for sentences) and where each piece is.
    ``finditer``'s matches are ``split``'s separators; a group that took no part is an empty piece
    at its match (``re.split`` gives ``None``, on which the reference fails)."""
    pieces: list[str] = []
    bounds: list[tuple[int, int]] = []
    pos = 0
    for match in pattern.finditer(text):
        pieces.append(text[pos : match.start()])
        bounds.append((pos, match.start()))
        for group in range(1, pattern.groups + 1):
            start, end = match.span(group)
            if start < 0:
                start = end = match.start()
            pieces.append(text[start:end])
            bounds.append((start, end))
        pos = match.end()
    pieces.append(text[pos:])
    bounds.append((pos, len(text)))
    return pieces, bounds


def _doc_prefix(doc_id: str) -> str:
    return f"document {doc_id!r}: " if doc_id else ""


# --- units ---------------------------------------------------------------------


def sentence_units(text: str, sentence_split_regex: str | None = None) -> list[tuple[int, int]]:
    """Whitespace-trimmed, non-empty ``(start, end)`` units in order; tables are whole units."""
    pattern = _compile_sentence_regex(sentence_split_regex) if sentence_split_regex is not None else None
    units: list[tuple[int, int]] = []
    pos = 0
    for start, end in table_regions(text):
        units.extend(_sentences_in(text, pos, start, pattern))
        units.append((start, end))
        pos = end
    units.extend(_sentences_in(text, pos, len(text), pattern))
    return units


def table_regions(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each outermost balanced ``<table ...>...</table>`` element
    (or self-closing ``<table .../>``), in order. An unclosed table is not a region."""
    regions: list[tuple[int, int]] = []
    depth, opened = 0, 0
    for tag in _TABLE_TAG.finditer(text):
        closing, self_closing = tag.group(1), tag.group(2)
        if self_closing:
            if depth == 0:
                regions.append((tag.start(), tag.end()))
        elif not closing:
            if depth == 0:
                opened = tag.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                regions.append((opened, tag.end()))
    return regions


def _sentences_in(text: str, start: int, end: int, pattern: re.Pattern[str] | None) -> list[tuple[int, int]]:
    region = text[start:end]
    if pattern is None:
        spans = sentence_spans(region)
    else:
        spans, pos = [], 0
        for match in pattern.finditer(region):
            # The match ends the unit before it: cut after it, not around it, or text the
            # regex matches ("x", a ";") would be in no unit and no chunk. A match of only
            # whitespace (the reference's) is trimmed away as before.
            if match.end() > pos:
                spans.append((pos, match.end()))
                pos = match.end()
        spans.append((pos, len(region)))
    return _trimmed(text, [(start + s, start + e) for s, e in spans])


def _trimmed(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            out.append((s, e))
    return out


def _cuts_inside_words(pattern: re.Pattern[str]) -> bool:
    """Whether ``pattern`` matches the empty string where no sentence can end: in an empty text, or
    between two letters or digits ("", "x*", "(?<=.)" cut every character; the reference's own
    pattern matches nothing only after "。", a cut there)."""
    if pattern.match("") is not None:
        return True
    return any(m.start() == m.end() == 1 for probe in ("ab", "日本", "12") for m in pattern.finditer(probe))


def _compile_sentence_regex(value: str) -> re.Pattern[str]:
    try:
        return re.compile(value)
    except re.error as exc:
        raise ValueError(f"sentence_split_regex {value!r} is not a valid regular expression: {exc}") from None


@dataclass(frozen=True)
class UnitSizes:
    """Token counts of the units, each tokenized once.

    ``tokens[i]`` counts unit ``i`` with the whitespace before it (BPE attaches a
    space to the following word) and ``lead[i]`` that whitespace alone, so
    ``size(first, last)`` tracks the count of the group's joined text closely
    without tokenizing any group.
    """

    tokens: np.ndarray
    lead: np.ndarray

    @property
    def prefix(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.tokens)])

    def size(self, first: int, last: int, prefix: np.ndarray | None = None) -> int:
        p = self.prefix if prefix is None else prefix
        return int(p[last + 1] - p[first] - self.lead[first])

    @classmethod
    def measure(cls, text: str, units: list[tuple[int, int]], tokenizer: Tokenizer) -> UnitSizes:
        starts = [0] + [e for _, e in units[:-1]]
        # Every piece is a span of the text: counted from one encoding of it (exact), not
        # one string and one encode each (a batch encode of 200k sentences ran a thread-pool
        # task per sentence: seconds, and a list of ids per sentence).
        tokens = count_spans(span_counter(tokenizer, text), starts, [e for _, e in units])
        whitespace: dict[str, int] = {}  # few distinct runs: " ", "\n\n", ...
        lead = []
        for a, (s, _) in zip(starts, units):
            run = text[a:s]
            if run not in whitespace:
                whitespace[run] = count_tokens(tokenizer, run) if run else 0
            lead.append(whitespace[run])
        return cls(np.array(tokens, dtype=np.int64), np.array(lead, dtype=np.int64))


# --- vectors and distances -----------------------------------------------------


Window = tuple[int, int]  # units [first, last], inclusive


def window_ranges(n: int, buffer_size: int, window_shape: WindowShape) -> tuple[list[Window], list[Window]]:
    """The windows compared across each of the ``n - 1`` gaps: (left windows, right windows).

    ``gap``: the ``buffer_size + 1`` units ending at the gap against the
    ``buffer_size + 1`` units starting after it. ``centered`` (the reference): the
    window centred on unit ``i`` against the one centred on unit ``i + 1``.
    """
    b = buffer_size
    if window_shape == "centered":
        centred = [(max(0, i - b), min(n - 1, i + b)) for i in range(n)]
        return centred[:-1], centred[1:]
    return [(max(0, i - b), i) for i in range(n - 1)], [(i + 1, min(n - 1, i + 1 + b)) for i in range(n - 1)]


def gap_distances(
    text: str,
    units: list[tuple[int, int]],
    embed: EmbedFunction,
    buffer_size: int = 1,
    window_mode: WindowMode = "combine",
    window_shape: WindowShape = "gap",
    weights: np.ndarray | None = None,
    window_text: Callable[[int, int], str] | None = None,
    distance: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """``d[i] = 1 - cos(left[i], right[i])`` for the gap between unit ``i`` and ``i + 1``.

    ``reembed`` embeds each distinct window's text once (``window_text(a, z)``, units
    ``a..z``; default the source from the first's start to the last's end); ``combine``
    embeds each unit once and sums unit vectors over a window, weighted by ``weights``
    (token counts; None weighs units equally). ``distance``: :func:`paired_distances` by default.
    """
    custom_windows = window_text is not None or distance is not None
    distance = distance or paired_distances
    if window_text is None:
        def window_text(a: int, z: int) -> str:
            return text[units[a][0] : units[z][1]]
    n = len(units)
    if n < 2:
        return np.zeros(0)
    left, right = window_ranges(n, buffer_size, window_shape)
    # With buffer 0 a window is its one unit: combining embeds the same text, once. Not so for a
    # caller's own window text and distance (reference mode: embedded and compared as given).
    reembed = window_mode == "reembed" and (buffer_size > 0 or custom_windows)
    w = None if weights is None else np.maximum(np.asarray(weights, dtype=np.float64), 1.0)
    out = []
    # Each block of gaps embeds only what its windows cover, and its vectors are dropped
    # before the next: memory is bounded by the block whatever the document's length (a
    # 5M-character document of tiny sentences held ~2 GB of vectors when every unit was
    # embedded at once). A document of up to _GAPS_PER_BLOCK gaps is one block: one embed
    # call, as before. Across a block edge the ``buffer_size`` shared units (reembed: the
    # shared windows) are embedded twice, and a sentence repeated in two blocks is too.
    for g, h in _blocks(n - 1):
        if reembed:
            distinct = sorted(set(left[g:h]) | set(right[g:h]))
            vectors = _checked(embed([window_text(a, z) for a, z in distinct]), len(distinct))
            row = {window: i for i, window in enumerate(distinct)}
            left_rows = np.array([row[window] for window in left[g:h]], dtype=np.int64)
            right_rows = np.array([row[window] for window in right[g:h]], dtype=np.int64)
            out.append(distance(vectors[left_rows], vectors[right_rows]))
            continue
        # The units this block's windows cover (windows move forward with the gap), summed
        # from a prefix over them alone.
        lo, hi = left[g][0], right[h - 1][1] + 1
        local = _checked(embed([text[s:e] for s, e in units[lo:hi]]), hi - lo)
        local_weights = None if w is None else w[lo:hi]
        shift = [(a - lo, z - lo) for a, z in left[g:h]], [(a - lo, z - lo) for a, z in right[g:h]]
        out.append(paired_distances(combined_vectors(local, shift[0], local_weights),
                                    combined_vectors(local, shift[1], local_weights)))
    return np.concatenate(out)


# Gaps whose distances are computed together, from vectors embedded for them alone:
# working memory is the embedder's for this many texts and a few float64 arrays of this
# many rows by the model's dimension, whatever the document's length.
_GAPS_PER_BLOCK = 4096


def _blocks(n: int) -> Iterator[tuple[int, int]]:
    """``[g, h)`` bounds of the blocks of ``n`` rows; the document's time budget is checked before each."""
    for g in range(0, n, _GAPS_PER_BLOCK):
        check_time_budget()
        yield g, min(n, g + _GAPS_PER_BLOCK)


def combined_vectors(vectors: np.ndarray, windows: list[Window], weights: np.ndarray | None = None) -> np.ndarray:
    """Per window, the (weighted) sum of its units' unit-length vectors."""
    unit = _unit_normalised(np.asarray(vectors, dtype=np.float64))
    if weights is not None:
        unit = unit * np.asarray(weights, dtype=np.float64)[:, None]
    prefix = np.vstack([np.zeros((1, unit.shape[1])), np.cumsum(unit, axis=0)])
    first = np.array([a for a, _ in windows], dtype=np.int64)
    last = np.array([z for _, z in windows], dtype=np.int64)
    return prefix[last + 1] - prefix[first]


def _checked(vectors: object, n: int) -> np.ndarray:
    """The embedding function's output as a 2-D float array of ``n`` rows, finite.

    A float array is kept in its own dtype (float32 from the model: half the memory of a
    float64 copy); each block is widened to float64 where it is used, which is exact.
    """
    array = np.asarray(vectors)
    if not np.issubdtype(array.dtype, np.floating):
        array = np.asarray(array, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != n:
        raise ValueError(f"embedding function returned shape {array.shape} for {n} texts; expected ({n}, dim)")
    if not all(np.isfinite(array[g:h]).all() for g, h in _blocks(n)):
        raise ValueError("embedding function returned non-finite values (NaN or inf)")
    return array


def _unit_normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def paired_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``1 - cos(a[i], b[i])`` row by row; a zero vector is at distance 1 from anything."""
    ua = _unit_normalised(np.asarray(a, dtype=np.float64))
    ub = _unit_normalised(np.asarray(b, dtype=np.float64))
    return 1.0 - np.einsum("ij,ij->i", ua, ub)


def reference_paired_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``1 - a[i].b[i] / (|a[i]| |b[i]| + 1e-12)`` row by row, computed as LangChain's ``SemanticChunker``
    computes it (a 1x1 matrix product of float64 rows): distances tied at a percentile threshold then
    fall on the same side of it as there."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    out = np.empty(len(a))
    for i in range(len(a)):
        x, y = a[i : i + 1], b[i : i + 1]
        similarity = (x @ y.T) / (np.linalg.norm(x, axis=1, keepdims=True) * np.linalg.norm(y, axis=1, keepdims=True).T
                                  + 1e-12)
        out[i] = 1 - similarity[0][0]
    return out


def adjacent_distances(vectors: np.ndarray) -> np.ndarray:
    """``1 - cos(v[i], v[i + 1])`` for each adjacent pair."""
    v = np.asarray(vectors, dtype=np.float64)
    return paired_distances(v[:-1], v[1:])


# --- thresholds ----------------------------------------------------------------


def breakpoint_threshold(
    distances: np.ndarray, threshold_type: ThresholdType, amount: float | None = None
) -> tuple[float, np.ndarray]:
    """The threshold and the scores compared against it (the distances, or their gradient)."""
    d = np.asarray(distances, dtype=np.float64)
    k = BREAKPOINT_DEFAULTS[threshold_type] if amount is None else float(amount)
    if threshold_type == "percentile":
        return float(np.percentile(d, k)), d
    if threshold_type == "standard_deviation":
        return float(np.mean(d) + k * np.std(d)), d
    if threshold_type == "interquartile":
        q1, q3 = np.percentile(d, [25, 75])
        return float(np.mean(d) + k * (q3 - q1)), d
    if threshold_type == "gradient":
        gradient = np.gradient(d, np.arange(len(d)))
        return float(np.percentile(gradient, k)), gradient
    raise ValueError(f"unknown breakpoint_threshold_type {threshold_type!r}; known: {', '.join(BREAKPOINT_DEFAULTS)}")


def threshold_for_chunk_count(distances: np.ndarray, number_of_chunks: int) -> float:
    """The reference's map of a wanted chunk count to a percentile of the distances.

    One chunk maps to the 100th percentile, ``len(distances)`` chunks to the 0th,
    linearly in between (clamped).
    """
    x1, y1 = float(len(distances)), 0.0
    x2, y2 = 1.0, 100.0
    x = max(min(float(number_of_chunks), x1), x2)
    y = y2 if x1 == x2 else y1 + (y2 - y1) / (x2 - x1) * (x - x1)
    return float(np.percentile(distances, min(max(y, 0.0), 100.0)))


def find_breakpoints(
    distances: np.ndarray,
    threshold_type: ThresholdType = "percentile",
    amount: float | None = None,
    number_of_chunks: int | None = None,
) -> list[int]:
    """Indices ``i`` of the gaps (between unit ``i`` and ``i + 1``) that start a new chunk."""
    d = np.asarray(distances, dtype=np.float64)
    if d.size == 0 or (threshold_type == "gradient" and number_of_chunks is None and d.size < 2):
        return []
    if number_of_chunks is not None:
        threshold, scores = threshold_for_chunk_count(d, number_of_chunks), d
    else:
        threshold, scores = breakpoint_threshold(d, threshold_type, amount)
    return [int(i) for i in np.flatnonzero(scores > threshold)]


def _check_amount(threshold_type: str, amount: float | None) -> None:
    if threshold_type not in BREAKPOINT_DEFAULTS:
        raise ValueError(
            f"unknown breakpoint_threshold_type {threshold_type!r}; known: {', '.join(BREAKPOINT_DEFAULTS)}"
        )
    if amount is None:
        return
    if not np.isfinite(amount):
        raise ValueError(f"breakpoint_threshold_amount must be finite, got {amount}")
    if threshold_type in ("percentile", "gradient") and not 0 <= amount <= 100:
        raise ValueError(f"breakpoint_threshold_amount for {threshold_type} is a percentile in [0, 100], got {amount}")


# --- groups --------------------------------------------------------------------

Group = tuple[int, int]  # units [first, last], inclusive


def _groups(n_units: int, breaks: Sequence[int]) -> list[Group]:
    if n_units == 0:
        return []
    starts = [0, *(b + 1 for b in breaks)]
    ends = [*breaks, n_units - 1]
    return list(zip(starts, ends))


def merge_small_groups(
    groups: list[Group], sizes: UnitSizes, distances: np.ndarray, min_size: int, cap: int
) -> list[Group]:
    """Merge each group below ``min_size`` tokens into the neighbour across the weaker gap.

    The weaker gap is the one with the smaller distance (the more similar
    neighbour). A merge that would exceed ``cap`` is not made; when neither
    neighbour fits, the small group stays.
    """
    prefix = sizes.prefix
    size = lambda g: sizes.size(g[0], g[1], prefix)
    out = list(groups)
    i = 0
    while i < len(out):
        if size(out[i]) >= min_size or len(out) == 1:
            i += 1
            continue
        options = []
        if i > 0:
            options.append((float(distances[out[i][0] - 1]), i - 1))
        if i + 1 < len(out):
            options.append((float(distances[out[i][1]]), i + 1))
        # Neighbours are adjacent, so the merged group spans the pair's outer ends.
        fitting = [(d, j) for d, j in sorted(options) if size((out[min(i, j)][0], out[max(i, j)][1])) <= cap]
        if not fitting:
            i += 1
            continue
        j = fitting[0][1]
        a, b = min(i, j), max(i, j)
        out[a : b + 1] = [(out[a][0], out[b][1])]
        i = a  # the merged group may still be small
    return out


def fit_groups_to_cap(groups: list[Group], sizes: UnitSizes, cap: int) -> list[Group]:
    """Cut every group above ``cap`` tokens at unit boundaries into balanced pieces.

    A group of ``T`` tokens becomes about ``ceil(T / cap)`` pieces, each cut at the
    unit boundary nearest to the next multiple of ``T / k`` (never above the cap),
    so no needless small remainder is left. A unit alone above the cap is a group
    of its own; emission re-splits it by R.
    """
    prefix = sizes.prefix
    out: list[Group] = []
    for first, last in groups:
        total = sizes.size(first, last, prefix)
        if total <= cap:
            out.append((first, last))
            continue
        target = total / -(-total // cap)
        start, size, done, pieces = first, 0, 0, 0
        for u in range(first, last + 1):
            t = int(sizes.tokens[u]) if size else sizes.size(u, u, prefix)
            if size and (size + t > cap or t > cap or done + size + t / 2 > target * (pieces + 1)):
                out.append((start, u - 1))
                done, pieces = done + size, pieces + 1
                start, size = u, 0
            if t > cap:
                if u > start:
                    # Units of 0 estimated tokens (" 。" counts as its leading space alone) are
                    # all that was accumulated: a group of their own, not dropped (nor counted
                    # as a piece of the balanced cut: it holds none of its tokens).
                    out.append((start, u - 1))
                out.append((u, u))
                done, pieces = done + t, pieces + 1
                start = u + 1
                continue
            size += t
        if start <= last:
            out.append((start, last))
    return out


class _GroupEmitter:
    """Turns unit groups into spans within the cap, measuring each span's text once."""

    def __init__(self, text: str, units: list[tuple[int, int]], sizes: UnitSizes, tokenizer: Tokenizer, cap: int,
                 doc_id: str = ""):
        self.text = text
        self.doc_id = doc_id
        self.units = units
        self.sizes = sizes
        self.tokenizer = tokenizer
        self.cap = cap

    def span(self, first: int, last: int) -> Span:
        start, end = self.units[first][0], self.units[last][1]
        body = self.text[start:end]
        return Span(start, end, body, count_tokens(self.tokenizer, body))

    def emit_all(self, groups: list[Group]) -> list[Span]:
        out: list[Span] = []
        for first, last in groups:
            out.extend(self.emit(first, last))
        return out

    def emit(self, first: int, last: int) -> list[Span]:
        """The group's span; when its joined text measures above the cap (BPE across
        the joins, rare), units are given back one at a time into a further span."""
        if first == last and self.sizes.size(first, first) > self.cap:
            return self.resplit_unit(first)  # known oversize: no need to measure it again
        out: list[Span] = []
        while first <= last:
            end = last
            piece = self.span(first, end)
            while piece.tokens > self.cap and end > first:
                end -= 1
                piece = self.span(first, end)
            out.extend([piece] if piece.tokens <= self.cap else self.resplit_unit(first))
            first = end + 1
        return out

    def resplit_unit(self, i: int) -> list[Span]:
        start, end = self.units[i]
        logger.warning(
            "semantic: %sthe sentence or table at chars %d-%d exceeds %d tokens; re-split by recursive_character",
            _doc_prefix(self.doc_id), start, end, self.cap,
        )  # fmt: skip
        return [
            Span(start + s.start, start + s.end, s.text, s.tokens)
            for s in split_recursive(self.text[start:end], self.tokenizer, self.cap, 0, CJK_SEPARATORS)
        ]


# --- strategy ------------------------------------------------------------------


class MissingEmbedderError(ValueError):
    """The semantic strategy was called without an embedder and without asking for the fallback."""


def chunk_semantic(
    doc: ParsedDocument, config: SemanticConfig, tokenizer: Tokenizer, embedder: object = None
) -> list[Chunk]:
    embed = getattr(embedder, "embed", None) if embedder is not None else None
    if embedder is not None and embed is None:
        raise TypeError(f"semantic: embedder {type(embedder).__name__} has no embed(texts) method")
    if embed is None and not config.allow_recursive_fallback:
        raise MissingEmbedderError(
            "semantic needs an embedder to find breakpoints: pass embedder=..., e.g. "
            "chunk_text(text, 'semantic', embedder=SentenceTransformerEmbedder()) with "
            "SentenceTransformerEmbedder from chunking.embedding (or any object with embed(texts) -> array); "
            "or pass allow_recursive_fallback=True to chunk with recursive instead"
        )
    spans = split_semantic(
        doc.text,
        tokenizer,
        embed,
        chunk_token_size=config.chunk_token_size,
        breakpoint_threshold_type=config.breakpoint_threshold_type,
        breakpoint_threshold_amount=config.breakpoint_threshold_amount,
        number_of_chunks=config.number_of_chunks,
        buffer_size=config.buffer_size,
        sentence_split_regex=config.sentence_split_regex,
        min_chunk_size=config.min_chunk_size,
        window_mode=config.window_mode,
        window_shape=config.window_shape,
        chunk_overlap_token_size=config.chunk_overlap_token_size,
        doc_id=doc.doc_id,
    )
    base = {} if embed is not None else {"fallback": "recursive_character: no embedding model"}
    tables = table_regions(doc.text)
    chunks = []
    for s in spans:
        metadata = dict(base)
        if any(a < s.end and s.start < b and not (s.start <= a and b <= s.end) for a, b in tables):
            metadata["table_fragment"] = True  # an R piece of a table above the cap
        chunks.append(s.to_chunk(metadata))
    return attach_provenance(doc, chunks)


SPEC = StrategySpec(
    name="semantic",
    config_model=SemanticConfig,
    chunk=chunk_semantic,
    description="LightRAG V: breaks where adjacent sentence-window embeddings diverge; oversize groups re-split by R.",
    needs_embedder=True,
    atomic_markup=("table",),
)
