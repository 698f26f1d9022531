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

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

from chunking.embedding import Embedder
from chunking.errors import UnknownStrategyError
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
        """Validate ``values`` into this strategy's config model.

        The common names ``chunk_token_size`` / ``chunk_overlap_token_size`` are
        accepted by every strategy that has a token cap (translated to its own
        field, see ``COMMON_NAMES``); a name the model does not know fails with
        an error listing the valid ones instead of pydantic's bare "Extra inputs".
        """
        values = translate_common_names(self.name, dict(values or {}))
        unknown = sorted(set(values) - set(self.config_model.model_fields))
        if unknown:
            raise StrategyConfigError(
                f"strategy {self.name!r} has no config field(s) {', '.join(map(repr, unknown))}; "
                f"valid fields: {', '.join(config_field_names(self))}"
            )
        return self.config_model.model_validate(values)


class StrategyConfigError(ValueError):
    """A strategy config names a field the strategy does not have, or uses a common name it cannot map."""


# The common size names every token-capped strategy accepts, mapped to each
# strategy's own field (a strategy absent here either uses the common names
# itself, as recursive / paragraph / semantic do, or has no token cap).
COMMON_NAMES: dict[str, dict[str, dict[str, Any]]] = {
    # SentenceTextSplitter's hard cap is max_tokens_per_section; its overlap is a percentage, not tokens.
    "sentence": {"chunk_token_size": {"field": "max_tokens_per_section"}},
    # sentence_window counts tokens only with unit="tokens"; chunk_size is then also its cap (max_size).
    "sentence_window": {
        "chunk_token_size": {"field": "chunk_size", "also": {"unit": "tokens"}, "cap": "max_size"},
        "chunk_overlap_token_size": {"field": "overlap", "also": {"unit": "tokens"}},
    },
}
# Fields every config accepts under the common names (listed by config_field_names).
COMMON_FIELD_NAMES = ("chunk_token_size", "chunk_overlap_token_size")


def translate_common_names(strategy: str, values: dict[str, Any]) -> dict[str, Any]:
    """Rename the common size names to ``strategy``'s own fields; pure.

    Raises StrategyConfigError when the common name and the strategy's own field
    are both given, or when the mapping's implied setting (e.g. ``unit="tokens"``)
    contradicts an explicit one.
    """
    mapping = COMMON_NAMES.get(strategy, {})
    out = dict(values)
    for common, rule in mapping.items():
        if common not in out:
            continue
        value = out.pop(common)
        field = rule["field"]
        if field in values:
            raise StrategyConfigError(f"strategy {strategy!r}: give {common} or {field}, not both ({common} means {field})")
        for implied, implied_value in rule.get("also", {}).items():
            if values.get(implied, implied_value) != implied_value:
                raise StrategyConfigError(
                    f"strategy {strategy!r}: {common} sets {implied}={implied_value!r}, "
                    f"which contradicts {implied}={values[implied]!r}"
                )
            out[implied] = implied_value
        out[field] = value
        cap = rule.get("cap")
        if cap and cap not in values:
            out[cap] = value
    return out


def config_field_names(spec: StrategySpec) -> list[str]:
    """The names a config of ``spec`` accepts: its own fields, then the common names mapped onto them."""
    names = list(spec.config_model.model_fields)
    names += [common for common in COMMON_NAMES.get(spec.name, {}) if common not in names]
    return names


def lax_int(value: Any) -> int | None:
    """``value`` as the config's ``int`` field will take it (pydantic's lax mode: ``"200"``, ``200.0``,
    a numpy integer), or None when the field will refuse it, and for a bool (which the field takes as
    0 or 1: no default is derived from that). For validators that derive a default from a size
    before pydantic converts it: they must read a size the same whatever its type
    (``numpy.int64(200)`` once kept the default overlap of 100, which 200 scaled to 50)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return _INT.validate_python(value)
    except ValidationError:
        return None


_INT = TypeAdapter(int)


class TokenBudgetConfig(BaseModel):
    """Base of the configs with a hard token cap and a token overlap below it.

    Subclasses declare ``chunk_token_size`` and ``chunk_overlap_token_size`` with
    their seed's defaults; the invariant and the cap live here once.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_token_size: int
    chunk_overlap_token_size: int

    @model_validator(mode="before")
    @classmethod
    def _default_overlap_below_a_small_size(cls, values: Any) -> Any:
        """An overlap left at its default is at most a quarter of the size: ``min(100, size // 4)``
        for ``recursive`` (the default 100 from 400 tokens up; 25 at 100, 50 at 200). Only an
        overlap set by the caller is refused as too large. A quarter, the top of the usual
        compromise, so that the overlap grows with the size without a jump (the default kept
        whole until it no longer fit made 101 tokens overlap by 100 and 100 tokens by 8)."""
        if not isinstance(values, dict) or "chunk_overlap_token_size" in values:
            return values
        size = lax_int(values.get("chunk_token_size"))
        overlap = cls.model_fields["chunk_overlap_token_size"].default
        if size is not None and type(overlap) is int and 0 < size and size // 4 < overlap:
            return {**values, "chunk_overlap_token_size": size // 4}
        return values

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
        raise UnknownStrategyError(f"unknown chunking strategy {name!r}; known: {', '.join(_MODULES)}") from None
    spec = importlib.import_module(module_path).SPEC
    assert spec.name == name, f"{module_path}.SPEC is named {spec.name!r}, registered as {name!r}"
    return spec


def all_strategies() -> list[StrategySpec]:
    return [get_strategy(name) for name in _MODULES]


# The tokenizer encoding that config_hash leaves unnamed: hashes stored before the encoding
# was part of them were all made with it, and they still match.
DEFAULT_TOKENIZER_ENCODING = "cl100k_base"


def config_hash(config: BaseModel, tokenizer_encoding: str = DEFAULT_TOKENIZER_ENCODING) -> str:
    """Stable short hash of a strategy config and of the tokenizer that counts its chunks: the
    chunk assets' code version, stored with every chunk.

    Another encoding cuts and counts other chunks, so it is another version (``<hash>:<encoding>``):
    changing ``tokenizer_encoding`` plans every document's chunks again, as a config change does.
    """
    canonical = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
    return digest if tokenizer_encoding == DEFAULT_TOKENIZER_ENCODING else f"{digest}:{tokenizer_encoding}"


def token_cap(config: BaseModel) -> int | None:
    """The hard per-chunk token cap a config promises, if it has one."""
    return getattr(config, "token_cap", None)
