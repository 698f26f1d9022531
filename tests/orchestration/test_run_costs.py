"""`chunkyard run` on a real Dagster instance: the whole-pipeline cost it records and prints,
`chunkyard status --costs`, and strategy_stats refreshed at the end of a run that changed the store.

Two strategies keep it short; every assertion is about rows, metadata and printed lines,
never about how fast anything is.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
STRATEGIES = ("recursive", "token")
STAGES = ["read", "parse", *(f"chunk {s}" for s in STRATEGIES), *(f"embed {s}" for s in STRATEGIES)]
CONFIG = f"""
enabled_strategies = {list(STRATEGIES)!r}
[strategies.recursive]
chunk_token_size = 40
chunk_overlap_token_size = 8
"""


@pytest.fixture
def env(tmp_path):
    (tmp_path / "chunkyard.toml").write_text(CONFIG.replace("'", '"'))
    return {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "CHUNKYARD_DB": str(tmp_path / "chunkyard.duckdb"),
        "CHUNKYARD_CONFIG": str(tmp_path / "chunkyard.toml"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def chunkyard(env, *args, expect=0) -> str:
    proc = subprocess.run([sys.executable, "-m", "orchestration.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == expect, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def cost_lines(output: str) -> dict[str, list[str]]:
    """The printed cost table: stage -> its cells (documents, total, median, max, store, model)."""
    lines = output.split("cost per stage", 1)[1].splitlines()[3:]
    table = {}
    for line in lines:
        match = re.match(r"\s+((?:chunk|embed) \S+|read|parse)\s+(.*)$", line)
        if match:
            table[match.group(1)] = match.group(2).split()
    return table


def stats_materializations(home: Path):
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(AssetKey("strategy_stats"), limit=100, ascending=False).records
        return [(r.run_id, r.asset_materialization.metadata) for r in records]  # newest first


def partition_metadata(home: Path, asset: str, doc: str):
    from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[doc]), limit=1, ascending=False).records
        return records[0].asset_materialization.metadata


def test_run_records_and_prints_seconds_per_document_per_stage(tmp_path, docs_dir, env):
    out = chunkyard(env, "run", "--docs", str(docs_dir), "--progress", "none")
    docs = ["alpha.md", "sub/beta.txt"]

    with duckdb.connect(env["CHUNKYARD_DB"], read_only=True) as con:
        rows = con.execute(
            "SELECT ingest_id, run_id, doc_id, stage, strategy, seconds, store_seconds, model_seconds, "
            "new_embeddings FROM stage_costs"
        ).fetchall()
    assert len({r[0] for r in rows}) == 1  # one `chunkyard run`, one ingest, whatever its runs
    labelled = {(r[2], f"{r[3]} {r[4]}".strip()): r for r in rows}
    assert sorted(labelled) == sorted((d, s) for d in docs for s in STAGES)  # one row per document per stage
    assert all(r[5] > 0 and 0 <= r[6] <= r[5] for r in rows), rows
    embeds = [r for r in rows if r[3] == "embed"]
    # A fresh cache: the model embedded every document's texts, and its time is shared out among them.
    assert all(r[7] > 0 and r[8] > 0 and r[7] <= r[5] for r in embeds), embeds

    table = cost_lines(out)
    assert list(table) == STAGES, out  # every stage, in pipeline order
    for stage, cells in table.items():
        documents, total, median, high = int(cells[0]), *map(float, cells[1:4])
        assert documents == 2 and total > 0 and 0 < median <= high <= total, (stage, cells)
    assert all(table[f"embed {s}"][5] != "-" and float(table[f"embed {s}"][5]) > 0 for s in STRATEGIES)

    # The UI plots it: each partition's materialization carries that document's own seconds.
    home = tmp_path / "home"
    for asset, stage in (("parsed_documents", "parse"), ("chunks_recursive", "chunk recursive"),
                         ("embeddings_token", "embed token")):
        for doc in docs:
            seconds = partition_metadata(home, asset, doc)["seconds"].value
            assert seconds == pytest.approx(labelled[(doc, stage)][5], abs=1e-3), (asset, doc)

    # A second, forced run: `status --costs` compares it with the first, stage by stage.
    chunkyard(env, "run", "--docs", str(docs_dir), "--progress", "none", "--force")
    status = chunkyard(env, "status", "--costs")
    assert "against the median of the 1 ingest(s) before it" in status, status
    for stage in STAGES:
        assert re.search(rf"^{re.escape(stage)}\s+2\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+", status, re.M), status


def test_run_refreshes_strategy_stats_only_when_the_store_changed(tmp_path, docs_dir, env):
    home = tmp_path / "home"
    first = chunkyard(env, "run", "--docs", str(docs_dir), "--progress", "none")
    assert re.search(r"run \w+: strategy_stats: ok", first), first
    stats = stats_materializations(home)
    assert len(stats) == 1
    assert stats[0][1]["recursive/documents"].value == 2

    # Unchanged folder: nothing ran, the statistics still describe the store; no new run.
    unchanged = chunkyard(env, "run", "--docs", str(docs_dir), "--progress", "none")
    assert "0 to process in 0 run(s)" in unchanged and "strategy_stats" not in unchanged
    assert len(stats_materializations(home)) == 1

    # A new document: the statistics a person sees after the run are those of the new store.
    (docs_dir / "gamma.md").write_text("# Gamma\n\nA third document about lighthouses and their keepers.\n")
    chunkyard(env, "run", "--docs", str(docs_dir), "--progress", "none")
    stats = stats_materializations(home)
    assert len(stats) == 2
    latest = stats[0][1]  # newest first
    with duckdb.connect(env["CHUNKYARD_DB"], read_only=True) as con:
        stored = con.execute("SELECT count(*) FROM current_chunks WHERE strategy = 'recursive'").fetchone()[0]
    assert latest["recursive/documents"].value == 3 and latest["recursive/chunks"].value == stored

    # A deleted document changes the store too.
    (docs_dir / "gamma.md").unlink()
    chunkyard(env, "run", "--docs", str(docs_dir), "--progress", "none")
    assert len(stats_materializations(home)) == 3


def test_share_out_splits_a_batch_cost_by_weight_and_keeps_the_total():
    from assets.costs import share_out

    shares = share_out(3.0, {"a": 100, "b": 200, "c": 0})
    assert shares == pytest.approx({"a": 1.0, "b": 2.0, "c": 0.0})
    assert share_out(3.0, {"a": 0, "b": 0}) == pytest.approx({"a": 1.5, "b": 1.5})  # nothing new: equal shares
    assert share_out(1.0, {}) == {}
