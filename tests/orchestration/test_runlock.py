"""One CLI ingest per Dagster instance (issue 12.5), with real processes."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestration.runlock import RunLockHeld, lock_holder, run_lock

REPO_ROOT = Path(__file__).resolve().parents[2]


def hold(home: Path) -> subprocess.Popen:
    code = f"""
        import sys
        from orchestration.runlock import run_lock
        with run_lock({str(home)!r}):
            print("ready", flush=True)
            sys.stdin.readline()
    """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path):
    home = tmp_path / "home"  # does not exist yet: the lock comes before the instance
    first = hold(home)
    try:
        assert lock_holder(home) == first.pid
        with pytest.raises(RunLockHeld, match=rf"process {first.pid}\) is using the Dagster instance"):
            with run_lock(home):
                pass
    finally:
        first.communicate("\n", timeout=60)
    assert lock_holder(home) is None
    with run_lock(home):
        assert lock_holder(home) == os.getpid()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    first = hold(tmp_path)
    first.kill()
    first.wait(timeout=60)
    with run_lock(tmp_path):
        pass


def test_a_second_cli_run_stops_before_opening_the_instance(tmp_path, docs_dir):
    home = tmp_path / "home"
    first = hold(home)
    env = {**os.environ, "DAGSTER_HOME": str(home), "CHUNKYARD_DB": str(tmp_path / "chunkyard.duckdb"),
           "CHUNKYARD_CONFIG": str(tmp_path / "absent.toml")}
    try:
        second = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--docs", str(docs_dir)],
                                cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        first.communicate("\n", timeout=60)
    assert second.returncode == 3, second.stdout + second.stderr
    assert second.stderr.strip().splitlines() == [
        f"chunkyard run: another chunkyard run (process {first.pid}) is using the Dagster instance {home}; "
        "wait for it to finish, then run again (it processes only what is left)"
    ]
    # Nothing was created or processed: no instance storage, no database.
    assert sorted(p.name for p in home.iterdir()) == ["chunkyard-run.lock", "dagster.yaml"]
    assert not (tmp_path / "chunkyard.duckdb").exists()


def test_a_cli_run_on_a_second_folder_stops_before_writing(tmp_path, docs_dir):
    """Issue 11.7: the database holds another folder's documents; nothing of either is touched."""
    from resources.store import ChunkStore

    db = tmp_path / "chunkyard.duckdb"
    first_root = tmp_path / "first"
    store = ChunkStore(db)
    store.record_read("alpha.md", str(first_root), "alpha.md", "sha-first", 5)
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "CHUNKYARD_DB": str(db),
           "CHUNKYARD_CONFIG": str(tmp_path / "absent.toml")}
    second = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--docs", str(docs_dir)],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 3, second.stdout + second.stderr
    [line] = second.stderr.strip().splitlines()
    assert line.startswith(f"chunkyard run: {db} holds the documents of {first_root}; it will not take {docs_dir}")
    assert f"CHUNKYARD_DB=data/other.duckdb make run DOCS={docs_dir}" in line
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT doc_id, source_root, sha256 FROM documents").fetchall() == [
            ("alpha.md", str(first_root), "sha-first")]


# -- runs the UI's sensors started before the CLI took the lock own their documents ---------


def test_documents_of_run_reads_one_partition_or_an_inclusive_range():
    from orchestration.runlock import documents_of_run

    ordered = ["a.md", "b.md", "c.md", "d.md"]
    assert documents_of_run({"dagster/partition": "c.md"}, ordered) == {"c.md"}
    assert documents_of_run({"dagster/asset_partition_range_start": "b.md",
                             "dagster/asset_partition_range_end": "d.md"}, ordered) == {"b.md", "c.md", "d.md"}
    assert documents_of_run({}, ordered) == set()  # unpartitioned (strategy_stats, retrieval_eval)
    # A range whose start this folder no longer lists: only the ends it still lists.
    assert documents_of_run({"dagster/asset_partition_range_start": "gone.md",
                             "dagster/asset_partition_range_end": "d.md"}, ordered) == {"d.md"}


def test_only_queued_or_running_runs_own_documents(instance):
    from dagster import DagsterRun, DagsterRunStatus

    from orchestration.runlock import documents_in_flight

    ordered = ["a.md", "b.md", "c.md", "d.md"]
    runs = {
        # (a QUEUED run needs a code-location origin to be stored; NOT_STARTED waits the same way)
        "waiting": (DagsterRunStatus.NOT_STARTED, {"dagster/partition": "a.md"}),
        "started": (DagsterRunStatus.STARTED, {"dagster/asset_partition_range_start": "c.md",
                                               "dagster/asset_partition_range_end": "d.md"}),
        "done": (DagsterRunStatus.SUCCESS, {"dagster/partition": "b.md"}),
        "failed": (DagsterRunStatus.FAILURE, {"dagster/partition": "b.md"}),
    }
    ids = {}
    for name, (status, tags) in runs.items():
        run = instance.add_run(DagsterRun(job_name="ingest_job", status=status, tags=tags))
        ids[name] = run.run_id
    owners = documents_in_flight(instance, ordered)
    assert owners == {"a.md": ids["waiting"], "c.md": ids["started"], "d.md": ids["started"]}
