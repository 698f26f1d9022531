"""The documents-folder sensor: new files get a partition and a run, changed files a
run, deleted files lose their partition and every stored row.

The cursor maps doc_id -> [sha256, size, mtime_ns], so a file is re-hashed only
when its size or mtime moved. An empty cursor (first start, or a reset) is
seeded from the hashes the store already holds for this folder: a restart does
not re-run everything. Run keys are ``doc_id:sha256``, so a content that was
already requested is never requested twice.
"""


import json

from dagster import (
    AssetKey,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from assets.partitions import DOCUMENTS_PARTITIONS_NAME, documents_partitions
from orchestration.reconcile import diff_folder
from resources.documents import DocumentsFolder, source_fingerprint, source_stat
from resources.store import ChunkStore, StoreLockedError, StoreResource

RAW = AssetKey("raw_documents")
SENSOR_LOCK_TIMEOUT_S = 10.0


def _load_cursor(raw: str | None) -> dict[str, list] | None:
    if not raw:
        return None
    try:
        return json.loads(raw)["docs"]
    except (ValueError, KeyError, TypeError):
        return None


@sensor(
    name="documents_sensor",
    target=[RAW],
    minimum_interval_seconds=30,
    default_status=DefaultSensorStatus.RUNNING,
    description="Watches the documents folder: adds/removes partitions, requests runs for new or changed content.",
)
def documents_sensor(
    context: SensorEvaluationContext, documents: DocumentsFolder, store: StoreResource
) -> SensorResult:
    chunk_store = ChunkStore(store.path, lock_timeout_s=SENSOR_LOCK_TIMEOUT_S)
    previous = _load_cursor(context.cursor)
    if previous is None:
        # No cursor: trust what the store already processed from this folder.
        known = chunk_store.document_hashes(documents.root_path)
        previous = {doc_id: [sha, None, None] for doc_id, sha in known.items()}
    known_sha = {doc_id: entry[0] for doc_id, entry in previous.items()}

    state: dict[str, list] = {}
    for doc_id, source in documents.scan().items():
        stat = source_stat(source)
        prev = previous.get(doc_id)
        if prev and prev[1] == stat.st_size and prev[2] == stat.st_mtime_ns:
            sha = prev[0]
        else:
            sha = source_fingerprint(source)
        state[doc_id] = [sha, stat.st_size, stat.st_mtime_ns]

    changes = diff_folder({d: e[0] for d, e in state.items()}, known_sha)
    existing = set(context.instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME))

    deleted: list[str] = []
    for doc_id in changes.deleted:
        try:
            chunk_store.delete_document(doc_id)
            deleted.append(doc_id)
        except StoreLockedError as exc:
            # Keep it in the cursor so the next tick tries again.
            context.log.warning(f"could not delete {doc_id} yet: {exc}")
            state[doc_id] = previous[doc_id]

    partition_requests = []
    to_add = sorted(d for d in state if d not in existing and d not in changes.deleted)
    if to_add:
        partition_requests.append(documents_partitions.build_add_request(to_add))
    to_remove = sorted(d for d in deleted if d in existing)
    if to_remove:
        partition_requests.append(documents_partitions.build_delete_request(to_remove))

    run_requests = [
        RunRequest(partition_key=doc_id, run_key=f"{doc_id}:{sha}", asset_selection=[RAW])
        for doc_id, sha in sorted(changes.to_process.items())
    ]
    if run_requests or deleted:
        context.log.info(
            f"{len(changes.new)} new, {len(changes.changed)} changed, {len(deleted)} deleted document(s)"
        )
    return SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=partition_requests,
        cursor=json.dumps({"docs": state}, sort_keys=True),
    )
