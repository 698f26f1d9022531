"""The nightly plan and the CLI's batching (pure logic; the CLI end to end is in tests/e2e)."""

from dagster import AssetKey

from orchestration.cli import contiguous_batches
from orchestration.reconcile import diff_folder
from orchestration.schedules import plan_refresh

ORDER = [AssetKey(k) for k in ("raw_documents", "parsed_documents", "chunks_r", "embeddings_r", "chunks_s", "embeddings_s")]


def test_plan_refresh_missing_and_stale():
    everything = {k: {"a", "b", "c"} for k in ORDER}
    assert plan_refresh(["a", "b", "c"], everything, ORDER, {}) == {}
    missing_embedding = {**everything, AssetKey("embeddings_s"): {"a", "b"}}
    assert plan_refresh(["a", "b", "c"], missing_embedding, ORDER, {}) == {"c": [AssetKey("embeddings_s")]}
    stale = plan_refresh(["a", "b", "c"], everything, ORDER, {"r": {"b"}, "s": set()})
    assert stale == {"b": [AssetKey("chunks_r"), AssetKey("embeddings_r")]}
    # A document never parsed needs the whole graph.
    unparsed = {**everything, AssetKey("parsed_documents"): {"a", "b"}}
    assert plan_refresh(["a", "b", "c"], unparsed, ORDER, {}) == {"c": ORDER}


def test_contiguous_batches_respect_partition_order_and_size():
    keys = ["a", "b", "c", "d", "e", "f", "g"]
    assert contiguous_batches(keys, {"a", "b", "c", "d", "e"}, 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert contiguous_batches(keys, {"a", "c", "d", "g"}, 10) == [["a"], ["c", "d"], ["g"]]
    assert contiguous_batches(keys, set(), 3) == []


def test_diff_folder():
    changes = diff_folder({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "x", "d": "4"})
    assert changes.new == {"c": "3"} and changes.changed == {"b": "2"}
    assert changes.deleted == ["d"] and changes.unchanged == ["a"]
    assert changes.to_process == {"c": "3", "b": "2"}


def test_nightly_schedule_requests_missing_and_stale_documents(settings, instance, docs_dir):
    from dagster import build_schedule_context

    from orchestration.definitions import build_project
    from resources.store import ChunkStore, StoreResource

    project = build_project(settings)
    schedule = project.defs.resolve_schedule_def("nightly_refresh")
    instance.add_dynamic_partitions("documents", ["alpha.md", "sub/beta.txt"])
    job = project.defs.resolve_job_def("ingest_job")
    assert job.execute_in_process(instance=instance, partition_key="alpha.md").success

    context = build_schedule_context(
        instance=instance, resources={"store": StoreResource(path=settings.db_path)},
        repository_def=project.defs.get_repository_def(),
    )
    requests = list(schedule.evaluate_tick(context).run_requests)
    # beta was never materialized: it needs the whole graph; alpha is complete and fresh.
    assert [r.partition_key for r in requests] == ["sub/beta.txt"]
    assert list(requests[0].asset_selection) == project.graph_order

    # alpha's chunks go stale when its stored content hash moves on.
    with ChunkStore(settings.db_path).transaction() as con:
        con.execute("UPDATE documents SET sha256 = 'changed' WHERE doc_id = 'alpha.md'")
    requests = list(schedule.evaluate_tick(context).run_requests)
    stale = next(r for r in requests if r.partition_key == "alpha.md")
    assert {k.to_user_string() for k in stale.asset_selection} == {
        f"{kind}_{s}" for s in project.config_hashes for kind in ("chunks", "embeddings")
    }
