"""``embedding_threads``: torch's intra-op threads per run, "auto" sharing the cores among
the runs the instance lets run at once (lake mode), validated with the key named."""

import pytest

from orchestration.settings import Settings, load_settings, runs_sharing_cores
from resources.embedding import EmbeddingModelResource, available_cores, resolve_threads

LAKE = {"mode": "ducklake", "catalog": "duckdb:lake.ducklake", "data_path": "lake-data"}


@pytest.fixture
def torch_threads():
    """Torch's thread count is process-wide: put back whatever it was for the next test."""
    import torch

    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_auto_is_the_cores_divided_among_concurrent_runs():
    assert resolve_threads("auto", cores=8, concurrent_runs=1) == 8
    assert resolve_threads("auto", cores=8, concurrent_runs=2) == 4
    assert resolve_threads("auto", cores=8, concurrent_runs=3) == 2
    assert resolve_threads("auto", cores=2, concurrent_runs=4) == 1  # never 0
    assert resolve_threads("AUTO", cores=2, concurrent_runs=2) == 1
    assert resolve_threads(3, cores=2, concurrent_runs=2) == 3  # a number is taken as given
    assert resolve_threads("3", cores=2, concurrent_runs=2) == 3


@pytest.mark.parametrize("bad", ["many", "0", 0, -2, 1.5, True, "", "2 threads"])
def test_a_bad_value_is_refused_naming_the_key(tmp_path, monkeypatch, bad):
    config = tmp_path / "chunkyard.toml"
    value = f'"{bad}"' if isinstance(bad, str) else str(bad).lower()
    config.write_text(f"embedding_threads = {value}\n", encoding="utf-8")
    monkeypatch.delenv("CHUNKYARD_EMBEDDING_THREADS", raising=False)
    with pytest.raises(ValueError, match=r'embedding_threads: expected "auto" or a whole number of threads >= 1'):
        load_settings(config)
    with pytest.raises(ValueError, match="embedding_threads"):
        resolve_threads(bad, cores=2, concurrent_runs=1)


def test_the_file_and_the_environment_set_it(tmp_path, monkeypatch):
    config = tmp_path / "chunkyard.toml"
    config.write_text("embedding_threads = 3\n", encoding="utf-8")
    monkeypatch.delenv("CHUNKYARD_EMBEDDING_THREADS", raising=False)
    assert load_settings(config).embedding_threads == 3
    (tmp_path / "empty.toml").write_text("")
    assert load_settings(tmp_path / "empty.toml").embedding_threads == "auto"
    monkeypatch.setenv("CHUNKYARD_EMBEDDING_THREADS", "1")
    assert load_settings(config).embedding_threads == 1  # the environment wins, as for the other keys
    monkeypatch.setenv("CHUNKYARD_EMBEDDING_THREADS", "lots")
    with pytest.raises(ValueError, match="embedding_threads"):
        load_settings(config)


def test_only_lake_mode_shares_the_cores_among_the_instances_concurrent_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lake = Settings(store=LAKE)
    assert runs_sharing_cores(Settings(), {"CHUNKYARD_MAX_CONCURRENT_RUNS": "4"}) == 1  # embedded: one run at a time
    assert runs_sharing_cores(lake, {"CHUNKYARD_MAX_CONCURRENT_RUNS": "4"}) == 4
    assert runs_sharing_cores(lake, {}) == 1
    with pytest.raises(ValueError, match=r"CHUNKYARD_MAX_CONCURRENT_RUNS='two'"):
        runs_sharing_cores(lake, {"CHUNKYARD_MAX_CONCURRENT_RUNS": "two"})
    with pytest.raises(ValueError, match=r"CHUNKYARD_MAX_CONCURRENT_RUNS='0'"):
        runs_sharing_cores(lake, {"CHUNKYARD_MAX_CONCURRENT_RUNS": "0"})


def test_the_project_gives_the_resource_the_setting_and_the_instances_run_limit(tmp_path, monkeypatch):
    from orchestration.definitions import build_project

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHUNKYARD_MAX_CONCURRENT_RUNS", "2")
    lake = build_project(Settings(store=LAKE)).defs.resources["embedding"]
    assert (lake.threads, lake.concurrent_runs) == ("auto", 2)
    assert lake.resolved_threads == max(1, available_cores() // 2)
    embedded = build_project(Settings(embedding_threads=3)).defs.resources["embedding"]
    assert (embedded.threads, embedded.concurrent_runs, embedded.resolved_threads) == ("3", 1, 3)
    assert build_project(Settings()).defs.resources["embedding"].resolved_threads == available_cores()


@pytest.mark.model
def test_the_setting_reaches_torch_inside_the_resource(torch_threads):
    """What a step sees: after ``get_embedder()`` torch runs on the configured threads, whatever
    the process had before (the model is loaded once; the count is set on every call)."""
    from dagster import asset, materialize

    seen = {}

    @asset
    def threads_seen(embedding: EmbeddingModelResource) -> None:
        embedder = embedding.get_embedder()
        seen["threads"] = torch_threads.get_num_threads()
        seen["vectors"] = embedder.embed(["one text", "another text"]).shape

    for threads, concurrent_runs, expected in (("1", 1, 1), ("2", 1, 2), ("auto", 2, max(1, available_cores() // 2))):
        torch_threads.set_num_threads(5)  # something else in the process changed it
        resource = EmbeddingModelResource(threads=threads, concurrent_runs=concurrent_runs)
        assert materialize([threads_seen], resources={"embedding": resource}).success
        assert seen["threads"] == expected, (threads, concurrent_runs)
        assert seen["vectors"][0] == 2


def test_an_unknown_precision_is_refused_when_the_settings_load(tmp_path):
    config = tmp_path / "chunkyard.toml"
    config.write_text('embedding_precision = "fp8"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"embedding_precision: 'fp8' is not one of auto, float32, bfloat16, int8"):
        load_settings(config)
    config.write_text('embedding_precision = "int8"\n', encoding="utf-8")
    assert load_settings(config).embedding_precision == "int8"
