"""The nightly schedule: materialize whatever is missing or stale.

Its cron is the setting ``schedule_cron`` (``CHUNKYARD_SCHEDULE_CRON``; default
NIGHTLY_CRON, 02:00 every night).

Missing comes from the instance (partitions of an asset never materialized);
stale from the store (chunks made from an older version of the document, or
with another config than the strategy's current one). One run per document
that needs anything, for exactly the assets it needs. A document whose recorded
failure is for its current bytes is not re-run: it would fail the same way
(unless the limit that refused it has been raised since: the CLI retries those).
A document a queued or running run already targets is left to that run: with a cron
more frequent than the runs are long, each tick would otherwise request it again
(Dagster de-duplicates a schedule's run keys per tick only). A database whose instance or
folder of side outputs another database has claimed (``resources.ownership``) gets no run:
the tick skips, naming the conflict (its runs would be refused at their first step).
"""


from dataclasses import dataclass
from datetime import datetime, timezone
from typing import NamedTuple

from dagster import (
    AssetKey,
    AssetSelection,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)
from dagster._check import CheckError

from assets.partitions import DOCUMENTS_PARTITIONS_NAME
from chunking.limits import DocumentLimits, would_refuse_again
from orchestration.runlock import documents_in_flight
from resources.ownership import store_conflict
from resources.store import ChunkStore, StoreResource

NIGHTLY_CRON = "0 2 * * *"


@dataclass(frozen=True)
class RecordedFailures:
    """Documents whose failure is recorded for the bytes they still have."""

    settled: frozenset[str] = frozenset()  # would fail the same way: never re-run unless forced
    retry: frozenset[str] = frozenset()  # refused under a limit the user has since raised: re-run whole


def plan_refresh(
    partitions: list[str],
    materialized: dict[AssetKey, set[str]],
    graph_order: list[AssetKey],
    stale_chunks: dict[str, set[str]],
    failures: RecordedFailures = RecordedFailures(),
    in_flight: frozenset[str] | set[str] = frozenset(),
    settled_chunks: dict[str, set[str]] | None = None,
    stale_embeddings: dict[str, set[str]] | None = None,
    settled_embeddings: dict[str, set[str]] | None = None,
    unparsed: frozenset[str] | set[str] = frozenset(),
) -> dict[str, list[AssetKey]]:
    """doc_id -> assets to materialize, in graph order.

    ``stale_chunks`` maps strategy -> doc_ids whose chunks are out of date; their
    ``chunks_<s>`` and ``embeddings_<s>`` assets are refreshed. A missing asset
    brings everything downstream of it along, since those read what it writes.
    ``failures.settled`` documents are never planned (re-running them would fail
    the same way); ``failures.retry`` documents get the whole graph. ``in_flight``
    documents (a queued or running run targets them) are not planned: that run
    brings them up to date, and a later tick sees what it left. ``settled_chunks``
    (strategy -> doc_ids, :func:`chunk_refresh`): that strategy's assets are
    not planned for them, even when never materialized (a failed run alone leaves them so).
    ``stale_embeddings`` / ``settled_embeddings`` (:func:`chunk_refresh`): the same for
    ``embeddings_<s>`` alone, whose chunks are current. ``unparsed`` documents (read, not
    parsed since: :func:`chunk_refresh`) get the whole graph.
    """
    plan: dict[str, list[AssetKey]] = {}
    for doc_id in partitions:
        if doc_id in failures.settled or doc_id in in_flight:
            continue
        needed: set[AssetKey] = {k for k in graph_order if doc_id not in materialized.get(k, set())}
        for strategy, docs in stale_chunks.items():
            if doc_id in docs:
                needed |= {AssetKey(f"chunks_{strategy}"), AssetKey(f"embeddings_{strategy}")}
        for strategy, docs in (stale_embeddings or {}).items():
            if doc_id in docs:
                needed.add(AssetKey(f"embeddings_{strategy}"))
        if (doc_id in failures.retry or doc_id in unparsed or AssetKey("raw_documents") in needed
                or AssetKey("parsed_documents") in needed):
            needed = set(graph_order)
        for strategy, docs in (settled_chunks or {}).items():
            if doc_id in docs:
                needed -= {AssetKey(f"chunks_{strategy}"), AssetKey(f"embeddings_{strategy}")}
        for strategy, docs in (settled_embeddings or {}).items():
            if doc_id in docs and AssetKey(f"chunks_{strategy}") not in needed:
                needed.discard(AssetKey(f"embeddings_{strategy}"))
        if needed:
            plan[doc_id] = [k for k in graph_order if k in needed]
    return plan


def plan_from_refresh(partitions: list[str], materialized: dict[AssetKey, set[str]], graph_order: list[AssetKey],
                      refresh: "ChunkRefresh", failures: RecordedFailures = RecordedFailures(),
                      in_flight: frozenset[str] | set[str] = frozenset()) -> dict[str, list[AssetKey]]:
    """:func:`plan_refresh` with everything :func:`chunk_refresh` found (what the CLI and the schedule plan with)."""
    return plan_refresh(partitions, materialized, graph_order, refresh.stale, failures, in_flight, refresh.settled,
                        refresh.stale_embeddings, refresh.settled_embeddings, refresh.unparsed)


def recorded_failures(store: ChunkStore, current: dict[str, str] | None = None,
                      limits: DocumentLimits | None = None) -> RecordedFailures:
    """The documents with status 'error' and a recorded sha256 equal to
    ``current[doc_id]`` (the folder's fingerprints): settled, or to retry when
    ``limits`` has since raised the limit that refused them. Without ``current``
    (the nightly schedule, which does not read the folder; the sensor requests
    changed files) every failure recorded with a real hash counts; without
    ``limits`` every one is settled."""
    with store.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT doc_id, sha256, error FROM documents WHERE status = 'error' AND coalesce(sha256, '') <> ''"
        ).fetchall()
    same_bytes = {doc_id: error for doc_id, sha, error in rows if current is None or current.get(doc_id) == sha}
    retry = {doc_id for doc_id, error in same_bytes.items()
             if limits is not None and not would_refuse_again(error, limits)}
    return RecordedFailures(settled=frozenset(set(same_bytes) - retry), retry=frozenset(retry))


class ChunkRefresh(NamedTuple):
    """What the chunk assets of the parsed documents need (:func:`chunk_refresh`): strategy -> doc_ids."""

    stale: dict[str, set[str]]  # chunks (and embeddings) to make again
    settled: dict[str, set[str]]  # failed, and would fail the same way now: not re-run unless forced
    # The same two for the embeddings of chunks that are current (an embedding refusal recorded):
    stale_embeddings: dict[str, set[str]]  # to embed again (a limit raised since, another embedder)
    settled_embeddings: dict[str, set[str]]  # would be refused the same way now: left as they are
    # Read since their last parse, and not parsed since (a run stopped after raw_documents): every asset.
    unparsed: frozenset[str] = frozenset()


def chunk_refresh(store: ChunkStore, current_config_hashes: dict[str, str],
                  limits: DocumentLimits | None = None, embed_versions: dict[str, str] | None = None) -> ChunkRefresh:
    """Per strategy, the parsed documents whose ``chunks_<strategy>`` (and embeddings) must be
    made again -- their stored chunks are of another data version or configuration, or the
    strategy failed on them and that failure is not settled -- and those whose failure is
    settled (:func:`settled_chunk_failures`). One read of the parsed documents and failures
    serves both (the CLI and the nightly schedule plan with both).

    Likewise for a recorded embedding refusal of current chunks (``embed_versions``: strategy ->
    the embedder, as the embeddings asset's code version names it): settled when it is for the
    same data version, chunk configuration and embedder and its limit would refuse it again
    (whether its run was a batch, which materialized the partition, or the document alone, which
    failed it); otherwise only ``embeddings_<strategy>`` runs again. And a document whose stored
    vectors another embedder made (``ChunkStore.stored_embed_versions`` against ``embed_versions``)
    has only its ``embeddings_<strategy>`` run again."""
    documents = _parsed_documents(store)
    failures = store.strategy_failures()
    settled = settled_chunk_failures(current_config_hashes, documents, failures, limits)
    stale_embeddings: dict[str, set[str]] = {}
    settled_embeddings: dict[str, set[str]] = {}
    store_refusals = store.embedding_failures()
    for strategy, refused in store_refusals.items():
        if strategy not in current_config_hashes:
            continue
        for doc_id, (sha, cfg, version, error) in refused.items():
            if doc_id not in documents:
                continue
            same = (sha, cfg, version) == (documents[doc_id], current_config_hashes[strategy],
                                           (embed_versions or {}).get(strategy, version))
            if same and (limits is None or would_refuse_again(error, limits)):
                settled_embeddings.setdefault(strategy, set()).add(doc_id)
            else:
                stale_embeddings.setdefault(strategy, set()).add(doc_id)
    stale: dict[str, set[str]] = {}
    stored_versions = store.stored_embed_versions() if embed_versions else None
    for strategy, cfg_hash in current_config_hashes.items():
        state = store.chunk_state(strategy)
        stale[strategy] = {
            doc_id for doc_id, sha in documents.items()
            if doc_id in state and (state[doc_id][0] != sha or state[doc_id][1] != cfg_hash)
        }
        stale[strategy] |= set(failures.get(strategy, {})) & set(documents)
        stale[strategy] -= settled[strategy]
        # Current chunks whose vectors another embedder made (the model, its precision or the
        # embedded context changed since): embedded again, their chunks left as they are.
        version = (embed_versions or {}).get(strategy)
        if version is not None and stored_versions is not None:
            # And current chunks with no vectors at all, their embedding not refused (a run
            # stopped between the two steps): embedded.
            embedded = stored_versions.get(strategy, {})
            other = {doc_id for doc_id, (sha, cfg) in state.items()
                     if doc_id in documents and (sha, cfg) == (documents[doc_id], cfg_hash)
                     and doc_id not in stale[strategy] and embedded.get(doc_id, set()) != {version}}
            other -= settled_embeddings.get(strategy, set())
            other -= set(store_refusals.get(strategy, {}))
            other -= set(failures.get(strategy, {}))  # chunks refused by a check (over the cap): not embedded
            if other:
                stale_embeddings.setdefault(strategy, set()).update(other)
    return ChunkRefresh(stale, settled, stale_embeddings, settled_embeddings, _unparsed_documents(store))


def settled_chunk_failures(current_config_hashes: dict[str, str], documents: dict[str, str],
                           failures: dict[str, dict[str, tuple[str, str, str]]],
                           limits: DocumentLimits | None = None) -> dict[str, set[str]]:
    """strategy -> the parsed documents (``documents``: doc_id -> data version) it failed on
    (``failures``, as ``ChunkStore.strategy_failures`` gives them) that would fail the same way
    now: the same data version and configuration, and not a limit since raised (without
    ``limits`` every such failure is settled). Like a settled parse failure, never re-run
    unless forced: in a batch or alone, the same outcome."""
    return {
        strategy: {doc_id for doc_id, (sha, cfg, error) in failures.get(strategy, {}).items()
                   if (sha, cfg) == (documents.get(doc_id), cfg_hash)
                   and (limits is None or would_refuse_again(error, limits))}
        for strategy, cfg_hash in current_config_hashes.items()
    }


def _unparsed_documents(store: ChunkStore) -> frozenset[str]:
    """The documents read since their last parse and not parsed since (status 'read' outside a
    run: a run stopped after raw_documents recorded the new bytes)."""
    with store.connect(read_only=True) as con:
        return frozenset(d for (d,) in con.execute("SELECT doc_id FROM documents WHERE status = 'read'").fetchall())


def _parsed_documents(store: ChunkStore) -> dict[str, str]:
    """doc_id -> sha256 of every parsed document."""
    with store.connect(read_only=True) as con:
        return dict(con.execute("SELECT doc_id, sha256 FROM documents WHERE status = 'parsed'").fetchall())


def _tick_time(context: ScheduleEvaluationContext) -> datetime:
    # A tick evaluated by hand (tests, "evaluate" in the UI) may carry no scheduled time.
    try:
        return context.scheduled_execution_time
    except CheckError:
        return datetime.now(timezone.utc)


def build_nightly_schedule(graph_order: list[AssetKey], config_hashes: dict[str, str],
                           cron: str = NIGHTLY_CRON, embed_versions: dict[str, str] | None = None) -> ScheduleDefinition:
    """``nightly_refresh`` on ``cron`` (UTC): one run per document that needs anything,
    for exactly the assets it needs (:func:`plan_refresh`)."""

    @schedule(
        name="nightly_refresh",
        cron_schedule=cron,
        target=AssetSelection.assets(*graph_order),
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"On cron {cron!r} (schedule_cron): materialize every document asset that is missing or stale.",
    )
    def nightly_refresh(context: ScheduleEvaluationContext, store: StoreResource):
        instance = context.instance
        if conflict := store_conflict(instance, store):
            yield SkipReason(conflict)
            return
        partitions = instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME)
        materialized = {key: set(instance.get_materialized_partitions(key)) for key in graph_order}
        chunks = chunk_refresh(store.store(), config_hashes, embed_versions=embed_versions)
        failures = recorded_failures(store.store())
        in_flight = set(documents_in_flight(instance, partitions))
        # The tick's minute: a run key per tick and document, whatever the cron.
        stamp = _tick_time(context).strftime("%Y%m%dT%H%M")
        for doc_id, keys in plan_from_refresh(partitions, materialized, graph_order, chunks, failures, in_flight).items():
            yield RunRequest(partition_key=doc_id, asset_selection=keys, run_key=f"nightly:{stamp}:{doc_id}")

    return nightly_refresh
