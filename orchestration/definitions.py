"""The one place chunkyard's Dagster definitions are built (workspace.yaml loads ``defs``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dagster import (
    AssetKey,
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    ExecutorDefinition,
    define_asset_job,
    in_process_executor,
    multiprocess_executor,
)

from assets.documents import parsed_documents, raw_documents
from assets.stats import build_stats_asset
from assets.evaluation import build_retrieval_eval_asset
from assets.strategies import build_strategy_assets
from chunking.strategies import config_hash
from orchestration.schedules import build_nightly_schedule
from orchestration.sensors import documents_sensor
from orchestration.settings import Settings, load_settings, runs_sharing_cores
from resources.documents import DocumentsFolder
from resources.embedding import EmbeddingModelResource
from resources.store import StoreResource
from resources.tokenizer import TokenizerResource
from search.context import EmbedContext

INGEST_JOB = "ingest_job"
STATS_JOB = "strategy_stats_job"

# Where the celery executor finds its broker and result backend: environment variables, read
# by Dagster when a run starts (and by the workers, deploy/dagster_celery_config.py), so one
# chunkyard.toml serves every machine and no password sits in a file.
CELERY_BROKER_ENV = "CHUNKYARD_CELERY_BROKER"
CELERY_BACKEND_ENV = "CHUNKYARD_CELERY_BACKEND"


def select_executor(kind: str) -> ExecutorDefinition:
    """The executor that ``settings.executor`` names.

    ``in_process`` (default) runs every step in the run's own process; ``multiprocess`` one
    subprocess per step on this machine; ``celery`` sends each step to Dagster's celery
    workers (deploy/), which need the same code, settings, instance and store. Only the
    executor changes: assets, jobs and partitions are the same in every mode.
    """
    if kind == "in_process":
        return in_process_executor
    if kind == "multiprocess":
        return multiprocess_executor
    if kind == "celery":
        # Imported only when chosen: dagster-celery is the [cluster] extra.
        from dagster_celery import celery_executor

        return celery_executor.configured(
            {"broker": {"env": CELERY_BROKER_ENV}, "backend": {"env": CELERY_BACKEND_ENV}},
            name="celery",
        )
    raise ValueError(f"executor = {kind!r}: expected in_process, multiprocess or celery")


@dataclass(frozen=True)
class Project:
    defs: Definitions
    graph_order: list[AssetKey]  # every document asset, upstream first
    config_hashes: dict[str, str]  # strategy or variant name -> hash of its config (its chunks' code version)
    # strategy or variant name -> its embedder (model id and embedded context: its embeddings' code version)
    embed_versions: dict[str, str] = field(default_factory=dict)


def build_project(settings: Settings) -> Project:
    instances = settings.strategy_instances()  # registered strategies, then [variants.*]
    embedding = EmbeddingModelResource(
        model=settings.embedding_model,
        device=settings.embedding_device,
        batch_size=settings.embedding_batch_size,
        precision=settings.embedding_precision,
        batch_tokens=settings.embedding_batch_tokens,
        workers=settings.embedding_workers,
        max_workers=settings.embedding_max_workers,
        parallel_steps=settings.executor != "in_process",
        threads=str(settings.embedding_threads),
        concurrent_runs=runs_sharing_cores(settings),
    )
    strategy_assets = []
    config_hashes: dict[str, str] = {}
    embed_versions: dict[str, str] = {}
    for instance in instances:
        config_hashes[instance.name] = config_hash(instance.config, settings.tokenizer_encoding)
        # As the store records them (EmbeddingModelResource.embedder_identity): the same on every host.
        embed_versions[instance.name] = (embedding.embedder_identity
                                          + EmbedContext.of(instance.embed_context).code_version_suffix())
        strategy_assets.extend(build_strategy_assets(
            instance.spec, instance.config, embedding.model_id, instance.embed_context, name=instance.name,
            tokenizer_encoding=settings.tokenizer_encoding,
        ))

    # Not document assets (unpartitioned, outside graph_order): they summarize the store.
    embedding_keys = [key for a in strategy_assets for key in a.keys if key.path[-1].startswith("embeddings_")]
    stats_asset = build_stats_asset(embedding_keys)
    retrieval_eval = build_retrieval_eval_asset(embedding_keys, eval_set=settings.eval_set, mode=settings.eval_mode,
                                                configured=list(config_hashes), **settings.search_options())
    assets = [raw_documents, parsed_documents, *strategy_assets, stats_asset, retrieval_eval]
    graph_order = [AssetKey("raw_documents"), AssetKey("parsed_documents")] + [
        key for a in strategy_assets for key in a.keys
    ]
    ingest_job = define_asset_job(
        INGEST_JOB,
        selection=AssetSelection.assets(*graph_order),
        description="Every document asset: read, parse, chunk with every strategy, embed.",
    )
    # Its own job so `chunkyard run` refreshes the statistics on the configured executor
    # (a celery worker in a cluster), like the document runs before it.
    stats_job = define_asset_job(
        STATS_JOB,
        selection=AssetSelection.assets(stats_asset),
        description="Per-strategy chunk statistics, from the store's current chunks.",
    )
    defs = Definitions(
        assets=assets,
        jobs=[ingest_job, stats_job],
        sensors=[
            documents_sensor,
            # Dagster's default automation sensor starts stopped; ours runs from the start.
            AutomationConditionSensorDefinition(
                "automation_sensor",
                target=AssetSelection.all(),
                default_status=DefaultSensorStatus.RUNNING,
                minimum_interval_seconds=30,
            ),
        ],
        schedules=[build_nightly_schedule(graph_order, config_hashes, settings.schedule_cron, embed_versions)],
        resources={
            "documents": DocumentsFolder(root=settings.docs_root, limits=settings.limits.as_config()),
            "store": StoreResource(path=settings.db_path, sidecar_dir=settings.sidecar_dir,
                                   **settings.store.model_dump()),
            "tokenizer": TokenizerResource(encoding=settings.tokenizer_encoding),
            "embedding": embedding,
        },
        executor=select_executor(settings.executor),
    )
    return Project(defs=defs, graph_order=graph_order, config_hashes=config_hashes, embed_versions=embed_versions)


def build_definitions(settings: Settings) -> Definitions:
    return build_project(settings).defs


project = build_project(load_settings())
defs = project.defs


def ingest_job():
    """The resolved ingest job (module-level so ``reconstructable`` can find it)."""
    return defs.resolve_job_def(INGEST_JOB)


def stats_job():
    """The resolved statistics job (module-level so ``reconstructable`` can find it)."""
    return defs.resolve_job_def(STATS_JOB)
