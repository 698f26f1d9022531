"""``sentence_window``: whole sentences grouped to a target, overlapping by whole sentences.

From seeds/sentence-chunking-adr.md (``adr``: 3000 chars, 20% overlap, min 500,
max 5000 chars) and seeds/chunking-service.md (``service``: 512 tokens, 128 tokens
overlap, min 50). ``preset`` picks the defaults; any field given explicitly wins.

Algorithm (both seeds): split into sentences; add sentences while the chunk stays
within ``chunk_size``; when the next one would not fit, emit the chunk and start
the next one with the longest run of its trailing sentences that fits the overlap
budget (``overlap`` units, or ``overlap_ratio`` of the emitted chunk's size).

Invariants a caller relies on::

    chunk.text == doc.text[chunk.char_start:chunk.char_end]   # verbatim, exact offsets
    size(chunk) <= max_size     # unless allow_oversize_sentences, then only per sentence

Chunks are whitespace-trimmed, in document order, and together cover every
non-whitespace character. Sizes are exact tokens of the tokenizer argument
(``unit="tokens"``), characters (``unit="chars"``), or ceil(chars/4) when
``estimate`` is chosen, as the service seed does. The document is tokenized
once: sentence and chunk sizes are counts of source spans, answered from that
one encoding (``chunking.tokenizers.span_counter``), all sentences in one
``count_spans`` batch and all chunks in another; the recursive split of an
oversized sentence counts its pieces from the same encoding (``_SliceTokenizer``).

Where we differ from the seeds, on purpose:

* A sentence longer than ``max_size`` is split by the recursive fallback
  (``chunking.strategies.recursive.split_recursive``, no overlap) so the cap holds;
  the service seed keeps it whole ("doesn't split mid-sentence, even if it exceeds
  chunkSize"). ``allow_oversize_sentences=True`` restores the seed's behaviour.
* Sentence boundaries come from the shared segmenter (abbreviations, decimals,
  CJK endings); the seeds use ``[.!?]+\\s+``.
* The overlap never repeats a whole chunk and always leaves room for the next
  sentence, so every chunk adds new text and none exceeds ``chunk_size`` because
  of its overlap.
* A chunk below ``min_size`` is merged into the previous chunk when the result
  stays within ``max_size``; otherwise it is kept. Nothing is dropped (a document
  shorter than ``min_size`` still gives one chunk, as in the service seed).
* Offsets are exact: the service seed's own example ends "How are you? I am
  fine." at 37, one past the text's end (36).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate
from typing import Any, Callable, Literal, NamedTuple, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chunking.model import Chunk, ParsedDocument, attach_provenance
from chunking.segmenter import sentence_bounds
from chunking.strategies import StrategySpec, lax_int
from chunking.strategies.recursive import CJK_SEPARATORS, split_recursive
from chunking.tokenizers import (
    CharTokenizer,
    EstimateTokenizer,
    SpanCount,
    Tokenizer,
    count_spans,
    count_tokens,
    span_counter,
)

PRESETS: dict[str, dict[str, Any]] = {
    # ADR-003: 3000-char target, 20% overlap, 500..5000 chars.
    "adr": {"unit": "chars", "chunk_size": 3000, "overlap": None, "overlap_ratio": 0.20, "min_size": 500, "max_size": 5000},
    # Chunking service: 512 tokens, 128 overlap, min 50; chunkSize is also the max.
    "service": {"unit": "tokens", "chunk_size": 512, "overlap": 128, "overlap_ratio": None, "min_size": 50, "max_size": 512},
}


def scaled_default_overlap(preset: dict[str, Any], chunk_size: Any) -> int | None:
    """The preset's fixed overlap scaled to a user's ``chunk_size`` (same share of the chunk).

    Only a default scales: ``service`` with ``chunk_size=15`` overlaps by 3
    (128/512 of it), not by 128, which would exceed the chunk. An explicit
    ``overlap`` is never changed here and is rejected when it does not fit.
    A preset with a ratio (``adr``) needs no scaling and keeps ``None``.
    """
    size = lax_int(chunk_size)
    if preset["overlap"] is None or size is None or size < 1:
        return preset["overlap"]
    return preset["overlap"] * size // preset["chunk_size"]


# The seeds' estimate of characters per token (the service seed's ceil(chars/4)).
CHARS_PER_TOKEN = 4


def preset_sizes_in_unit(preset: dict[str, Any], explicit: dict[str, Any]) -> dict[str, int]:
    """The preset's sizes the caller did not set, in the unit the caller chose when it is not the
    preset's own (``adr``'s characters with ``unit="tokens"``, which ``chunk_token_size`` and
    ``chunk_overlap_token_size`` imply): scaled by the caller's ``chunk_size`` against the preset's
    when given (the same shares), else by ``CHARS_PER_TOKEN`` (a fixed overlap too). Empty in the
    preset's own unit.
    Before, ``adr`` with ``chunk_overlap_token_size=50`` made chunks of 3,000 *tokens*."""
    unit = explicit.get("unit")
    if unit is None or unit == preset["unit"]:
        return {}
    size = lax_int(explicit.get("chunk_size"))
    if size is not None and size >= 1:
        factor = size / preset["chunk_size"]
    else:
        factor = 1 / CHARS_PER_TOKEN if unit == "tokens" else CHARS_PER_TOKEN
    sizes = {k: max(1 if k != "min_size" else 0, round(preset[k] * factor))
             for k in ("chunk_size", "min_size", "max_size") if k not in explicit}
    if preset["overlap"] is not None and not {"chunk_size", "overlap", "overlap_ratio"} & explicit.keys():
        sizes["overlap"] = round(preset["overlap"] * factor)  # (with a chunk_size, scaled_default_overlap's)
    return sizes


class SentenceWindowConfig(BaseModel):
    """Configuration of ``sentence_window``: a preset plus explicit overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Literal["adr", "service"] = "service"
    unit: Literal["tokens", "chars"] = Field(None, description="What sizes count (from the preset).")  # type: ignore[assignment]
    chunk_size: int = Field(None, ge=1, description="Target: a chunk closes when the next sentence would pass it.")  # type: ignore[assignment]
    overlap: int | None = Field(None, ge=0, description="Overlap budget in units (service: 128 of 512, scaled to a chunk_size you set).")
    overlap_ratio: float | None = Field(None, ge=0, lt=1, description="Overlap budget as a share of the emitted chunk (adr).")
    min_size: int = Field(None, ge=0, description="Smaller chunks merge into the previous one when that fits.")  # type: ignore[assignment]
    max_size: int = Field(None, ge=1, description="Hard cap per chunk, in units.")  # type: ignore[assignment]
    estimate: bool = Field(False, description="Count tokens as ceil(chars/4), the service seed's estimate (each chunk's metadata then has token_count_estimated).")
    allow_oversize_sentences: bool = Field(False, description="Keep a sentence above max_size whole (the seeds' behaviour).")

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, values: Any) -> Any:
        if not isinstance(values, dict):
            return values
        preset = values.get("preset", "service")
        if preset not in PRESETS:
            return values  # the Literal check reports it
        explicit = dict(values)
        if explicit.get("overlap") is not None and explicit.get("overlap_ratio") is not None:
            # Both given: one would be ignored (overlap won, silently).
            raise ValueError(f"overlap ({explicit['overlap']}) and overlap_ratio ({explicit['overlap_ratio']}) "
                             "both set: give one (a fixed budget in units, or a share of each chunk)")
        merged = {**PRESETS[preset], **{k: v for k, v in explicit.items() if k in PRESETS[preset]}}
        if "overlap" in explicit and "overlap_ratio" not in explicit:
            merged["overlap_ratio"] = None  # an explicit fixed overlap replaces the preset's ratio
        if "overlap_ratio" in explicit and "overlap" not in explicit:
            merged["overlap"] = None
        if "chunk_size" in explicit and "max_size" not in explicit and preset == "service":
            merged["max_size"] = explicit["chunk_size"]
        if "chunk_size" in explicit and "overlap" not in explicit and "overlap_ratio" not in explicit:
            merged["overlap"] = scaled_default_overlap(PRESETS[preset], explicit["chunk_size"])
        merged.update(preset_sizes_in_unit(PRESETS[preset], explicit))
        return {**explicit, **merged}

    @model_validator(mode="after")
    def _consistent(self) -> "SentenceWindowConfig":
        if self.max_size < self.chunk_size:
            raise ValueError(f"max_size ({self.max_size}) must be at least chunk_size ({self.chunk_size})")
        if self.overlap is not None and self.overlap >= self.chunk_size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than chunk_size ({self.chunk_size})")
        if self.estimate and self.unit == "chars":
            raise ValueError("estimate applies to unit='tokens'; unit='chars' already counts characters")
        return self

    @property
    def token_cap(self) -> int | None:
        """The hard token cap (of ``token_count``), when sizes are tokens and oversize sentences are split."""
        if self.unit == "tokens" and not self.allow_oversize_sentences:
            return self.max_size
        return None


def chunk_sentence_window(
    doc: ParsedDocument, config: SentenceWindowConfig, tokenizer: Tokenizer, embedder: object = None
) -> list[Chunk]:
    count = _estimate_counter if config.estimate else span_counter(tokenizer, doc.text)
    spans = window_spans(doc.text, config, tokenizer, count if config.unit == "tokens" else None)
    limit = None if config.allow_oversize_sentences else config.max_size
    measure = _measuring_tokenizer(config, tokenizer)
    chunks: list[Chunk] = []
    counts = count_spans(count, [start for start, _ in spans], [end for _, end in spans])
    # Each chunk says when its token_count is the estimate, not the tokenizer's count.
    metadata = {"token_count_estimated": True} if config.estimate else {}
    for (start, end), n in zip(spans, counts):
        if limit is not None and (end - start if config.unit == "chars" else n) > limit:
            # Windows of several units are measured while grouping (_windows), so what still
            # measures over is a window of one unit (seen: one character that counts more
            # tokens than a tiny cap, which the re-split keeps whole). Re-split by the
            # config's own measure so max_size stays a guarantee wherever text can be cut.
            for piece in split_recursive(doc.text[start:end], measure, limit, 0, CJK_SEPARATORS):
                tokens = piece.tokens if config.unit == "tokens" else count(start + piece.start, start + piece.end)
                chunks.append(Chunk.of({"text": piece.text, "char_start": start + piece.start, "char_end": start + piece.end,
                                        "token_count": tokens, "metadata": metadata}))
            continue
        chunks.append(Chunk.of({"text": doc.text[start:end], "char_start": start, "char_end": end, "token_count": n,
                                "metadata": metadata}))
    return attach_provenance(doc, chunks)


def window_spans(
    text: str, config: SentenceWindowConfig, tokenizer: Tokenizer, count: SpanCount | None = None
) -> list[tuple[int, int]]:
    """``(start, end)`` of each chunk: whitespace-trimmed runs of whole sentences.

    ``count(start, end)``, when given, must measure ``text[start:end]`` as the
    config's unit does (the caller's span counter, shared to tokenize once).
    """
    measure = _measuring_tokenizer(config, tokenizer)
    count = count or span_counter(measure, text)
    units = _units(text, config, measure, count)
    windows = _windows(text, units, config, count)
    starts, ends = units.starts, units.ends
    return [span for span in (_trim(text, starts[a], ends[b - 1]) for a, b in windows) if span[1] > span[0]]


def _windows(text: str, units: "_Units", config: SentenceWindowConfig, count: SpanCount) -> list[tuple[int, int]]:
    """Windows ``[a, b)`` of unit indices, each (of more than one unit) within ``max_size`` as measured.

    Grouped by summed unit sizes, and each window measured once as it closes: a window can
    measure over ``max_size`` although its sizes sum within it (the pieces of a split
    sentence are sized without the whitespace between them; BPE can count a join higher
    than its parts). Re-splitting such a window after grouping broke the windows after it
    (the next one had taken its trailing units as overlap, and repeated a re-split piece
    whole, or started before it); grouping with the measure keeps them in order.
    (With allow_oversize_sentences too: it exempts one sentence, never a window of several.)
    """
    starts, ends, max_size = units.starts, units.ends, config.max_size

    def fits(a: int, b: int) -> bool:
        """Whether units ``[a, b)`` joined and trimmed measure within ``max_size``."""
        return count(*_trim(text, starts[a], ends[b - 1])) <= max_size

    return _merge_small(_group(units.sizes, config, fits), units.sizes, config, fits)


def _measuring_tokenizer(config: SentenceWindowConfig, tokenizer: Tokenizer) -> Tokenizer:
    if config.unit == "chars":
        return CharTokenizer()
    return EstimateTokenizer() if config.estimate else tokenizer


class _Units(NamedTuple):
    """The sentences of a document (oversized ones split unless allowed), as three parallel
    lists: unit ``i`` is ``text[starts[i]:ends[i]]`` of size ``sizes[i]``. Lists of ints
    rather than a tuple per sentence: a document has thousands, and every tuple brings
    the next cyclic garbage collection nearer (ints are not tracked)."""

    starts: list[int]
    ends: list[int]
    sizes: list[int]


def _units(text: str, config: SentenceWindowConfig, measure: Tokenizer, count: SpanCount) -> _Units:
    """Sentences with their sizes, oversized ones split unless allowed."""
    max_size, split_oversize = config.max_size, not config.allow_oversize_sentences
    # A huge sentence whose prefix is already over the max needs no full count
    # when it is going to be split anyway (the 2 MB one-line file); the others
    # are counted in one batch.
    huge = 32 * max_size if split_oversize else len(text)
    bounds = sentence_bounds(text)
    if not bounds:
        return _Units([], [], [])
    starts, ends = bounds[:-1], bounds[1:]
    if max(map(int.__sub__, ends, starts)) <= huge:
        sizes = count_spans(count, starts, ends)  # the common case: every sentence counted in one batch
    else:
        ordinary = [i for i, (start, end) in enumerate(zip(starts, ends)) if end - start <= huge]
        ordinary_sizes = count_spans(count, [starts[i] for i in ordinary], [ends[i] for i in ordinary])
        sizes = [max_size + 1] * len(starts)  # a huge sentence whose prefix is over the max: split either way
        for i, size in zip(ordinary, ordinary_sizes):
            sizes[i] = size
        for i, (start, end) in enumerate(zip(starts, ends)):
            if end - start > huge and count(start, start + 16 * max_size) <= max_size:
                sizes[i] = count(start, end)
    oversized = [i for i, size in enumerate(sizes) if size > max_size] if split_oversize else []
    for i in reversed(oversized):  # from the end, so the indexes before stay valid
        start, end = starts[i], ends[i]
        sentence = text[start:end]
        pieces = split_recursive(sentence, _SliceTokenizer(measure, sentence, count, start), max_size, 0, CJK_SEPARATORS)
        starts[i : i + 1] = [start + p.start for p in pieces]
        ends[i : i + 1] = [start + p.end for p in pieces]
        sizes[i : i + 1] = [p.tokens for p in pieces]
    return _Units(starts, ends, sizes)


class _SliceTokenizer:
    """``tokenizer``, except that spans of ``text`` (a slice of the document at ``offset``)
    are counted by the document's counter: the recursive split of one oversized
    sentence then counts its pieces from the document's single encoding."""

    def __init__(self, tokenizer: Tokenizer, text: str, document_count: SpanCount, offset: int) -> None:
        self.tokenizer, self.text, self.document_count, self.offset = tokenizer, text, document_count, offset

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens)

    def count(self, text: str) -> int:
        return count_tokens(self.tokenizer, text)

    def span_counter(self, text: str) -> SpanCount:
        if text is not self.text:
            return span_counter(self.tokenizer, text)
        return _OffsetCount(self.document_count, self.offset)


class _OffsetCount:
    """``count(start, end)`` of a slice, answered by the document's counter at ``offset``."""

    def __init__(self, document_count: SpanCount, offset: int) -> None:
        self.document_count, self.offset = document_count, offset

    def __call__(self, start: int, end: int) -> int:
        return self.document_count(start + self.offset, end + self.offset)

    def many(self, starts: Sequence[int], ends: Sequence[int]) -> list[int]:
        offset = self.offset
        return count_spans(self.document_count, [s + offset for s in starts], [e + offset for e in ends])


def _group(sizes: list[int], config: SentenceWindowConfig, fits: _Fits | None = None) -> list[tuple[int, int]]:
    """Windows ``[a, b)`` of unit indices (``sizes``: of each unit): greedy fill, then whole-sentence overlap.

    Invariants: windows are in order and each ends past the last one (every chunk adds
    text); a window of more than one unit sums within ``chunk_size`` and, when ``fits`` is
    given, ``fits(a, b)``. ``fits`` is asked once per window, as it closes: a window that
    fails gives back its last units until it fits (and, if that leaves it nothing past the
    last window, carries one unit less of overlap), so a document whose windows all fit is
    grouped exactly as without it, at one measure per window.
    """
    prefix = list(accumulate(sizes, initial=0))
    n_units, chunk_size = len(sizes), config.chunk_size
    windows: list[tuple[int, int]] = []
    a = 0
    while a < n_units:
        last_end = windows[-1][1] if windows else 0
        while True:
            # As many units from a as sum within chunk_size (the first always: one unit over
            # it closes its window alone).
            b = max(a + 1, bisect_right(prefix, prefix[a] + chunk_size) - 1)
            if fits is not None:
                while b - a > 1 and not fits(a, b):
                    b -= 1
            if b > last_end:
                break
            a += 1  # a <= last_end - 1 here: at a == last_end, b > last_end
        windows.append((a, b))
        if b >= n_units:
            break
        a = _overlap_start(sizes, a, b, prefix[b] - prefix[a], sizes[b], config)
    return windows


def _overlap_start(sizes: list[int], a: int, b: int, size: int, next_size: int, config: SentenceWindowConfig) -> int:
    """Start of the next window: trailing sentences of [a, b) within the overlap budget."""
    budget = config.overlap if config.overlap is not None else int(size * (config.overlap_ratio or 0))
    start, carried = b, 0
    # Never the whole window (every chunk must add text) and always room for the next sentence.
    while start - 1 > a and carried + sizes[start - 1] <= budget and carried + sizes[start - 1] + next_size <= config.chunk_size:
        start -= 1
        carried += sizes[start]
    return start


def _merge_small(
    windows: list[tuple[int, int]], sizes: list[int], config: SentenceWindowConfig, fits: _Fits | None = None
) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in windows:
        size = sum(sizes[a:b])
        if out and size < config.min_size:
            pa, _ = out[-1]
            if sum(sizes[pa:b]) <= config.max_size and (fits is None or fits(pa, b)):
                out[-1] = (pa, b)
                continue
        out.append((a, b))
    return out


# ``fits(a, b)``: whether the window of units ``[a, b)`` measures within ``max_size`` (``_windows``).
_Fits = Callable[[int, int], bool]


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _estimate_counter(start: int, end: int) -> int:
    return math.ceil((end - start) / 4)


SPEC = StrategySpec(
    name="sentence_window",
    config_model=SentenceWindowConfig,
    chunk=chunk_sentence_window,
    description="Whole sentences grouped to a target with whole-sentence overlap; presets adr (3000 chars, 20%) and service (512 tokens, 128).",
)
