"""Strategy statistics from the store: the SQL (resources/stats.py), the rendering,
and the ``strategy_stats`` asset on a real run."""

import duckdb
import pytest
from dagster import AssetKey, materialize

from assets.stats import histogram_bin_width, histogram_svg, stats_table
from orchestration.definitions import build_project
from resources.stats import over_limit_counts, strategy_stats, token_histogram
from tests.assets.test_pipeline import register, run_range


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute("CREATE TABLE chunks (doc_id VARCHAR, strategy VARCHAR, token_count INTEGER, text VARCHAR)")
    rows = [("a", "one", n, "x" * n) for n in range(1, 101)]  # 1..100 tokens
    rows += [("a", "two", 10, "ten"), ("b", "two", 30, "thirty"), ("b", "two", 300, "long")]
    con.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?)", rows)
    yield con
    con.close()


def test_strategy_stats_are_nearest_rank_percentiles_per_strategy(con):
    one, two = strategy_stats(con)
    assert (one.strategy, one.chunks, one.documents) == ("one", 100, 1)
    assert (one.p10, one.p50, one.p90, one.p99, one.max) == (10, 50, 90, 99, 100)
    assert one.mean == 50.5
    assert (two.strategy, two.chunks, two.documents, two.max) == ("two", 3, 2, 300)
    assert two.p50 == 30


def test_token_histogram_counts_each_chunk_once_in_its_bin(con):
    hist = token_histogram(con, 25)
    assert sum(hist["one"].values()) == 100
    assert hist["one"] == {0: 24, 25: 25, 50: 25, 75: 25, 100: 1}
    assert hist["two"] == {0: 1, 25: 1, 300: 1}
    with pytest.raises(ValueError):
        token_histogram(con, 0)


def test_over_limit_counts_use_the_given_token_counter():
    pairs = iter([("one", "aaaa"), ("one", "aa"), ("two", "aaaaaa")])
    assert over_limit_counts(pairs, len, 3) == {"one": (1, 2), "two": (1, 1)}


def test_rendering_shows_every_strategy():
    assert histogram_bin_width(99) == 5 and histogram_bin_width(1000) == 100 and histogram_bin_width(0) == 1
    svg = histogram_svg({"one": {0: 3, 10: 1}, "two": {20: 2}}, 10)
    assert svg.startswith("<svg") and svg.count("<rect") == 1 + 3 and "one" in svg and "two" in svg


def test_strategy_stats_asset_describes_the_store(instance, settings):
    project = build_project(settings)
    register(instance, "alpha.md", "sub/beta.txt")
    assert run_range(project, instance, "alpha.md", "sub/beta.txt").success
    stats_def = project.defs.get_assets_def(AssetKey("strategy_stats"))
    result = materialize([stats_def], instance=instance, resources=project.defs.resources)
    assert result.success
    metadata = {k: v.value for k, v in result.asset_materializations_for_node("strategy_stats")[0].metadata.items()}

    with duckdb.connect(settings.db_path, read_only=True) as db:
        counts = dict(db.execute("SELECT strategy, count(*) FROM chunks GROUP BY strategy").fetchall())
        maxima = dict(db.execute("SELECT strategy, max(token_count) FROM chunks GROUP BY strategy").fetchall())
    assert set(counts) == set(project.config_hashes)
    for strategy, n in counts.items():
        assert metadata[f"{strategy}/chunks"] == n
        assert metadata[f"{strategy}/tokens_max"] == maxima[strategy]
        assert metadata[f"{strategy}/documents"] == 2
        assert 0.0 <= metadata[f"{strategy}/over_model_max_share"] <= 1.0
        assert f"| `{strategy}` | {n} | 2 |" in metadata["strategies"]
    assert metadata["dagster/row_count"] == sum(counts.values())
    assert metadata["token_histogram"].startswith("![token length histogram](data:image/svg+xml;base64,")
    with open(metadata["token_histogram_file"], encoding="utf-8") as handle:
        svg = handle.read()
    assert svg.startswith("<svg") and all(strategy in svg for strategy in counts)
