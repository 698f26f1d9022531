"""Embedding a chunk with its context: the document title and heading path prepended,
and optionally the parsed text around the chunk (its neighbours) on both sides.

Only the text given to the embedding model changes; the stored chunk (text,
offsets) does not, so search returns, highlights and scores the chunk's own span.
The embedded text's sha256 is the embedding-cache key, so the context is part of the
key: a renamed heading or title, or changed neighbouring text, re-embeds; nothing
else does.

Neighbour context is the small-to-big idea turned around: small stored chunks (few
retrieved characters) whose embedded view is as large as the model reads. The
neighbours are whole words of the parsed text right before and after the chunk's
span, as many as fit in ``EmbedContext.neighbour_tokens`` word pieces and in the
model's max sequence (the model would silently truncate the rest).

Late chunking (Günther et al., 2024) keeps that large view without blurring neighbours
together: the model reads a window (the chunk centred in its neighbours, up to
``EmbedContext.late_tokens`` word pieces, the title and heading path first when
``headings`` is on) and the chunk's vector is the mean of the contextualised vectors of
its own word pieces only (``SentenceTransformerEmbedder.embed_spans``). The cache key is
the sha256 of the window and the chunk's span in it (``late_key``), so an edit inside
the window re-embeds the chunk and nothing else does. Tiled (``late_tiled``): runs
of consecutive chunks share one window (``late_tiles``), about one forward pass per
window of word pieces instead of one per chunk.

Blended (``late_blend``): the stored vector is ``(1 - b)`` times the late vector plus ``b`` times
the vector of the chunk embedded on its own (its text, after the title and heading path when
``headings`` is on), normalised. Why: late vectors of neighbouring chunks share their window's
context and come out close, so a neighbour can outrank the chunk that holds the answer; the
chunk's own vector keeps what only it says. One more short forward pass per chunk.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import PurePosixPath
from typing import Callable, Sequence

import numpy as np

from resources.store import StoredChunk

CONTEXT_SEPARATOR = " > "

# A unit of neighbour text: one CJK character (those scripts have no spaces), else a
# run of non-space characters. Neighbours start and end on unit boundaries.
_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_UNIT = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
# How far to look for neighbour text, in characters per word piece of budget (a word
# piece is rarely longer than a few characters; whitespace runs can be long).
_CHARS_PER_PIECE = 12


@dataclasses.dataclass(frozen=True)
class EmbedContext:
    """What a chunk is embedded with besides its own text.

    ``headings``: the document title and the chunk's heading path, prepended.
    ``neighbour_tokens``: at most this many word pieces (the embedding model's tokenizer)
    of the parsed text around the chunk, about half before and half after; the whole
    embedded text never exceeds the model's max sequence. 0: none.
    ``late_tokens``: late chunking; the model reads a window of at most this many word
    pieces (and at most its max sequence; special tokens included): the headings when on,
    then the chunk with the parsed text around it, about half before and half after; only
    the chunk's own word pieces are pooled. A chunk that alone fills the window gets no
    neighbours (the model truncates it as it would truncate the chunk). 0: off. Excludes
    ``neighbour_tokens``.
    ``late_tiled``: instead of one window per chunk, consecutive chunks share windows of at
    most ``late_tokens`` word pieces (``late_tiles``): one forward pass per window.
    ``late_blend``: the weight, in [0, 1), of the chunk's own vector (embedded alone, with the
    headings when on) in its stored vector; the late vector has the rest. 0: late only.
    Falsy when it adds nothing (the chunk's own text is embedded).
    """

    headings: bool = False
    neighbour_tokens: int = 0
    late_tokens: int = 0
    late_tiled: bool = False
    late_blend: float = 0.0

    def __post_init__(self) -> None:
        if self.late_tiled and not self.late_tokens:
            raise ValueError("late_tiled needs late_tokens (the window's word pieces)")
        if not 0.0 <= self.late_blend < 1.0:
            raise ValueError(f"late_blend must be in [0, 1) (the own vector's weight), not {self.late_blend}")
        if self.late_blend and not self.late_tokens:
            raise ValueError("late_blend needs late_tokens (it blends into a late-chunked vector)")
        if self.neighbour_tokens < 0:
            raise ValueError(f"neighbour_tokens must be >= 0, not {self.neighbour_tokens}")
        if self.late_tokens < 0:
            raise ValueError(f"late_tokens must be >= 0, not {self.late_tokens}")
        if self.late_tokens and self.neighbour_tokens:
            raise ValueError("late chunking and neighbour context exclude each other: the window of late chunking "
                             "already holds the neighbours (set one of them)")

    def __bool__(self) -> bool:
        return self.headings or self.neighbour_tokens > 0 or self.late_tokens > 0

    @classmethod
    def of(cls, value: "EmbedContext | bool | None") -> "EmbedContext":
        """``True``/``False`` (the original switch) mean headings on/off."""
        return value if isinstance(value, cls) else cls(headings=bool(value))

    def code_version_suffix(self) -> str:
        """Part of the embeddings asset's code version: a changed option marks the vectors stale."""
        return ("+context" if self.headings else "") + (
            f"+neighbours{self.neighbour_tokens}" if self.neighbour_tokens else "") + (
            f"+late{self.late_tokens}" if self.late_tokens else "") + ("tiled" if self.late_tiled else "") + (
            f"+blend{self.late_blend!r}" if self.late_blend else "")


def embedding_text(
    text: str, *, title: str = "", heading_path: Sequence[str] = (), before: str = "", after: str = ""
) -> str:
    """``"Title > H1 > H2\\n\\n<before><text><after>"``; the text alone when there is no context.

    Empty parts are dropped, and a heading equal to the part before it (a document
    whose first heading is its title) is not repeated. ``before``/``after`` are the
    neighbouring parsed text, joined to the chunk as they stand in the document.
    """
    parts: list[str] = []
    for part in (title, *heading_path):
        part = " ".join(part.split())
        if part and (not parts or parts[-1] != part):
            parts.append(part)
    body = f"{before}{text}{after}"
    return f"{CONTEXT_SEPARATOR.join(parts)}\n\n{body}" if parts else body


def _largest_fitting(candidates: Sequence[str], budget: int, count_pieces: Callable[[str], int]) -> str:
    """The longest of ``candidates`` (ordered by length, each extending the previous) within
    ``budget`` word pieces; "" when none fits. Binary search: the count grows with the text."""
    lo, hi = 0, len(candidates)  # candidates[:lo] known to fit (as a prefix count)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_pieces(candidates[mid - 1]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return candidates[lo - 1] if lo else ""


def _before_candidates(doc_text: str, start: int, budget: int) -> list[str]:
    """Texts ``doc_text[b:start]`` for unit starts b, nearest first (shortest first)."""
    lo = max(0, start - budget * _CHARS_PER_PIECE)
    region = doc_text[lo:start]
    starts = [m.start() for m in _UNIT.finditer(region)]
    if lo > 0 and starts and starts[0] == 0 and not doc_text[lo - 1].isspace():
        starts = starts[1:]  # a word cut by the look-back limit is not a whole word
    return [region[s:] for s in reversed(starts)]


def _after_candidates(doc_text: str, end: int, budget: int) -> list[str]:
    """Texts ``doc_text[end:a]`` for unit ends a, nearest first (shortest first)."""
    hi = min(len(doc_text), end + budget * _CHARS_PER_PIECE)
    region = doc_text[end:hi]
    ends = [m.end() for m in _UNIT.finditer(region)]
    if hi < len(doc_text) and ends and ends[-1] == len(region) and not doc_text[hi].isspace():
        ends = ends[:-1]
    return [region[:e] for e in ends]


def neighbours(
    doc_text: str, start: int, end: int, budget: int, count_pieces: Callable[[str], int]
) -> tuple[str, str]:
    """(before, after): the whole units of ``doc_text`` right before ``start`` and right after
    ``end`` whose word pieces (``count_pieces``, no special tokens) total at most ``budget``.

    Half the budget goes before; a side that reaches the document's edge leaves the rest
    to the other. ``before + doc_text[start:end] + after`` is contiguous document text.
    """
    if budget <= 0:
        return "", ""
    before_options = _before_candidates(doc_text, start, budget)
    after_options = _after_candidates(doc_text, end, budget)
    before = _largest_fitting(before_options, budget // 2, count_pieces)
    after = _largest_fitting(after_options, budget - count_pieces(before), count_pieces)
    before = _largest_fitting(before_options, budget - count_pieces(after), count_pieces)
    return before, after


def context_window(
    text: str, *, title: str = "", heading_path: Sequence[str] = (), doc_text: str = "", span: tuple[int, int] = (0, 0),
    neighbour_tokens: int = 0, count_tokens: Callable[[str], int] | None = None, max_tokens: int | None = None,
) -> tuple[str, int, int]:
    """``(window, start, end)``: the text to embed for one chunk (``embedding_text`` with up to
    ``neighbour_tokens`` word pieces of ``doc_text`` around ``span``, the whole within ``max_tokens``)
    and where the chunk's own ``text`` stands in it: ``window[start:end] == text``.

    ``count_tokens`` counts the model's word pieces of a text with its special tokens
    (``Embedder.count_model_tokens``); ``max_tokens`` is the model's max sequence.
    Invariant: with neighbours the window counts at most ``max_tokens``, unless the text
    without neighbours already does not fit (then no neighbour is added).
    """
    base = embedding_text(text, title=title, heading_path=heading_path)
    if neighbour_tokens <= 0 or not doc_text:
        return base, len(base) - len(text), len(base)
    if count_tokens is None or max_tokens is None:
        raise ValueError("neighbour context needs the model's count_tokens and max_tokens")
    specials = count_tokens("")
    budget = min(neighbour_tokens, max_tokens - count_tokens(base))
    while budget > 0:
        before, after = neighbours(doc_text, span[0], span[1], budget, lambda t: count_tokens(t) - specials)
        out = embedding_text(text, title=title, heading_path=heading_path, before=before, after=after)
        excess = count_tokens(out) - max_tokens
        if excess <= 0:  # pieces at the joins (a word cut by the chunk's edge) can add a few
            end = len(out) - len(after)
            return out, end - len(text), end
        budget -= excess
    return base, len(base) - len(text), len(base)


def context_text(text: str, **options) -> str:
    """The text to embed for one chunk: ``context_window(text, **options)``'s window."""
    return context_window(text, **options)[0]


def late_tiles(
    chunks: Sequence[tuple[str, int, int]], doc_text: str, *, count_tokens: Callable[[str], int], max_tokens: int,
    title: str = "", heading_paths: Sequence[Sequence[str]] = (),
) -> list[tuple[str, int, int]]:
    """``(window, start, end)`` for each chunk ``(text, char_start, char_end)``, in order: runs of
    consecutive chunks share a window, ``window[start:end] == text``.

    Greedy from the first chunk: a run grows while its window counts at most ``max_tokens``
    (``count_tokens``, special tokens included); a chunk that alone does not fit has a window
    of its own (truncated by the model as the chunk alone would be). A window is the title and
    the heading path of its first chunk (``embedding_text``; ``heading_paths[i]`` is chunk i's),
    then the run's texts in order, joined by the document's own text between two chunks that
    are verbatim spans of ``doc_text`` and do not overlap, else by a newline (an overlap is
    then read twice). Chunks at a run's edge see context on one side only; an edit re-embeds
    its run's chunks, and the runs after it when it moves where a run ends.
    """
    verbatim = [doc_text[s:e] == t for t, s, e in chunks]

    def window_of(first: int, last: int) -> tuple[str, list[tuple[int, int]]]:
        body, spans = embedding_text("", title=title, heading_path=heading_paths[first] if heading_paths else ()), []
        for i in range(first, last + 1):
            text, start, _ = chunks[i]
            if i > first:
                prev_end = chunks[i - 1][2]
                both = verbatim[i - 1] and verbatim[i] and prev_end <= start
                body += doc_text[prev_end:start] if both else "\n"
            spans.append((len(body), len(body) + len(text)))
            body += text
        return body, spans

    out: list[tuple[str, int, int]] = []
    first = 0
    while first < len(chunks):
        last = first
        window, spans = window_of(first, first)
        while last + 1 < len(chunks):
            longer, longer_spans = window_of(first, last + 1)
            if count_tokens(longer) > max_tokens:
                break
            last, window, spans = last + 1, longer, longer_spans
        out += [(window, start, end) for start, end in spans]
        first = last + 1
    return out


def late_key(window: str, start: int, end: int, own_text: str | None = None, blend: float = 0.0) -> str:
    """The embedding-cache key of a late-chunked span: the sha256 of the window and the span in it,
    and when blended (``blend`` > 0) of the weight and the own text blended in.

    Never equal to the sha256 of a plain embedded text (the "late" prefix and the span are
    hashed too), so a pooled vector is never served for a whole text or the other way round;
    an unblended key is the same as before blending existed, so those vectors stay cached.
    """
    blended = f"\x00blend{blend!r}\x00{own_text}" if blend else ""
    return hashlib.sha256(f"late\x00{start}:{end}\x00{window}{blended}".encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class ContextRow(StoredChunk):
    """A stored chunk as the embeddings step embeds it: ``text`` is what the model reads and
    ``text_sha256`` the cache key. ``pooled_span`` (late chunking): only ``text[start:end]``'s
    word pieces are pooled; None: the whole text's. ``blend`` > 0: the vector of ``own_text``
    embedded whole has that weight in the row's vector (``embed_rows``)."""

    pooled_span: tuple[int, int] | None = None
    own_text: str | None = None
    blend: float = 0.0


def _late_row(row: StoredChunk, window: str, start: int, end: int, own_text: str | None = None,
              blend: float = 0.0) -> ContextRow:
    """``row`` as late chunking embeds it: the model reads ``window``, pools ``window[start:end]``,
    and blends in ``own_text``'s vector with weight ``blend`` (``own_text`` is None when ``blend`` is 0)."""
    stored = {f.name: getattr(row, f.name) for f in dataclasses.fields(StoredChunk)}
    stored.update(text=window, text_sha256=late_key(window, start, end, own_text, blend))
    return ContextRow(**stored, pooled_span=(start, end), own_text=own_text, blend=blend)


def embed_rows(embedder, rows: Sequence[StoredChunk]) -> np.ndarray:
    """One vector per row, in order: ``embedder.embed`` for whole texts, ``embedder.embed_spans``
    for late-chunked rows (a ``ContextRow`` with a ``pooled_span``); a blended late row's vector is
    ``(1 - blend) * late + blend * embed(own_text)``, L2-normalised like the model's own vectors."""
    spans = [getattr(r, "pooled_span", None) for r in rows]
    late = [i for i, span in enumerate(spans) if span is not None]
    whole = [i for i, span in enumerate(spans) if span is None]
    blended = [i for i in late if getattr(rows[i], "blend", 0.0)]
    out = np.zeros((len(rows), embedder.dimension), dtype=np.float32)
    if whole:
        out[whole] = embedder.embed([rows[i].text for i in whole])
    if late:
        out[late] = embedder.embed_spans([(rows[i].text, *spans[i]) for i in late])
    if blended:
        weights = np.array([[rows[i].blend] for i in blended], dtype=np.float32)
        mixed = (1 - weights) * out[blended] + weights * embedder.embed([rows[i].own_text for i in blended])
        # Two unit vectors of one chunk are never opposite in practice; the floor only keeps a NaN out.
        out[blended] = mixed / np.maximum(np.linalg.norm(mixed, axis=1, keepdims=True), 1e-12)
    return out


def document_title(first_heading: str | None, source_path: str | None, doc_id: str) -> str:
    """The document's first level-1 heading, else its file name without extension."""
    if first_heading and first_heading.strip():
        return first_heading.strip()
    return PurePosixPath(source_path or doc_id).stem


def with_context(
    store, doc_id: str, strategy: str, rows: Sequence, context: EmbedContext | bool = True, embedder=None
) -> list:
    """``rows`` (StoredChunk) with ``text`` replaced by the text to embed and ``text_sha256`` by its hash.

    The embeddings table then records the hash of what the model read (it equals the
    chunk's text_sha256 exactly when no context is added). Neighbour context and late
    chunking need ``embedder`` (its ``count_model_tokens`` and ``max_seq_length``). With
    late chunking each row is a ``ContextRow`` whose ``text`` is the window, ``pooled_span``
    the chunk's place in it and ``text_sha256`` their ``late_key``; tiled, the windows are
    tiled over ``rows`` in the order given (the embeddings step gives a document's chunks
    in order). With ``late_blend`` each late row also carries ``own_text``, the chunk as it is
    embedded without neighbours (the headings and its text), whose vector is blended in.
    """
    from search.engine import CHUNKS_RELATION

    context = EmbedContext.of(context)
    if (context.neighbour_tokens or context.late_tokens) and embedder is None:
        raise ValueError("neighbour context or late chunking needs the embedder (to count the model's word pieces)")
    title, paths, doc_text = "", {}, ""
    with store.connect(read_only=True) as con:
        if context.headings:
            doc = con.execute("SELECT source_path FROM documents WHERE doc_id = ?", [doc_id]).fetchone()
            heading = con.execute(
                "SELECT heading FROM blocks WHERE doc_id = ? AND level = 1 ORDER BY block_index LIMIT 1", [doc_id]
            ).fetchone()
            paths = dict(con.execute(
                f"SELECT chunk_index, heading_path FROM {CHUNKS_RELATION} WHERE doc_id = ? AND strategy = ?",
                [doc_id, strategy],
            ).fetchall())
            title = document_title(heading[0] if heading else None, doc[0] if doc else None, doc_id)
        if context.neighbour_tokens or context.late_tokens:
            doc_text = "".join(t for (t,) in con.execute(
                "SELECT text FROM pages WHERE doc_id = ? ORDER BY page_num", [doc_id]).fetchall())
    late = context.late_tokens
    max_tokens = embedder.max_seq_length if embedder is not None else None
    if late:
        max_tokens = min(late, max_tokens)

    def own_text(row) -> str | None:  # the chunk as it is embedded without neighbours: what a blend mixes in
        if not context.late_blend:
            return None  # nothing is blended, so nothing to build per row
        return embedding_text(row.text, title=title, heading_path=paths.get(row.chunk_index) or ())

    if context.late_tiled:
        tiles = late_tiles([(r.text, r.char_start, r.char_end) for r in rows], doc_text,
                           count_tokens=embedder.count_model_tokens, max_tokens=max_tokens, title=title,
                           heading_paths=[paths.get(r.chunk_index) or () for r in rows])
        return [_late_row(row, *tile, own_text(row), context.late_blend) for row, tile in zip(rows, tiles)]
    out = []
    for row in rows:
        window, start, end = context_window(
            row.text, title=title, heading_path=paths.get(row.chunk_index) or (), doc_text=doc_text,
            span=(row.char_start, row.char_end), neighbour_tokens=late or context.neighbour_tokens,
            count_tokens=embedder.count_model_tokens if embedder is not None else None, max_tokens=max_tokens,
        )
        if late:
            out.append(_late_row(row, window, start, end, own_text(row), context.late_blend))
        else:
            out.append(dataclasses.replace(
                row, text=window, text_sha256=hashlib.sha256(window.encode("utf-8")).hexdigest()))
    return out
