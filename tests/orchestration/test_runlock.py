"""One CLI ingest per Dagster instance (issue 12.5), with real processes."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestration.runlock import RunLockHeld, lock_holder, run_lock

REPO_ROOT = Path(__file__).resolve().parents[2]


def library_defaults(tmp_path) -> str:
    """A configuration file that sets nothing: the library defaults (a missing one is an error)."""
    path = tmp_path / "defaults.toml"
    path.write_text("", encoding="utf-8")
    return str(path)


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
           "CHUNKYARD_CONFIG": library_defaults(tmp_path)}
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
           "CHUNKYARD_CONFIG": library_defaults(tmp_path)}
    second = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--docs", str(docs_dir)],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 3, second.stdout + second.stderr
    [line] = second.stderr.strip().splitlines()
    assert line.startswith(f"chunkyard run: {db} holds the documents of {first_root}; it will not take {docs_dir}")
    name = docs_dir.name
    assert f"CHUNKYARD_DB=data/{name}/chunkyard.duckdb DAGSTER_HOME=.dagster-{name} make run DOCS={docs_dir}" in line
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT doc_id, source_root, sha256 FROM documents").fetchall() == [
            ("alpha.md", str(first_root), "sha-first")]


def test_a_second_database_on_the_same_instance_stops_before_writing(tmp_path, docs_dir):
    """Two databases on one Dagster instance would share document partitions: each folder's run
    deleted the other's partitions and ran its documents (found by a README audit, session 27).
    The second database's run stops before its database is created, naming DAGSTER_HOME."""
    import shutil

    home, data = tmp_path / "home", tmp_path / "data"
    env = {**os.environ, "DAGSTER_HOME": str(home), "CHUNKYARD_CONFIG": library_defaults(tmp_path)}
    first = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--docs", str(docs_dir)],
                           cwd=REPO_ROOT, env={**env, "CHUNKYARD_DB": str(data / "chunkyard.duckdb")},
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    other_docs = tmp_path / "two"
    shutil.copytree(docs_dir, other_docs)
    other_db = tmp_path / "elsewhere" / "other.duckdb"  # its own folder: only the instance is shared
    second = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--docs", str(other_docs)],
                            cwd=REPO_ROOT, env={**env, "CHUNKYARD_DB": str(other_db)},
                            capture_output=True, text=True, timeout=600)
    assert second.returncode == 3, second.stdout + second.stderr
    [line] = second.stderr.strip().splitlines()
    assert line.startswith(f"chunkyard run: the Dagster instance {home} (DAGSTER_HOME) keeps the runs and document "
                           f"partitions of {data / 'chunkyard.duckdb'}; it will not take {other_db} too")
    assert f"DAGSTER_HOME={tmp_path / '.dagster-other'} (or delete {home / 'chunkyard-database'} if" in line
    assert not other_db.exists()


def test_instance_and_output_folders_are_claimed_by_one_database(tmp_path):
    from resources.ownership import claim_instance_and_outputs, ownership_conflict, side_output_dirs
    from resources.store import SourceRootConflict

    home, data = tmp_path / "home", tmp_path / "data"
    first, second = data / "chunkyard.duckdb", data / "other.duckdb"
    outputs = side_output_dirs(first, data / "parsed")
    assert outputs == [data.resolve()]  # the default sidecar folder is inside the database's own
    assert side_output_dirs(first, tmp_path / "sidecars") == [data.resolve(), (tmp_path / "sidecars").resolve()]
    claim_instance_and_outputs(home, first, outputs)
    first.parent.mkdir(parents=True, exist_ok=True)
    first.write_bytes(b"")  # the owner exists
    claim_instance_and_outputs(home, first, outputs)  # its own claim again: fine
    # Another database in the same folder, on its own instance: the side outputs refuse it.
    message = ownership_conflict(tmp_path / "home2", second, side_output_dirs(second, data / "parsed"))
    assert message.startswith(f"{data.resolve()} holds the side outputs (sidecars, viewer pages, statistics) of "
                              f"{first.resolve()}; it will not take {second.resolve()}'s too")
    assert f"CHUNKYARD_DB={data.resolve() / 'other' / 'other.duckdb'}" in message
    with pytest.raises(SourceRootConflict, match="DAGSTER_HOME"):
        claim_instance_and_outputs(home, tmp_path / "own" / "other.duckdb", [tmp_path / "own"])
    assert not (tmp_path / "own").exists(), "a refused claim writes no marker"
    # The same file under another path (a symlink) is the same owner.
    link = tmp_path / "link"
    link.symlink_to(data, target_is_directory=True)
    assert ownership_conflict(home, link / "chunkyard.duckdb", [data]) is None
    # A sidecar folder set in the config and held by another database: the advice names sidecar_dir.
    (tmp_path / "sidecars").mkdir()
    (tmp_path / "sidecars" / ".chunkyard-database").write_text(f"{first.resolve()}\n")
    message = ownership_conflict(tmp_path / "home3", tmp_path / "b" / "b.duckdb",
                                 side_output_dirs(tmp_path / "b" / "b.duckdb", tmp_path / "sidecars"))
    assert "set this database's sidecar_dir (chunkyard.toml) to a folder of its own" in message
    # Once the owner is deleted, its claims are taken over.
    first.unlink()
    claim_instance_and_outputs(home, second, side_output_dirs(second, data / "parsed"))
    assert (home / "chunkyard-database").read_text().strip() == str(second.resolve())
    assert (data / ".chunkyard-database").read_text().strip() == str(second.resolve())


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
