"""The main job as a user runs it: `python -m orchestration.cli run`, twice, in a fresh instance."""

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def library_defaults(tmp_path) -> str:
    """A configuration file that sets nothing: the library defaults (a missing one is an error)."""
    path = tmp_path / "defaults.toml"
    path.write_text("", encoding="utf-8")
    return str(path)


def run_cli(tmp_path, docs_dir, *extra, expect=0):
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "CHUNKYARD_DB": str(tmp_path / "chunkyard.duckdb"),
        "CHUNKYARD_CONFIG": library_defaults(tmp_path),
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "run", "--docs", str(docs_dir), *extra],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == expect, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Full traces and Dagster's per-step error lines stay in the run's event log.
    for noise in ("Traceback", "Stack Trace", "Dependencies for step", "STEP_FAILURE", "Loading weights"):
        assert noise not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def figure(pattern, text):
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in output:\n{text}"
    return int(match.group(1))


def test_run_twice_then_force_embeds_nothing_new(tmp_path, docs_dir):
    (docs_dir / "empty.txt").write_bytes(b"")
    # A document failed in this run: exit code 1, one line naming file, stage and cause once.
    first = run_cli(tmp_path, docs_dir, expect=1)
    assert figure(r"new embeddings: (\d+)", first) > 0
    # Per-partition counts add up to the batch's: every vector in the fresh cache was new in this
    # run, embedded by the embeddings steps or already by semantic chunking (then a cache hit).
    assert figure(r"vectors from chunking: (\d+)", first) > 0
    assert (figure(r"new embeddings: (\d+)", first) + figure(r"vectors from chunking: (\d+)", first)
            == figure(r"cache size: (\d+)", first))
    assert "documents: 3 (1 error, 2 parsed)" in first
    failure_lines = [line for line in first.splitlines() if line.startswith("  empty.txt  [")]
    assert len(failure_lines) == 1 and re.fullmatch(r"  empty\.txt  \[(read|parse)\]  .*empty.*", failure_lines[0])
    assert "empty.txt: empty.txt" not in first
    assert "database: " in first and "elapsed: " in first
    assert re.search(r"chunks_recursive\.token_cap\s+2 passed\s+0 warn\s+0 failed", first), first
    # Not a terminal: plain progress lines, one per finished step, no control characters.
    assert re.search(r"run 1/1 embeddings_recursive: done \(3 documents\); overall [\d.]+/3 documents", first), first
    assert "\x1b" not in first
    # The bad document was re-run alone, so Dagster recorded its own failed run.
    assert "empty.txt alone: failed" in first

    # Unchanged folder (the bad file included): a no-op, exit 0.
    second = run_cli(tmp_path, docs_dir)
    assert "0 to process in 0 run(s)" in second
    assert figure(r"new embeddings: (\d+)", second) == 0
    assert "documents that failed before and did not change: 1" in second

    # --force retries everything, the bad file too, which fails again in this run: exit 1.
    forced = run_cli(tmp_path, docs_dir, "--force", expect=1)
    assert figure(r"new embeddings: (\d+)", forced) == 0
    assert figure(r"cache hits: (\d+)", forced) > 0

    # A run the UI's sensor started before this CLI took the lock still owns its document:
    # the CLI leaves it alone (and says so) instead of processing it a second time beside it.
    from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        sensor_run = instance.add_run(DagsterRun(
            job_name="ingest_job", status=DagsterRunStatus.STARTED, tags={"dagster/partition": "empty.txt"}))
    owned = run_cli(tmp_path, docs_dir, "--force")  # the bad file is not retried here: exit 0
    assert f"1 document(s) left to run(s) already queued or in progress: empty.txt ({sensor_run.run_id[:8]})" in owned
    assert "empty.txt alone" not in owned and "empty.txt  [" not in owned

    with duckdb.connect(str(tmp_path / "chunkyard.duckdb"), read_only=True) as con:
        bad = con.execute(
            """
            WITH parsed AS (SELECT doc_id, string_agg(text, '' ORDER BY page_num) AS text FROM pages GROUP BY doc_id)
            SELECT count(*) FROM chunks c JOIN parsed p USING (doc_id)
            WHERE c.verbatim AND c.text <> substr(p.text, c.char_start + 1, c.char_end - c.char_start)
            """
        ).fetchone()[0]
    assert bad == 0
