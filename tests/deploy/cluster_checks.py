"""What the deploy/ tests read back from a LocalCluster: its instance, its lake, its processes.

Shared by tests/deploy/test_celery_cluster.py and tests/deploy/test_daemon_backfill.py
(imported by module name: pytest puts this folder on sys.path for its test files).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, exited but not reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def still_running(pids: list[int], grace_s: float = 30.0) -> list[int]:
    """The ``pids`` still running after up to ``grace_s`` (a stopped server may take a moment to exit)."""
    deadline = time.monotonic() + grace_s
    while True:
        running = [pid for pid in pids if alive(pid)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.5)


@contextmanager
def cluster_instance(env: dict[str, str], monkeypatch) -> Iterator[object]:
    """The cluster's Dagster instance (deploy/dagster.yaml, PostgreSQL), read as any machine would."""
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    for key in ("DAGSTER_HOME", "CHUNKYARD_DAGSTER_PG_URL", "CHUNKYARD_MAX_CONCURRENT_RUNS"):
        monkeypatch.setenv(key, env[key])
    instance = DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"]))
    try:
        yield instance
    finally:
        instance.dispose()


@dataclass(frozen=True)
class LakeContents:
    parsed: set[str]  # doc_ids with status 'parsed'
    # (doc_id, strategy) -> (rows, distinct chunk indexes, min index, max index)
    chunk_counts: dict[tuple[str, str], tuple[int, int, int, int]]
    embedded: dict[tuple[str, str], int]  # (doc_id, strategy) -> embeddings
    texts: dict[tuple[str, str], list[str]]  # (doc_id, strategy) -> chunk texts in index order
    document_sha: dict[str, str]  # doc_id -> the documents row's sha256 (of the bytes last read)
    chunk_doc_sha: dict[tuple[str, str], set[str]]  # (doc_id, strategy) -> the chunks' doc_sha256 values


@contextmanager
def lake_store(env: dict[str, str], scratch: Path) -> Iterator[object]:
    """A ChunkStore on the cluster's lake, as the cluster's processes reach it (``scratch``: a
    folder for the store's own file). Use it while the cluster's PostgreSQL runs; it detaches on exit."""
    from resources.store import ChunkStore, close_lakes, lake_config

    # The cluster's [store] settings as its processes read them; credentials of an s3:// lake from its AWS_*.
    lake = lake_config("ducklake", env["CHUNKYARD_STORE_CATALOG"], env["CHUNKYARD_STORE_DATA_PATH"],
                       s3_endpoint=env.get("CHUNKYARD_STORE_S3_ENDPOINT"))
    saved = {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    os.environ.update({name: env[name] for name in saved if env.get(name)})
    try:
        yield ChunkStore(scratch / "reader.duckdb", lake=lake)
    finally:
        close_lakes()  # before the cluster stops PostgreSQL
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def read_lake(env: dict[str, str], scratch: Path) -> LakeContents:
    """The cluster lake's documents, chunks and embeddings (``scratch``: a folder for the reader's file).

    Call it while the cluster's PostgreSQL runs; it detaches before returning.
    """
    with lake_store(env, scratch) as store, store.connect(read_only=True) as con:
        documents = con.sql("SELECT doc_id, sha256, status FROM documents").fetchall()
        chunk_counts = {(d, s): (n, distinct, first, last) for d, s, n, distinct, first, last in con.sql("""
            SELECT doc_id, strategy, count(*), count(DISTINCT chunk_index), min(chunk_index), max(chunk_index)
            FROM chunks GROUP BY ALL""").fetchall()}
        embedded = {(d, s): n for d, s, n in con.sql(
            "SELECT doc_id, strategy, count(*) FROM chunk_embeddings GROUP BY ALL").fetchall()}
        texts: dict[tuple[str, str], list[str]] = {}
        chunk_doc_sha: dict[tuple[str, str], set[str]] = {}
        for d, s, text, sha in con.sql("SELECT doc_id, strategy, text, doc_sha256 FROM chunks "
                                       "ORDER BY doc_id, strategy, chunk_index").fetchall():
            texts.setdefault((d, s), []).append(text)
            chunk_doc_sha.setdefault((d, s), set()).add(sha)
    return LakeContents({d for d, _, status in documents if status == "parsed"}, chunk_counts, embedded, texts,
                        {d: sha for d, sha, _ in documents}, chunk_doc_sha)


def celery_steps(instance, runs) -> tuple[dict[tuple[str, str], str], set[tuple[str, str]]]:
    """(run id, step key) -> the celery worker that executed it, and the steps that succeeded, of ``runs``.

    The worker is the "Celery worker" metadata of the step's engine event, which dagster-celery's
    task logs from the worker that took the step.
    """
    from dagster import DagsterEventType

    workers: dict[tuple[str, str], str] = {}
    succeeded: set[tuple[str, str]] = set()
    for run in runs:
        for record in instance.all_logs(run.run_id):
            event = record.dagster_event
            if event is None:
                continue
            if event.event_type == DagsterEventType.STEP_SUCCESS:
                succeeded.add((run.run_id, event.step_key))
            elif event.event_type == DagsterEventType.ENGINE_EVENT:
                worker = event.engine_event_data.metadata.get("Celery worker")
                if worker is not None:
                    workers[(run.run_id, event.step_key)] = worker.value
    return workers, succeeded


def assert_every_document_once(lake: LakeContents, expected_docs: set[str]) -> None:
    """Every expected document parsed, with every strategy's chunks exactly once
    (indexes 0..n-1, no duplicate, no gap) and one embedding per chunk; nothing else."""
    from chunking.strategies import all_strategies

    assert lake.parsed == expected_docs
    strategies = {spec.name for spec in all_strategies()}
    assert set(lake.chunk_counts) == {(d, s) for d in expected_docs for s in strategies}
    for (doc_id, strategy), (rows, distinct, first, last) in lake.chunk_counts.items():
        assert rows == distinct == last + 1 and first == 0, (doc_id, strategy, rows, distinct, first, last)
        assert lake.embedded.get((doc_id, strategy)) == rows, (doc_id, strategy)


def postgres_sessions(log: str) -> dict[str, set[str]]:
    """Client address -> the databases it connected to, from PostgreSQL's log with ``log_connections``.

    Each backend logs "connection received: host=<address> ..." and then "connection authorized:
    user=... database=<name>" under the same process id ("[pid]" in the line's prefix).
    """
    import re

    address_of: dict[str, str] = {}
    sessions: dict[str, set[str]] = {}
    for line in log.splitlines():
        received = re.search(r"\[(\d+)\] LOG:  connection received: host=(\S+)", line)
        if received:
            address_of[received.group(1)] = received.group(2)
            continue
        authorized = re.search(r"\[(\d+)\] LOG:  connection authorized: user=\S+ database=(\S+)", line)
        if authorized and authorized.group(1) in address_of:
            sessions.setdefault(address_of[authorized.group(1)], set()).add(authorized.group(2))
    return sessions


def workers_on_hosts() -> bool:
    """Whether this machine can put each worker on a host of its own (deploy/hosts.py: root).

    Where it cannot, the deploy tests run the workers as processes on this host, except in
    CI (CI=true), which runs as root and must test the hosts: there it fails instead.
    """
    import pytest

    from deploy.hosts import hosts_unavailable_reason

    unavailable = hosts_unavailable_reason()
    if unavailable and os.environ.get("CI"):
        pytest.fail(f"CI must test the workers on hosts of their own: {unavailable}")
    print(f"\ncelery workers: {'a host each' if unavailable is None else 'processes on this host: ' + unavailable}")
    return unavailable is None


def assert_workers_connected_from_their_hosts(cluster, worker_names: list[str]) -> dict[str, set[str]]:
    """With hosts: the workers are named after their hosts (or containers), and each connected to PostgreSQL
    from its own address, over TCP, to Dagster's storage, the broker and the lake's catalog
    (PostgreSQL's connection log; returned, :func:`postgres_sessions`). Call it before the cluster
    stops (its log goes with it)."""
    addresses = cluster.worker_addresses()  # host name -> its host's address, or its container's
    assert sorted(worker_names) == sorted(f"chunkyard-w{name.removeprefix('worker-')}@{name}" for name in addresses)
    assert len(set(addresses.values())) == len(addresses), addresses
    sessions = postgres_sessions(cluster.postgres_log())
    for name, address in addresses.items():
        assert {"dagster", "celery", "chunkyard"} <= sessions.get(address, set()), (name, address, sessions)
    return sessions
