"""The strategy registry: one module per strategy, one config model per strategy.

Each module listed in ``_MODULES`` exposes ``SPEC``, a :class:`StrategySpec`.
Adding a strategy is adding its module and one line here; the Dagster asset
factory, the CLI summary and the checks pick it up from the registry.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, model_validator

from chunking.embedding import Embedder
from chunking.model import Chunk, ParsedDocument
from chunking.tokenizers import Tokenizer

ChunkFunction = Callable[[ParsedDocument, Any, Tokenizer, "Embedder | None"], list[Chunk]]


@dataclass(frozen=True)
class StrategySpec:
    name: str
    config_model: type[BaseModel]
    chunk: ChunkFunction
    description: str
    # The strategy uses the embedding model while chunking (semantic breakpoints).
    needs_embedder: bool = False
    # Inline tags the strategy promises never to cut (``"table"``, ``"figure"``): a cut
    # one fails the markup check as an ERROR; other cut tags are only a WARN, since
    # text-only strategies such as R are table-unaware by design. A chunk marked
    # ``metadata["table_fragment"]`` is a documented degradation and exempt.
    atomic_markup: tuple[str, ...] = ()

    def default_config(self) -> BaseModel:
        return self.config_model()

    def parse_config(self, values: dict[str, Any] | None) -> BaseModel:
        return self.config_model.model_validate(values or {})


class TokenBudgetConfig(BaseModel):
    """Base of the configs with a hard token cap and a token overlap below it.

    Subclasses declare ``chunk_token_size`` and ``chunk_overlap_token_size`` with
    their seed's defaults; the invariant and the cap live here once.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_token_size: int
    chunk_overlap_token_size: int

    @model_validator(mode="after")
    def _overlap_below_size(self) -> "TokenBudgetConfig":
        if self.chunk_overlap_token_size >= self.chunk_token_size:
            raise ValueError(
                f"chunk_overlap_token_size ({self.chunk_overlap_token_size}) must be smaller "
                f"than chunk_token_size ({self.chunk_token_size})"
            )
        return self

    @property
    def token_cap(self) -> int:
        return self.chunk_token_size


# name -> module path. Order is the order assets and summaries are listed in.
_MODULES: dict[str, str] = {
    "recursive": "chunking.strategies.recursive",
    "sentence": "chunking.strategies.sentence",
    "simple": "chunking.strategies.simple",
    "sentence_window": "chunking.strategies.sentence_window",
    "paragraph": "chunking.strategies.paragraph",
    "semantic": "chunking.strategies.semantic",
    "token": "chunking.strategies.token",
}


def strategy_names() -> list[str]:
    return list(_MODULES)


def get_strategy(name: str) -> StrategySpec:
    try:
        module_path = _MODULES[name]
    except KeyError:
        raise KeyError(f"unknown chunking strategy {name!r}; known: {', '.join(_MODULES)}") from None
    spec = importlib.import_module(module_path).SPEC
    assert spec.name == name, f"{module_path}.SPEC is named {spec.name!r}, registered as {name!r}"
    return spec


def all_strategies() -> list[StrategySpec]:
    return [get_strategy(name) for name in _MODULES]


def config_hash(config: BaseModel) -> str:
    """Stable short hash of a strategy config: the chunk assets' code version."""
    canonical = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def token_cap(config: BaseModel) -> int | None:
    """The hard per-chunk token cap a config promises, if it has one."""
    return getattr(config, "token_cap", None)
