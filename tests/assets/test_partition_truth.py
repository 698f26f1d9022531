"""Per-document truth in a real instance: whatever the run shape, each partition's
latest materialization and each partition of every check describe that document.

These read back what the UI reads: the latest materialization record per partition
(``fetch_materializations``) and the per-partition check state the asset check
partitions view is built from (``get_asset_check_partition_info``: a result counts
only when it targets the partition's latest materialization, else it shows Missing).
"""

import duckdb
import pytest
from dagster import AssetCheckKey, AssetKey
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.base import AssetRecordsFilter
from dagster._core.definitions.partitions.context import partition_loading_context
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionResolvedStatus

from orchestration.definitions import build_project
from tests.assets.test_pipeline import register, run_one, run_range

DONE = {AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED}


@pytest.fixture
def project(settings):
    return build_project(settings)


def latest_metadata(instance, asset: str, partition: str) -> dict:
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    assert records, f"{asset}[{partition}] never materialized"
    mat = records[0].event_log_entry.asset_materialization
    return {k: v.value for k, v in mat.metadata.items()}


def check_partition_states(instance, assets_def) -> dict[tuple[str, str, str], object]:
    """(asset, check, partition) -> the storage's per-partition check info."""
    keys = list(assets_def.check_keys)
    infos = instance.event_log_storage.get_asset_check_partition_info(keys)
    return {(i.check_key.asset_key.to_user_string(), i.check_key.name, i.partition_key): i for i in infos
            if i.partition_key is not None}


def latest_check_description(instance, asset: str, check: str, partition: str) -> str:
    from dagster._core.storage.event_log.base import PartitionKeyFilter

    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(asset), check), limit=1, partition_filter=PartitionKeyFilter(key=partition)
    )
    assert history, f"{asset}.{check}[{partition}] has no execution"
    evaluation = history[0].event.dagster_event.event_specific_data
    return evaluation.description or ""


def stored(db_path, sql, params):
    with duckdb.connect(db_path, read_only=True) as con:
        return con.execute(sql, params).fetchone()[0]


def test_a_range_run_records_each_documents_own_metadata(project, instance, settings):
    docs = ("alpha.md", "sub/beta.txt")
    register(instance, *docs)
    assert run_range(project, instance, *docs).success

    for strategy in project.config_hashes:
        own = {
            d: stored(settings.db_path, "SELECT count(*) FROM chunks WHERE doc_id = ? AND strategy = ?", (d, strategy))
            for d in docs
        }
        for doc in docs:
            chunks_meta = latest_metadata(instance, f"chunks_{strategy}", doc)
            assert chunks_meta["dagster/row_count"] == own[doc], (strategy, doc)
            max_tokens = stored(settings.db_path, "SELECT max(token_count) FROM chunks WHERE doc_id = ? AND strategy = ?",
                                (doc, strategy))
            assert chunks_meta["tokens_max"] == max_tokens
            emb_meta = latest_metadata(instance, f"embeddings_{strategy}", doc)
            assert emb_meta["dagster/row_count"] == own[doc]
    # The test means something only if the documents differ.
    assert latest_metadata(instance, "chunks_recursive", "alpha.md")["dagster/row_count"] != \
        latest_metadata(instance, "chunks_recursive", "sub/beta.txt")["dagster/row_count"]
    pages = {d: latest_metadata(instance, "parsed_documents", d)["chars"] for d in docs}
    assert pages["alpha.md"] != pages["sub/beta.txt"]
    assert latest_metadata(instance, "raw_documents", "alpha.md")["sha256"] != \
        latest_metadata(instance, "raw_documents", "sub/beta.txt")["sha256"]


@pytest.mark.parametrize("docs", [("alpha.md", "sub/beta.txt"), ("alpha.md",)], ids=["two", "one"])
def test_a_range_run_leaves_no_check_partition_missing(project, instance, docs):
    # A range of one document is the CLI's batch of one (one changed file, --batch 1): its checks
    # were stored with no partition, which the UI showed as Skipped for every check.
    register(instance, *docs)
    assert run_range(project, instance, docs[0], docs[-1]).success

    # The document assets' checks (strategy_stats and retrieval_eval are store-wide, unpartitioned).
    document_assets = [a for a in project.defs.assets if a.partitions_def is not None]
    assert len(document_assets) == len(project.graph_order)
    for assets_def in document_assets:
        states = check_partition_states(instance, assets_def)
        for check_key in assets_def.check_keys:
            for doc in docs:
                info = states.get((check_key.asset_key.to_user_string(), check_key.name, doc))
                assert info is not None, (check_key, doc)
                assert info.latest_execution_status in DONE, (check_key, doc, info.latest_execution_status)
                # Targets the partition's latest materialization, so the UI shows it (not Missing).
                assert info.is_current, (check_key, doc)

    # What the UI's check Partitions tab is built from (GraphQL resolves it with AssetCheckState).
    with partition_loading_context(dynamic_partitions_store=instance):
        for assets_def in document_assets:
            keys = [(key, assets_def.partitions_def) for key in assets_def.check_keys]
            for check_key, state in instance.event_log_storage.get_asset_check_state(keys).items():
                shown = state.subsets[AssetCheckExecutionResolvedStatus.SUCCEEDED].compute_union(
                    state.subsets[AssetCheckExecutionResolvedStatus.FAILED]
                )
                assert set(shown.subset_value.get_partition_keys()) == set(docs), check_key


def test_a_bad_document_in_a_batch_shows_its_cause_on_its_partition(project, instance, docs_dir):
    (docs_dir / "empty.txt").write_bytes(b"")
    register(instance, "alpha.md", "empty.txt", "sub/beta.txt")
    assert run_range(project, instance, "alpha.md", "sub/beta.txt").success

    meta = latest_metadata(instance, "parsed_documents", "empty.txt")
    assert "empty.txt" in meta["error"] and "empty" in meta["error"].lower()
    info = check_partition_states(instance, project.defs.get_assets_def(AssetKey("parsed_documents")))
    parsed = info[("parsed_documents", "parsed", "empty.txt")]
    assert parsed.latest_execution_status == AssetCheckExecutionRecordStatus.FAILED and parsed.is_current
    assert "empty" in latest_check_description(instance, "parsed_documents", "parsed", "empty.txt").lower()
    good = latest_metadata(instance, "parsed_documents", "alpha.md")
    assert "error" not in good and good["pages"] >= 1


def test_a_failed_parse_run_alone_shows_its_cause_on_the_check_partition(project, instance, docs_dir):
    (docs_dir / "empty.txt").write_bytes(b"")
    register(instance, "empty.txt")
    assert not run_one(project, instance, "empty.txt").success

    info = check_partition_states(instance, project.defs.get_assets_def(AssetKey("parsed_documents")))
    parsed = info[("parsed_documents", "parsed", "empty.txt")]
    # Failed with the cause, not "Execution failed" with the cause only in the logs.
    assert parsed.latest_execution_status == AssetCheckExecutionRecordStatus.FAILED
    description = latest_check_description(instance, "parsed_documents", "parsed", "empty.txt")
    assert "empty.txt" in description and "empty" in description.lower().replace("empty.txt", "")


def test_a_range_run_commits_once_per_step_whatever_its_number_of_documents(project, instance, settings, docs_dir):
    # Issue 16: a lake commits ~5 transactions/s, serialized across runs, so a transaction per
    # document and step bounded every run; a step now writes all its documents in one.
    (docs_dir / "gamma.md").write_text("# Gamma\n\nA third document, so a step has more documents than commits.\n",
                                       encoding="utf-8")
    docs = ("alpha.md", "gamma.md", "sub/beta.txt")
    register(instance, *docs)
    assert run_range(project, instance, docs[0], docs[-1]).success

    steps = len(project.graph_order)
    # Per step: its documents' rows in one transaction, then its stage_costs rows in another.
    assert stored(settings.db_path, "SELECT writes FROM write_serial", ()) == 2 * steps
    for strategy in project.config_hashes:
        for doc in docs:  # and every document of every step got its rows and its own metadata
            own = stored(settings.db_path, "SELECT count(*) FROM chunks WHERE doc_id = ? AND strategy = ?",
                         (doc, strategy))
            assert own > 0 and latest_metadata(instance, f"chunks_{strategy}", doc)["dagster/row_count"] == own
            assert latest_metadata(instance, f"embeddings_{strategy}", doc)["dagster/row_count"] == own
