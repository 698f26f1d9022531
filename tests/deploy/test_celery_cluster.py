"""deploy/ on this machine: PostgreSQL + a celery broker from packages, two celery workers.

One purposeful, slow test (~3 min): ``chunkyard run`` over examples/docs with
``executor = "celery"``, Dagster's instance in PostgreSQL (deploy/dagster.yaml) and the store
a DuckLake (catalog in the same PostgreSQL, data files in object storage: an S3-compatible
server started from a package, moto's, reached through DuckDB's httpfs with an endpoint and
credentials from the environment), exactly as deploy/README.md tells a user. It proves that

* every step of every run executed on a celery worker, and steps ran on both workers
  (the "Celery worker" of each step's engine event in the run's event log);
* every document's chunks landed once per strategy in the one lake (no duplicate chunk, indexes 0..n-1 with
  no gap, one embedding per chunk), as Parquet files in the bucket, and every run succeeded;
* nothing the cluster started outlives it (worker processes, PostgreSQL, the S3 server).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cluster_checks import assert_every_document_once, celery_steps, cluster_instance, read_lake, still_running


REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "examples" / "docs"


@pytest.mark.e2e
@pytest.mark.model
def test_ingest_runs_on_two_celery_workers(tmp_path, cluster_root, monkeypatch):
    from deploy.local_cluster import LocalCluster

    run_env = {"CHUNKYARD_DB": str(tmp_path / "outputs" / "chunkyard.duckdb"), "CHUNKYARD_DOCS": str(DOCS)}
    cluster = LocalCluster(cluster_root, workers=2, extra_env=run_env, s3=True)
    with cluster:
        worker_names = cluster.wait_for_workers()
        postgres_pid = cluster.server.get_pid()
        s3_pid = cluster.s3_server.proc.pid
        assert cluster.env["CHUNKYARD_STORE_DATA_PATH"] == "s3://chunkyard/chunkyard"
        worker_pids = [proc.pid for proc in cluster.worker_procs]
        done = subprocess.run(
            [sys.executable, "-m", "orchestration.cli", "run", "--docs", str(DOCS), "--progress", "none"],
            cwd=REPO_ROOT, env=cluster.env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        # The run history is in the cluster's PostgreSQL, read here as any machine would.
        with cluster_instance(cluster.env, monkeypatch) as instance:
            assert type(instance.run_storage).__name__ == "PooledPostgresRunStorage"  # deploy/dagster.yaml
            # The queue's limit comes from the environment (CHUNKYARD_MAX_CONCURRENT_RUNS).
            assert instance.run_coordinator.get_run_queue_config().max_concurrent_runs == 2
            runs = list(instance.get_runs())
            workers, succeeded = celery_steps(instance, runs)

        # Every document's chunks landed once in the lake, for every strategy, one embedding per chunk.
        lake = read_lake(cluster.env, tmp_path)
        files = [key for key in cluster.s3_server.keys("chunkyard/") if key.endswith(".parquet")]

    from dagster import DagsterRunStatus

    assert runs and all(run.status == DagsterRunStatus.SUCCESS for run in runs)
    assert succeeded, "no step succeeded"
    missing = succeeded - set(workers)
    assert not missing, f"steps that did not run on a celery worker: {sorted(missing)[:5]}"
    assert set(workers.values()) == set(worker_names), (
        f"steps ran on {sorted(set(workers.values()))}, workers were {worker_names}")

    expected_docs = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*") if p.is_file()}
    assert_every_document_once(lake, expected_docs)
    assert any(key.startswith("chunkyard/main/chunks/") for key in files), files
    assert any(key.startswith("chunkyard/main/embedding_vectors/") for key in files), files

    # Nothing started by the cluster is left running.
    assert not still_running(worker_pids + [postgres_pid, s3_pid])
