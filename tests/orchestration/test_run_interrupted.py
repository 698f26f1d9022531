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
        os.kill(os.getpid(), getattr(signal, os.environ["STOP_WITH"]))
        time.sleep(30)  # the signal interrupts this
    return real_split(text, *args, **kwargs)

recursive.split_recursive = split_recursive

if __name__ == "__main__":  # the parse worker's processes import this module too
    from orchestration.cli import main
    sys.exit(main(sys.argv[1:]))
"""


def folder(tmp_path):
    """Three documents, the first stopped while ``recursive`` chunks it; the environment to run them."""
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
    return db, env, ["run", "--docs", str(docs), "--batch", "1", "--progress", "plain"]


def stopped_run(tmp_path, env, args, signal_name):
    return subprocess.run([sys.executable, str(tmp_path / "driver.py"), *args], cwd=REPO_ROOT,
                          env={**env, "STOP_WITH": signal_name}, capture_output=True, text=True, timeout=600)


def test_a_run_stopped_by_sigterm_starts_no_other_and_the_next_run_finishes(tmp_path):
    db, env, args = folder(tmp_path)
    stopped = stopped_run(tmp_path, env, args, "SIGTERM")
    assert stopped.returncode == 130, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert "chunkyard run: interrupted: run " in stopped.stderr
    assert "was stopped by SIGINT or SIGTERM; no other run was started" in stopped.stderr
    assert "The next `chunkyard run` processes what is left." in stopped.stderr
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


def test_a_run_killed_outright_does_not_keep_its_documents_from_the_next_run(tmp_path):
    # SIGKILL: no handler runs, so its Dagster run stays "started" in the instance for ever.
    db, env, args = folder(tmp_path)
    killed = stopped_run(tmp_path, env, args, "SIGKILL")
    assert killed.returncode == -9
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0

    # The next run holds the lock, so that run's process is gone: it is marked failed and its
    # document processed (before, a.txt was "left to run(s) already queued or in progress").
    finished = subprocess.run([sys.executable, "-m", "orchestration.cli", *args], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "1 run(s) of an earlier chunkyard run that ended without finishing them marked failed" in finished.stdout
    assert "left to run(s) already queued or in progress" not in finished.stdout
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT doc_id) FROM current_embeddings").fetchone()[0] == 3


def test_only_runs_of_a_dead_chunkyard_run_of_this_host_are_marked_abandoned(tmp_path):
    from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

    from orchestration.runlock import CLI_PROCESS_TAG, cli_process, documents_in_flight, fail_abandoned_runs

    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now
    host = cli_process().rpartition(":")[0]
    dead, live = f"{host}:{gone.pid}", cli_process()

    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        def add(status, doc, **tags):
            return instance.add_run(DagsterRun(job_name="ingest_job", status=status,
                                               tags={**tags, "dagster/partition": doc})).run_id

        started = add(DagsterRunStatus.STARTED, "a.txt", **{CLI_PROCESS_TAG: dead})
        queued = add(DagsterRunStatus.NOT_STARTED, "b.txt", **{CLI_PROCESS_TAG: dead})
        done = add(DagsterRunStatus.SUCCESS, "c.txt", **{CLI_PROCESS_TAG: dead})
        sensor = add(DagsterRunStatus.STARTED, "d.txt")
        alive = add(DagsterRunStatus.STARTED, "e.txt", **{CLI_PROCESS_TAG: live})
        elsewhere = add(DagsterRunStatus.STARTED, "f.txt", **{CLI_PROCESS_TAG: f"another-host:{gone.pid}"})
        again = add(DagsterRunStatus.NOT_STARTED, "g.txt", **{CLI_PROCESS_TAG: dead, "dagster/parent_run_id": started})
        assert sorted(fail_abandoned_runs(instance)) == sorted([started, queued])
        status = {r.run_id: r.status for r in instance.get_runs()}
        assert status[started] == status[queued] == DagsterRunStatus.FAILURE
        assert status[done] == DagsterRunStatus.SUCCESS and status[again] == DagsterRunStatus.NOT_STARTED
        assert status[sensor] == status[alive] == status[elsewhere] == DagsterRunStatus.STARTED
        assert set(documents_in_flight(instance, [f"{c}.txt" for c in "abcdefg"])) == {"d.txt", "e.txt", "f.txt",
                                                                                       "g.txt"}


def test_the_watch_sees_a_signal_another_handler_swallowed():
    import signal

    from orchestration.cli import InterruptWatch

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # as Dagster's handler does during a run
    try:
        with InterruptWatch() as watch:
            assert not watch.seen()
            os.kill(os.getpid(), signal.SIGTERM)
            assert watch.seen() and watch.seen()  # stays seen
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_is_ctrl_c_from_the_start_of_every_command(monkeypatch):
    import signal

    from orchestration import cli

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert cli.main(["strategies"]) == 0
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
