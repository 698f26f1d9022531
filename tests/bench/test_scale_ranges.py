"""bench/bench_scale.py's split of documents between runs and into range runs (bench_embedding_scaling
reuses both, so the two benches give each process the same documents in the same runs)."""

from tests.conftest import load_bench

bench_scale = load_bench("bench_scale")


def test_split_ranges_gives_contiguous_slices_differing_by_at_most_one():
    keys = [f"doc{n}" for n in range(7)]
    assert bench_scale.split_ranges(keys, 2) == [keys[:4], keys[4:]]
    assert bench_scale.split_ranges(keys, 3) == [keys[:3], keys[3:5], keys[5:]]
    assert bench_scale.split_ranges(keys[:1], 2) == [keys[:1]]  # never an empty range


def test_range_batches_are_consecutive_runs_of_at_most_per_run():
    keys = list(range(60))
    batches = bench_scale.range_batches(keys, bench_scale.PER_RUN)
    assert [len(b) for b in batches] == [25, 25, 10]
    assert [k for b in batches for k in b] == keys
    assert bench_scale.range_batches([], 25) == []
