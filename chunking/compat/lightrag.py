"""Drop-in for LightRAG's chunkers (``lightrag.chunker``): same names, signatures and dicts.

Switching is an import change::

    from chunking.compat.lightrag import chunking_by_paragraph_semantic
    chunks = chunking_by_paragraph_semantic(tokenizer, content, 2000, blocks_path="doc.blocks.jsonl")

Every function takes any tokenizer object with ``encode(str) -> list[int]`` and
``decode(list[int]) -> str`` (LightRAG's own, tiktoken, a 1 char = 1 token one).
``chunking_by_semantic_vector`` is ``async`` as in LightRAG (callers ``await``
it); :func:`chunking_by_semantic_vector_sync` is the same for plain code. The
others are synchronous, as there.

Output dicts: ``{"tokens", "content", "chunk_order_index"}``; F, R and V add
``"_source_span": {"start", "end"}`` (exact offsets into ``content``); P adds
``"heading": {"level", "heading", "parent_headings"}`` and, when its blocks carry
ids, ``"sidecar": {"type": "block", "id": <first id>, "refs": [...]}``.

Everything these functions log, including what the chunkyard algorithms under
them log, goes to the logger named ``lightrag`` (LightRAG users filter on it);
the same algorithms called natively keep logging under ``chunking.*``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from chunking.sidecar import read_blocks_jsonl, read_tables_json
from chunking.strategies.paragraph import references, split_paragraph_semantic
from chunking.strategies.recursive import PLAIN_SEPARATORS, split_recursive
from chunking.strategies.token import SegmentOverCapError, split_token_size
from chunking.tokenizers import Tokenizer

__all__ = [
    "ChunkTokenLimitExceededError",
    "chunking_by_fixed_token",
    "chunking_by_paragraph_semantic",
    "chunking_by_recursive_character",
    "chunking_by_semantic_vector",
    "chunking_by_semantic_vector_sync",
    "chunking_by_token_size",
]

log = logging.getLogger("lightrag")

# The loggers of the algorithms the compat functions call. While a compat call
# runs (in this thread or task only: a context variable), their records are
# re-issued under ``lightrag`` instead of propagating under ``chunking.*``.
_ALGORITHM_LOGGERS = (
    "chunking.strategies.recursive",
    "chunking.strategies.paragraph",
    "chunking.strategies.semantic",
    "chunking.strategies.token",
)
_in_compat_call: contextvars.ContextVar[bool] = contextvars.ContextVar("lightrag_compat_call", default=False)


class _RouteToLightrag(logging.Filter):
    """Re-issues a record under the ``lightrag`` logger during a compat call, and drops the original."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _in_compat_call.get():
            return True
        if log.isEnabledFor(record.levelno):
            routed = logging.makeLogRecord(record.__dict__)
            routed.name = log.name
            log.handle(routed)
        return False


_ROUTE = _RouteToLightrag()
for _name in _ALGORITHM_LOGGERS:
    logging.getLogger(_name).addFilter(_ROUTE)


@contextmanager
def _lightrag_logging() -> Iterator[None]:
    token = _in_compat_call.set(True)
    try:
        yield
    finally:
        _in_compat_call.reset(token)


def _logs_as_lightrag(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _lightrag_logging():
            return func(*args, **kwargs)

    return wrapper


class ChunkTokenLimitExceededError(ValueError):
    """LightRAG's error for a ``split_by_character_only`` segment over ``chunk_token_size``."""

    def __init__(self, chunk_tokens: int, chunk_token_limit: int, chunk_preview: str = "") -> None:
        super().__init__(
            f"Chunk token length {chunk_tokens} exceeds chunk_token_size {chunk_token_limit}. "
            f"Chunk preview: {chunk_preview!r}"
        )
        self.chunk_tokens = chunk_tokens
        self.chunk_token_limit = chunk_token_limit
        self.chunk_preview = chunk_preview


@_logs_as_lightrag
def chunking_by_token_size(
    tokenizer: Tokenizer,
    content: str,
    split_by_character: str | None = None,
    split_by_character_only: bool = False,
    chunk_overlap_token_size: int = 100,
    chunk_token_size: int = 1200,
) -> list[dict[str, Any]]:
    """LightRAG's default chunker (F): token windows with overlap, optionally split on a string first.

    As the reference: a window starts every ``chunk_token_size -
    chunk_overlap_token_size`` tokens up to the last token (so the last windows
    may repeat the tail of the one before), ``tokens`` is the window's token
    count (for a segment of ``split_by_character``: the unstripped segment's),
    ``content`` is stripped and may be ``""`` for a whitespace-only window or
    segment, and a ``split_by_character_only`` segment over the cap raises
    :class:`ChunkTokenLimitExceededError` after a warning. Overlap below 0 or
    not below the size raises ValueError.

    Knowingly different: ``content`` is the exact source text of the window
    (``content[s["start"]:s["end"]]`` for ``s = d["_source_span"]``, present
    whenever ``content`` is not empty), where the reference decodes the window
    and writes U+FFFD for a character whose bytes a window boundary splits; the
    boundary is moved to the start of that character instead.
    """
    try:
        windows = split_token_size(
            content or "",
            tokenizer,
            chunk_token_size,
            chunk_overlap_token_size,
            split_by_character,
            split_by_character_only,
            reference_windows=True,
        )
    except SegmentOverCapError as exc:
        log.warning(
            "Chunk split_by_character exceeds token limit: len=%d limit=%d", exc.chunk_tokens, exc.chunk_token_limit
        )
        raise ChunkTokenLimitExceededError(exc.chunk_tokens, exc.chunk_token_limit, exc.chunk_preview) from exc
    out = []
    for index, window in enumerate(windows):
        item: dict[str, Any] = {"tokens": window.tokens, "content": window.text, "chunk_order_index": index}
        if window.text:
            item["_source_span"] = {"start": window.start, "end": window.end}
        out.append(item)
    return out

def chunking_by_fixed_token(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 1200,
    *,
    chunk_overlap_token_size: int = 100,
    split_by_character: str | None = None,
    split_by_character_only: bool = False,
    _emit_source_span: bool = False,
) -> list[dict[str, Any]]:
    """LightRAG's ``"F"`` strategy under its file-chunker contract: :func:`chunking_by_token_size`
    with the standard prefix ``(tokenizer, content, chunk_token_size)`` and keyword-only knobs.

    As the reference, the dicts carry ``_source_span`` only with ``_emit_source_span=True``.
    """
    out = chunking_by_token_size(
        tokenizer,
        content,
        split_by_character,
        split_by_character_only,
        chunk_overlap_token_size,
        chunk_token_size,
    )
    if not _emit_source_span:
        for item in out:
            item.pop("_source_span", None)
    return out


_BLOCKS_SUFFIX = ".blocks.jsonl"


@_logs_as_lightrag
def chunking_by_recursive_character(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 1200,
    *,
    chunk_overlap_token_size: int = 100,
    separators: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """LightRAG's R: LangChain's ``RecursiveCharacterTextSplitter`` under ``chunk_token_size``
    tokens with token overlap, quirks included (``split_recursive``'s ``reference_mode``).

    ``separators=None`` is ``["\\n\\n", "\\n", " ", ""]``; each separator stays at the
    start of the following piece, pieces are whitespace-stripped, empty input gives
    ``[]``. The sizes are taken as LightRAG takes them, ``max(int(size), 1)`` and
    ``max(int(overlap), 0)``; an overlap larger than the size raises LangChain's
    ``ValueError``. ``content[d["_source_span"]["start"]:d["_source_span"]["end"]] == d["content"]``,
    exactly (LightRAG recovers the span by searching, and can place repeated text wrong).
    """
    spans = split_recursive(
        content or "",
        tokenizer,
        max(int(chunk_token_size), 1),
        max(int(chunk_overlap_token_size), 0),
        PLAIN_SEPARATORS if separators is None else tuple(separators),
        reference_mode=True,
    )
    return [
        {"tokens": s.tokens, "content": s.text, "chunk_order_index": i, "_source_span": {"start": s.start, "end": s.end}}
        for i, s in enumerate(spans)
    ]


def tables_path_for(blocks_path: str | Path) -> Path:
    """``<base>.blocks.jsonl`` -> ``<base>.tables.json``."""
    path = Path(blocks_path)
    name = path.name
    base = name[: -len(_BLOCKS_SUFFIX)] if name.endswith(_BLOCKS_SUFFIX) else path.stem
    return path.with_name(base + ".tables.json")


@_logs_as_lightrag
def chunking_by_paragraph_semantic(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 2000,
    *,
    blocks_path: str | Path | None = None,
    chunk_overlap_token_size: int = 100,
    doc_id: str | None = None,
    drop_references: bool | None = None,
) -> list[dict[str, Any]]:
    """LightRAG's P on the ``.blocks.jsonl`` at ``blocks_path`` (and its ``.tables.json``).

    ``drop_references`` leaves out the reference section (``None``: the
    ``CHUNK_P_DROP_REFERENCES`` environment switch, off when unset); which blocks
    that is follows ``CHUNK_P_REFERENCES_HEADINGS`` (pipe-separated heading
    prefixes, default ``References|Bibliography|参考文献``) and
    ``CHUNK_P_REFERENCES_TAIL_N`` (search only the last N content blocks; 0, the
    default, searches all), both read on every call as LightRAG does. It never
    drops every block. Only the sidecar path drops: the R fallback keeps all text.

    Without a readable sidecar holding content lines it degrades to
    :func:`chunking_by_recursive_character` on ``content`` with a logged warning.
    Its character-level fallbacks are :func:`chunking_by_recursive_character`'s splits (LangChain's,
    R's default plain separators), as the seed names them. Raises ValueError when a table's stored header has the other
    format.
    """
    target_max = max(int(chunk_token_size), 1)
    overlap = min(max(int(chunk_overlap_token_size), 0), max(target_max - 1, 0))
    blocks, reason = [], None
    if not blocks_path:
        reason = "blocks_path is empty"
    else:
        try:
            blocks = read_blocks_jsonl(blocks_path)
        except OSError as exc:
            reason = f"cannot read blocks.jsonl at {blocks_path}: {exc}"
        else:
            if not any(b.content.strip() for b in blocks):
                reason = f"blocks.jsonl at {blocks_path} contains no content lines"
    if reason is not None:
        log.warning(
            "paragraph_semantic: %s; fallback to recursive_character with chunk_token_size=%d", reason, target_max
        )
        return chunking_by_recursive_character(tokenizer, content, target_max, chunk_overlap_token_size=overlap)

    if drop_references is None:
        drop_references = references.drop_references_from_env()
    headings, tail_n = references.settings_from_env()
    pieces = split_paragraph_semantic(
        blocks,
        tokenizer,
        tables=read_tables_json(tables_path_for(blocks_path)),
        chunk_token_size=target_max,
        chunk_overlap_token_size=overlap,
        separators=PLAIN_SEPARATORS,
        doc_id=doc_id or str(blocks_path),
        drop_references=drop_references,
        references_headings=headings,
        references_tail_n=tail_n,
        reference_recursive=True,  # its character-level fallbacks are LightRAG's R, as the seed names it
    )
    out = []
    for index, piece in enumerate(pieces):
        item: dict[str, Any] = {
            "tokens": piece.tokens,
            "content": piece.text,
            "chunk_order_index": index,
            "heading": {"level": piece.level, "heading": piece.heading, "parent_headings": list(piece.parent_headings)},
        }
        ids = list(dict.fromkeys(blocks[i].block_id for i in piece.sources if blocks[i].block_id))
        if ids:
            item["sidecar"] = {"type": "block", "id": ids[0], "refs": [{"type": "block", "id": i} for i in ids]}
        out.append(item)
    return out


def _sync_embedding(embedding_func: Callable[..., Any]) -> Callable[[list[str]], np.ndarray]:
    """A plain ``list[str] -> ndarray`` from LightRAG's (async) EmbeddingFunc or any sync callable."""

    def embed(texts: list[str]) -> np.ndarray:
        result = embedding_func(texts)
        if inspect.isawaitable(result):
            async def wait() -> Any:
                return await result

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                result = asyncio.run(wait())
            else:  # called from inside an event loop: finish the coroutine on a thread of its own
                with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                    result = pool.submit(asyncio.run, wait()).result()
        return np.asarray(result, dtype=np.float64)  # as given: LightRAG reads each value as a Python float

    return embed


def _semantic_vector(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 1200,
    *,
    embed: Callable[[list[str]], np.ndarray] | None,
    breakpoint_threshold_type: str = "percentile",
    breakpoint_threshold_amount: float | None = None,
    buffer_size: int = 1,
    sentence_split_regex: str | None = None,
    number_of_chunks: int | None = None,
    min_chunk_size: int | None = None,
) -> list[dict[str, Any]]:
    """V with a synchronous ``embed`` (``None``: no embedding function); both entry points call this."""
    from chunking.strategies.semantic import split_semantic

    if not content or not content.strip():
        return []
    if embed is None:
        log.warning("semantic_vector: embedding_func is None; fallback to recursive_character")
        return chunking_by_recursive_character(tokenizer, content, chunk_token_size, chunk_overlap_token_size=0)
    spans = split_semantic(
        content,
        tokenizer,
        embed,
        chunk_token_size=chunk_token_size,
        breakpoint_threshold_type=breakpoint_threshold_type,  # type: ignore[arg-type]
        breakpoint_threshold_amount=breakpoint_threshold_amount,
        number_of_chunks=number_of_chunks,
        buffer_size=buffer_size,
        sentence_split_regex=sentence_split_regex,
        min_chunk_size=min_chunk_size,
        chunk_overlap_token_size=0,
        reference_mode=True,  # LangChain's SemanticChunker as LightRAG runs it (semantic.reference_spans)
    )
    return [
        {"tokens": s.tokens, "content": s.text, "chunk_order_index": i, "_source_span": {"start": s.start, "end": s.end}}
        for i, s in enumerate(spans)
    ]


_SEMANTIC_DOC = """LightRAG's V: breaks where adjacent sentence windows are far apart in embedding space.

    ``embedding_func`` maps a list of texts to vectors, or is LightRAG's async
    ``EmbeddingFunc``. Without one, R with no overlap (and a warning), as in the
    reference. Otherwise LangChain's ``SemanticChunker`` as LightRAG runs it, quirks
    included (``chunking.strategies.semantic.reference_spans``): sentences by
    ``re.split(sentence_split_regex)`` (``None``: LightRAG's
    ``(?<=[.?!])\\s+|(?<=[。？！])``), centred windows joined by ``" "`` and embedded,
    ``min_chunk_size`` in characters (a breakpoint whose group is shorter is skipped),
    ``gradient`` on two sentences gives both; a group over ``chunk_token_size`` is re-split
    by R with no overlap. ``_source_span`` is exact (LightRAG searches for it).
    """


async def chunking_by_semantic_vector(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 1200,
    *,
    embedding_func: Callable[..., Any] | None = None,
    breakpoint_threshold_type: str = "percentile",
    breakpoint_threshold_amount: float | None = None,
    buffer_size: int = 1,
    sentence_split_regex: str | None = None,
    number_of_chunks: int | None = None,
    min_chunk_size: int | None = None,
) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()

    def embed(texts: list[str]) -> np.ndarray:
        result = embedding_func(texts)  # type: ignore[misc]
        if inspect.isawaitable(result):
            # The algorithm runs on a worker thread; an async embedding function
            # runs on the caller's loop (its semaphores and clients live there).
            result = asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
        return np.asarray(result, dtype=np.float64)  # as given: LightRAG reads each value as a Python float

    with _lightrag_logging():  # asyncio.to_thread copies the context: the worker logs as lightrag too
        return await asyncio.to_thread(
            _semantic_vector,
            tokenizer,
            content,
            chunk_token_size,
            embed=embed if embedding_func is not None else None,
            breakpoint_threshold_type=breakpoint_threshold_type,
            breakpoint_threshold_amount=breakpoint_threshold_amount,
            buffer_size=buffer_size,
            sentence_split_regex=sentence_split_regex,
            number_of_chunks=number_of_chunks,
            min_chunk_size=min_chunk_size,
        )


@_logs_as_lightrag
def chunking_by_semantic_vector_sync(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 1200,
    *,
    embedding_func: Callable[..., Any] | None = None,
    breakpoint_threshold_type: str = "percentile",
    breakpoint_threshold_amount: float | None = None,
    buffer_size: int = 1,
    sentence_split_regex: str | None = None,
    number_of_chunks: int | None = None,
    min_chunk_size: int | None = None,
) -> list[dict[str, Any]]:
    return _semantic_vector(
        tokenizer,
        content,
        chunk_token_size,
        embed=_sync_embedding(embedding_func) if embedding_func is not None else None,
        breakpoint_threshold_type=breakpoint_threshold_type,
        breakpoint_threshold_amount=breakpoint_threshold_amount,
        buffer_size=buffer_size,
        sentence_split_regex=sentence_split_regex,
        number_of_chunks=number_of_chunks,
        min_chunk_size=min_chunk_size,
    )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


chunking_by_semantic_vector.__doc__ = _SEMANTIC_DOC + "\n    Async, as in LightRAG: ``await`` it.\n"
chunking_by_semantic_vector_sync.__doc__ = _SEMANTIC_DOC + "\n    The same, for code without an event loop.\n"
