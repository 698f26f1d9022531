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
