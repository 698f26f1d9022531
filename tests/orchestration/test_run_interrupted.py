"""`chunkyard run` stopped by SIGTERM: no further run starts, it exits 130 saying what is left,
the stopped step stored nothing, and the next `run` finishes the job.

Dagster turns the signal into a failed run (a ``DagsterExecutionInterruptedError`` step failure)
instead of raising, so before this the command went on with the next batch and the
``strategy_stats`` refresh, and exited 2 as if a bug had failed the run. A real SIGTERM is sent
from inside a real step: the driver below makes ``recursive`` signal its own process on one
document, in a subprocess so the signal handlers are that process's alone.
"""

import os
import subprocess
import sys
from pathlib import Path

import duckdb

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
enabled_strategies = ["recursive"]
[strategies.recursive]
chunk_token_size = 40
chunk_overlap_token_size = 8
"""
DRIVER = """
import os, signal, sys, time
import chunking.strategies.recursive as recursive

real_split = recursive.split_recursive

def split_recursive(text, *args, **kwargs):
    if "STOP HERE" in text:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the signal interrupts this
    return real_split(text, *args, **kwargs)

recursive.split_recursive = split_recursive

if __name__ == "__main__":  # the parse worker's processes import this module too
    from orchestration.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def test_a_run_stopped_by_sigterm_starts_no_other_and_the_next_run_finishes(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("The first document. STOP HERE while it is being chunked.", encoding="utf-8")
    (docs / "b.txt").write_text("The second document, which no run reaches.", encoding="utf-8")
    (docs / "c.txt").write_text("The third document, which no run reaches either.", encoding="utf-8")
    (tmp_path / "chunkyard.toml").write_text(CONFIG)
    (tmp_path / "driver.py").write_text(DRIVER)
    db = tmp_path / "chunkyard.duckdb"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "CHUNKYARD_DB": str(db),
           "CHUNKYARD_CONFIG": str(tmp_path / "chunkyard.toml"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": str(REPO_ROOT)}
    args = ["run", "--docs", str(docs), "--batch", "1", "--progress", "plain"]

    stopped = subprocess.run([sys.executable, str(tmp_path / "driver.py"), *args], cwd=REPO_ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    assert stopped.returncode == 130, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert "chunkyard run: interrupted: run " in stopped.stderr
    assert "was stopped by SIGINT or SIGTERM; no other run was started" in stopped.stderr
    assert "(3 of 3 documents were in this run or after it)" in stopped.stderr
    assert "run 2/3" not in stopped.stdout and "strategy_stats" not in stopped.stdout
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT doc_id FROM documents").fetchall() == [("a.txt",)]  # parsed before the stop
        assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0  # the stopped step: nothing

    finished = subprocess.run([sys.executable, "-m", "orchestration.cli", *args], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT DISTINCT doc_id FROM current_chunks ORDER BY 1").fetchall() == [
            ("a.txt",), ("b.txt",), ("c.txt",)]
        assert con.execute("SELECT count(DISTINCT doc_id) FROM current_embeddings").fetchone()[0] == 3
