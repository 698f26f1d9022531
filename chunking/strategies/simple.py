"""``simple``: the Azure SimpleTextSplitter (seeds/sentence-text-splitter.md), for JSON.

Fixed-length slices of the whole document text, blind to its content: a document
no longer than ``max_object_length`` is one chunk, a longer one is cut every
``max_object_length`` characters. Whitespace-only documents give no chunks.

Invariant a caller relies on::

    chunk.text == doc.text[chunk.char_start:chunk.char_end]
    len(chunk.text) <= max_object_length

Where we differ from the reference, on purpose: a chunk's page is the page its
characters come from (the reference reports the slice index as ``page_num``).
The reference promises characters, not tokens, so the config has no token cap.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from chunking.model import Chunk, ParsedDocument, attach_provenance
from chunking.strategies import StrategySpec
from chunking.tokenizers import Tokenizer, count_many


class SimpleConfig(BaseModel):
    """Configuration of the ``simple`` strategy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_object_length: int = Field(1000, ge=1, description="Characters per slice.")

    @property
    def token_cap(self) -> None:
        return None


def slice_spans(text: str, max_object_length: int = 1000) -> list[tuple[int, int]]:
    """``(start, end)`` of each fixed-length slice; ``[]`` for whitespace-only text."""
    if not text.strip():
        return []
    return [(i, min(i + max_object_length, len(text))) for i in range(0, len(text), max_object_length)]


def chunk_simple(doc: ParsedDocument, config: SimpleConfig, tokenizer: Tokenizer, embedder: object = None) -> list[Chunk]:
    spans = slice_spans(doc.text, config.max_object_length)
    texts = [doc.text[s:e] for s, e in spans]
    counts = count_many(tokenizer, texts)
    chunks = [Chunk.of({"text": t, "char_start": s, "char_end": e, "token_count": n})
              for (s, e), t, n in zip(spans, texts, counts)]
    return attach_provenance(doc, chunks)


SPEC = StrategySpec(
    name="simple",
    config_model=SimpleConfig,
    chunk=chunk_simple,
    description="Azure SimpleTextSplitter: fixed-length character slices, for JSON documents.",
)
