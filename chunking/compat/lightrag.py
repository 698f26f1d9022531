"""Drop-in for LightRAG's chunkers (``lightrag.chunker``): same names, signatures and dicts.

Switching is an import change::

    from chunking.compat.lightrag import chunking_by_paragraph_semantic
    chunks = chunking_by_paragraph_semantic(tokenizer, content, 2000, blocks_path="doc.blocks.jsonl")

Every function takes any tokenizer object with ``encode(str) -> list[int]`` and
``decode(list[int]) -> str`` (LightRAG's own, tiktoken, a 1 char = 1 token one)
and is synchronous (LightRAG's ``chunking_by_semantic_vector`` is async).

Output dicts: ``{"tokens", "content", "chunk_order_index"}``; R adds
``"_source_span": {"start", "end"}`` (exact offsets into ``content``); P adds
``"heading": {"level", "heading", "parent_headings"}`` and, when its blocks carry
ids, ``"sidecar": {"type": "block", "id": <first id>, "refs": [...]}``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from chunking.sidecar import read_blocks_jsonl, read_tables_json
from chunking.strategies.paragraph import split_paragraph_semantic
from chunking.strategies.recursive import PLAIN_SEPARATORS, split_recursive
from chunking.tokenizers import Tokenizer

__all__ = ["chunking_by_paragraph_semantic", "chunking_by_recursive_character", "chunking_by_semantic_vector"]

log = logging.getLogger(__name__)

_BLOCKS_SUFFIX = ".blocks.jsonl"


def chunking_by_recursive_character(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 1200,
    *,
    chunk_overlap_token_size: int = 100,
    separators: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """LightRAG's R: cascaded separators under ``chunk_token_size`` tokens, token overlap.

    ``separators=None`` is ``["\\n\\n", "\\n", " ", ""]``; each separator stays at the
    start of the following piece, pieces are whitespace-stripped, empty input gives
    ``[]``. ``content[d["_source_span"]["start"]:d["_source_span"]["end"]] == d["content"]``.
    """
    spans = split_recursive(
        content or "",
        tokenizer,
        chunk_token_size,
        chunk_overlap_token_size,
        PLAIN_SEPARATORS if separators is None else tuple(separators),
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


def chunking_by_paragraph_semantic(
    tokenizer: Tokenizer,
    content: str,
    chunk_token_size: int = 2000,
    *,
    blocks_path: str | Path | None = None,
    chunk_overlap_token_size: int = 100,
    doc_id: str | None = None,
) -> list[dict[str, Any]]:
    """LightRAG's P on the ``.blocks.jsonl`` at ``blocks_path`` (and its ``.tables.json``).

    Without a readable sidecar holding content lines it degrades to
    :func:`chunking_by_recursive_character` on ``content`` with a logged warning.
    Its character-level fallbacks use R's default (plain) separators, as the
    reference's do. Raises ValueError when a table's stored header has the other
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

    pieces = split_paragraph_semantic(
        blocks,
        tokenizer,
        tables=read_tables_json(tables_path_for(blocks_path)),
        chunk_token_size=target_max,
        chunk_overlap_token_size=overlap,
        separators=PLAIN_SEPARATORS,
        doc_id=doc_id or str(blocks_path),
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
        return np.asarray(result, dtype=np.float32)

    return embed


def chunking_by_semantic_vector(
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
    """LightRAG's V: breaks where adjacent sentence windows are far apart in embedding space.

    ``embedding_func`` maps a list of texts to vectors; LightRAG's async
    ``EmbeddingFunc`` works too (awaited here). Without one, R with no overlap,
    as in the reference. ``sentence_split_regex=None`` uses chunkyard's sentence
    segmenter. Oversize groups are re-split by R with no overlap.
    """
    from chunking.strategies.semantic import split_semantic

    if not content or not content.strip():
        return []
    if embedding_func is None:
        log.warning("semantic_vector: embedding_func is None; fallback to recursive_character")
        return chunking_by_recursive_character(tokenizer, content, chunk_token_size, chunk_overlap_token_size=0)
    spans = split_semantic(
        content,
        tokenizer,
        _sync_embedding(embedding_func),
        chunk_token_size=chunk_token_size,
        breakpoint_threshold_type=breakpoint_threshold_type,  # type: ignore[arg-type]
        breakpoint_threshold_amount=breakpoint_threshold_amount,
        number_of_chunks=number_of_chunks,
        buffer_size=buffer_size,
        sentence_split_regex=sentence_split_regex,
        min_chunk_size=min_chunk_size,
        chunk_overlap_token_size=0,
        # The reference re-embeds centred windows; chunkyard's faster defaults differ.
        window_mode="reembed",
        window_shape="centered",
    )
    return [
        {"tokens": s.tokens, "content": s.text, "chunk_order_index": i, "_source_span": {"start": s.start, "end": s.end}}
        for i, s in enumerate(spans)
    ]
