"""The documents-folder sensor: new files get a partition and a run, changed files a
run, deleted files lose their partition and every stored row.

What is new, changed or deleted is decided against the hashes the store has
recorded for this folder (not against the cursor alone), so a document the CLI
has already processed is never requested again, and an empty cursor (first
start, or a reset) does not re-run everything. The cursor maps doc_id ->
[data version, size, mtime_ns, sidecar stats, ctime_ns]: a file is re-hashed only when
one of them moved. ctime because a user cannot set it: a rewrite that keeps the size and
restores the mtime (``cp -p``, ``rsync -a``, ``tar -x``) and a ``chmod`` that makes an
unreadable file readable both move it and nothing else. A content the cursor already
holds was requested on that earlier tick (its run may not have reached the store yet),
so it is not requested again while a run of that document is queued or running; once none is
and the store still lacks that content (the run failed or was cancelled before it stored the
read), it is requested again, up to ``MAX_REQUESTS_AGAIN`` times per content (then a warning:
a cause that persists is not hammered every 30 s). Run keys are ``doc_id:<data version>#<n>``, n the number
of the requesting tick (kept in the cursor), which the daemon never launches twice.

One owner per document run: while a CLI ingest holds the instance's run lock
(``orchestration.runlock``) the sensor skips, and looks again after it. One database per
instance and per folder of side outputs (``resources.ownership``): a tick of a database
another one's claims exclude skips, naming the conflict, before it deletes or requests
anything; otherwise it claims them, as a run would.
"""


import hashlib
import json

from dagster import (
    AssetKey,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.partitions import DOCUMENTS_PARTITIONS_NAME, documents_partitions
from orchestration.reconcile import diff_folder
from orchestration.runlock import documents_in_flight, lock_holder
from resources.documents import DocumentsFolder, current_fingerprint, sidecars_stat, source_stat
from resources.ownership import claim_for_store, store_conflict
from resources.store import SourceRootConflict, StoreLockedError, StoreResource

RAW = AssetKey("raw_documents")
# The corpus-wide statistics (assets/stats.py): refreshed after the sensor deletes documents.
STATS = AssetKey("strategy_stats")
SENSOR_LOCK_TIMEOUT_S = 10.0


# A content whose runs keep ending before the store records it is asked for again this many times.
MAX_REQUESTS_AGAIN = 3


def _load_cursor(raw: str | None) -> tuple[dict[str, list], int, dict[str, list]]:
    """The cursor's documents (doc_id -> [data version, size, mtime_ns, sidecar stats, ctime_ns]), how
    many ticks of this sensor have requested runs, and the contents asked for again (doc_id ->
    [data version, times]); ``({}, 0, {})`` for none, and what an older cursor lacks is empty or 0."""
    try:
        cursor = json.loads(raw) if raw else {}
        return (dict(cursor.get("docs") or {}), int(cursor.get("requesting_ticks", 0)),
                dict(cursor.get("asked_again") or {}))
    except (ValueError, AttributeError, TypeError):
        return {}, 0, {}


def _cli_owns_documents(context: SensorEvaluationContext) -> SkipReason | None:
    """A skip while a CLI ingest holds the instance's run lock. The cursor is left as it
    was: the next tick compares the folder with what the CLI stored."""
    holder = lock_holder(context.instance.root_directory)
    if holder is None:
        return None
    return SkipReason(f"a chunkyard CLI run (pid {holder or 'unknown'}) owns the documents until it ends")


@sensor(
    name="documents_sensor",
    target=[RAW, STATS],
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.RUNNING,
    description="Watches the documents folder: adds/removes partitions, requests runs for new or changed content, "
                "and refreshes strategy_stats after a deletion.",
)
def documents_sensor(
    context: SensorEvaluationContext, documents: DocumentsFolder, store: StoreResource
) -> SensorResult | SkipReason:
    if skip := _cli_owns_documents(context):
        return skip
    if conflict := store_conflict(context.instance, store):  # before the store is opened, as the CLI does
        return SkipReason(conflict)
    chunk_store = store.store(lock_timeout_s=SENSOR_LOCK_TIMEOUT_S)
    conflict = chunk_store.source_root_conflict(documents.root_path)
    if conflict:
        return SkipReason(conflict)
    try:  # this database's folder: claim the instance and side outputs, as a run would
        claim_for_store(context.instance, store)
    except SourceRootConflict as exc:  # claimed by another between the check and now
        return SkipReason(str(exc))
    previous, requesting_ticks, asked_again = _load_cursor(context.cursor)
    known_sha = chunk_store.document_hashes(documents.root_path)

    state: dict[str, list] = {}
    for doc_id, source in documents.scan().items():
        try:
            stat = source_stat(source)
        except OSError:
            stat = None  # gone since the listing, or unreadable: current_fingerprint says which
        prev = previous.get(doc_id)
        # The sidecars beside it are part of its content too (resources.documents.data_version).
        sidecars = sidecars_stat(source) if stat is not None else []
        # An entry of an older cursor (no ctime) never matches: each document is hashed once more.
        seen = None if stat is None else [stat.st_size, stat.st_mtime_ns, sidecars, stat.st_ctime_ns]
        if seen is not None and prev and prev[1:] == seen:
            sha = prev[0]
        else:
            sha = current_fingerprint(source)
            if sha is None:
                continue
        state[doc_id] = [sha, -1, -1, [], -1] if seen is None else [sha, *seen]

    changes = diff_folder({d: e[0] for d, e in state.items()}, known_sha)
    if skip := _cli_owns_documents(context):
        # A CLI run started while this tick hashed the folder: it owns these documents now.
        return skip
    existing = set(context.instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME))

    deleted: list[str] = []
    for doc_id in changes.deleted:
        try:
            chunk_store.delete_document(doc_id)
            deleted.append(doc_id)
        except StoreLockedError as exc:
            # Still in the store, so the next tick finds it deleted again and retries.
            context.log.warning(f"could not delete {doc_id} yet: {exc}")

    partition_requests = []
    to_add = sorted(d for d in state if d not in existing and d not in changes.deleted)
    if to_add:
        partition_requests.append(documents_partitions.build_add_request(to_add))
    to_remove = sorted(d for d in deleted if d in existing)
    if to_remove:
        partition_requests.append(documents_partitions.build_delete_request(to_remove))

    # A content this sensor saw on an earlier tick was requested then (its run may not have stored it
    # yet), and is not requested again while a run of that document is queued or running. Once none is
    # and the store still lacks that content (the run failed, or was cancelled, before its read was
    # stored), it is requested again: nothing else would (the schedule does not read the folder).
    seen_sha = {doc_id: entry[0] for doc_id, entry in previous.items()}
    waiting = [d for d, sha in changes.to_process.items() if seen_sha.get(d) == sha]
    again: set[str] = set()
    if waiting:
        in_flight = documents_in_flight(context.instance, context.instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME))
        # The store read again after the runs: one that stored its read and ended since this tick
        # first read it is not taken for one that failed.
        stored_now = chunk_store.document_hashes(documents.root_path)
        for doc_id in waiting:
            sha = changes.to_process[doc_id]
            if doc_id in in_flight or stored_now.get(doc_id) == sha:
                continue
            times = asked_again[doc_id][1] if asked_again.get(doc_id, [None])[0] == sha else 0
            if times >= MAX_REQUESTS_AGAIN:
                context.log.warning(f"{doc_id}: {times + 1} runs ended without storing this content; not asked "
                                    f"again until it changes (or `chunkyard run`)")
                continue
            asked_again[doc_id] = [sha, times + 1]
            again.add(doc_id)
    # The daemon skips a run key it has seen: a document back to an earlier version (a sidecar
    # removed again, bytes reverted) needs a new one. Numbered per requesting tick, from the
    # cursor, so a tick the daemon evaluates again after a failure asks with the same keys.
    serial = requesting_ticks + 1
    run_requests = [
        RunRequest(partition_key=doc_id, run_key=f"{doc_id}:{sha}#{serial}", asset_selection=[RAW])
        for doc_id, sha in sorted(changes.to_process.items())
        if seen_sha.get(doc_id) != sha or doc_id in again
    ]
    if run_requests or deleted:
        context.log.info(f"{len(run_requests)} new or changed, {len(deleted)} deleted document(s)")
    if deleted:
        # Nothing else would: the statistics are refreshed after embeddings, and a deletion makes none.
        # The key names what was deleted too: a cursor reset numbers ticks from 0 again.
        digest = hashlib.sha256("\n".join(sorted(deleted)).encode("utf-8")).hexdigest()[:12]
        run_requests.append(RunRequest(run_key=f"{STATS.to_user_string()}:{digest}#{serial}", asset_selection=[STATS]))
    asked_again = {d: entry for d, entry in asked_again.items() if d in changes.to_process}
    return SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=partition_requests,
        cursor=json.dumps({"docs": state, "requesting_ticks": requesting_ticks + bool(run_requests),
                           "asked_again": asked_again}, sort_keys=True),
    )
