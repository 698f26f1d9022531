"""deploy/ on this machine as several: PostgreSQL, an object store and two celery workers, each
worker on a host of its own.

One purposeful, slow test (~2 min): ``chunkyard run`` over examples/docs with
``executor = "celery"``, Dagster's instance in PostgreSQL (deploy/dagster.yaml) and the store
a DuckLake (catalog in the same PostgreSQL, data files in object storage: an S3-compatible
server started from a package, moto's, reached through DuckDB's httpfs with an endpoint and
credentials from the environment), exactly as deploy/README.md tells a user. With root
(``local_cluster.py --hosts``, deploy/hosts.py) each worker, and the ``chunkyard run``
process, is a host of its own: a network namespace with its own address and host name,
reaching PostgreSQL (password required) and the object store by the names ``db`` and
``objects`` over TCP, with its own DAGSTER_HOME and TMPDIR, as on other machines. Without
root it falls back to processes on this host (CI=true refuses the fallback: CI runs as root).
Its second case, ``containers``, runs the workers as containers of an image built from
deploy/Dockerfile (``--image``): only where Docker runs and ``CHUNKYARD_TEST_IMAGE`` names the
image (not in CI, which has no Docker), otherwise it skips and says so.

It proves that

* every step of every run executed on a celery worker, and steps ran on both workers
  (the "Celery worker" of each step's engine event in the run's event log), which are
  ``chunkyard-w1@worker-1`` and ``chunkyard-w2@worker-2`` with hosts;
* with hosts, each worker host and the run's host connected to PostgreSQL over TCP from
  its own address, the workers to Dagster's storage, the broker and the lake's catalog
  (PostgreSQL's connection log), and the run's summary names the lake without its password;
* every document's chunks landed once per strategy in the one lake (no duplicate chunk,
  indexes 0..n-1 with no gap, one embedding per chunk), as Parquet files in the bucket,
  and every run succeeded;
* nothing the cluster started outlives it (worker processes, PostgreSQL, the S3 server,
  the hosts' namespaces and network).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_checks import (assert_every_document_once, assert_workers_connected_from_their_hosts, celery_steps,
                            cluster_instance, read_lake, still_running, workers_on_hosts)


REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "examples" / "docs"


@pytest.mark.e2e
@pytest.mark.model
@pytest.mark.parametrize("workers_as", ["hosts", "containers"])
def test_ingest_runs_on_two_celery_workers(tmp_path, cluster_root, monkeypatch, workers_as):
    from deploy.local_cluster import CLIENT_HOST, LocalCluster

    image = None
    if workers_as == "containers":
        image = os.environ.get("CHUNKYARD_TEST_IMAGE")
        if not image:
            pytest.skip("workers as containers need Docker and an image of deploy/Dockerfile: "
                        "set CHUNKYARD_TEST_IMAGE=<tag> (deploy/README.md, 'In containers')")
    hosts = workers_on_hosts()
    if image and not hosts:
        pytest.skip("workers as containers reach the cluster over its network: that needs root")

    run_env = {"CHUNKYARD_DB": str(tmp_path / "outputs" / "chunkyard.duckdb"), "CHUNKYARD_DOCS": str(DOCS)}
    cluster = LocalCluster(cluster_root, workers=2, extra_env=run_env, s3=True, hosts=hosts, image=image)
    with cluster:
        worker_names = cluster.wait_for_workers()
        postgres_pid = cluster.server.get_pid()
        s3_pid = cluster.s3_server.proc.pid
        assert cluster.env["CHUNKYARD_STORE_DATA_PATH"] == "s3://chunkyard/chunkyard"
        worker_pids = [proc.pid for proc in cluster.worker_procs]
        command = [sys.executable, "-m", "orchestration.cli", "run", "--docs", str(DOCS), "--progress", "none"]
        done = subprocess.run(cluster.host_command(CLIENT_HOST, command), cwd=REPO_ROOT, env=cluster.client_env(),
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        if hosts:
            sessions = assert_workers_connected_from_their_hosts(cluster, worker_names)
            network = cluster.network
            client_address = network.address(CLIENT_HOST)
            namespaces = [network.namespace(name) for name in network.names]
            containers = [cluster.container_name(i) for i in (1, 2)] if image else []
            bridge = network.bridge
            password = cluster.postgres_password

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

    if hosts:
        # The run's own process (on "client") read and wrote the instance and the lake over TCP too.
        assert {"dagster", "chunkyard"} <= sessions.get(client_address, set()), sessions
        # The summary names the lake as the hosts reach it, and never prints its password.
        assert "store: ducklake postgres:dbname=chunkyard host=db" in done.stdout, done.stdout[-1500:]
        assert "password=***" in done.stdout and password not in done.stdout + done.stderr

    # Nothing started by the cluster is left running, and with hosts no namespace or link is left.
    assert not still_running(worker_pids + [postgres_pid, s3_pid])
    if hosts:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(namespace in listed for namespace in namespaces), listed
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert bridge not in links, links
    if image:
        left = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
        assert not set(containers) & set(left.split()), left
