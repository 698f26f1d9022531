"""chunkyard's chunking library: pure Python, no Dagster, no DuckDB.

One obvious entry point::

    from chunking import chunk_text
    chunks = chunk_text("Some long text ...", strategy="recursive", chunk_token_size=200)
    assert all(text[c.char_start:c.char_end] == c.text for c in chunks)  # verbatim strategies
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from chunking.errors import InvalidDocumentError, UnknownStrategyError
from chunking.model import Block, Chunk, Page, ParsedDocument
from chunking.tokenizers import Tokenizer

__all__ = ["Block", "Chunk", "InvalidDocumentError", "Page", "ParsedDocument", "UnknownStrategyError",
           "chunk_document", "chunk_text", "default_tokenizer"]


@lru_cache(maxsize=4)
def default_tokenizer(encoding_name: str = "cl100k_base") -> Tokenizer:
    from chunking.tokenizers import TiktokenTokenizer

    return TiktokenTokenizer(encoding_name)


def chunk_document(
    doc: ParsedDocument,
    strategy: str = "recursive",
    *,
    tokenizer: Tokenizer | None = None,
    embedder: Any = None,
    **config: Any,
) -> list[Chunk]:
    """Chunk a parsed document with a registered strategy; ``config`` are its fields.

    ``chunk_token_size`` / ``chunk_overlap_token_size`` work for every strategy with
    a token cap (mapped to its own field); an unknown field raises
    ``StrategyConfigError`` listing the valid ones. ``semantic`` needs ``embedder``
    (or ``allow_recursive_fallback=True``).

    Refused before any chunking: a document that breaks the invariants of :mod:`chunking.model`
    (``InvalidDocumentError``: its chunks' offsets and provenance would be wrong), an unknown
    strategy (``UnknownStrategyError``), a ``tokenizer`` without ``encode`` and ``decode``
    (``TypeError``: a string such as ``"cl100k_base"`` has an ``encode`` of its own, and every
    count came back 0). All but the last are ``ValueError``.
    """
    from chunking.strategies import get_strategy

    spec = get_strategy(strategy)
    if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer: expected a Tokenizer (encode and decode), e.g. "
                        f"chunking.default_tokenizer('cl100k_base'); got {type(tokenizer).__name__}")
    if problems := doc.invariant_problems():
        raise InvalidDocumentError(doc.doc_id, problems)
    return spec.chunk(doc, spec.parse_config(config), tokenizer or default_tokenizer(), embedder)


def chunk_text(
    text: str,
    strategy: str = "recursive",
    *,
    tokenizer: Tokenizer | None = None,
    embedder: Any = None,
    **config: Any,
) -> list[Chunk]:
    """Chunk plain text (one page, no blocks) with a registered strategy (see :func:`chunk_document`).
    ``text`` must be a ``str`` (``TypeError`` otherwise: decode bytes first, knowing their encoding)."""
    if not isinstance(text, str):
        hint = " (decode it first, e.g. data.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"chunk_text: text must be str, got {type(text).__name__}{hint}")
    return chunk_document(
        ParsedDocument.from_text(text), strategy, tokenizer=tokenizer, embedder=embedder, **config
    )
