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


def read_lake(env: dict[str, str], scratch: Path) -> LakeContents:
    """The cluster lake's documents, chunks and embeddings (``scratch``: a folder for the reader's file).

    Call it while the cluster's PostgreSQL runs; it detaches before returning.
    """
    from resources.store import ChunkStore, close_lakes, lake_config

    # The cluster's [store] settings as its processes read them; credentials of an s3:// lake from its AWS_*.
    lake = lake_config("ducklake", env["CHUNKYARD_STORE_CATALOG"], env["CHUNKYARD_STORE_DATA_PATH"],
                       s3_endpoint=env.get("CHUNKYARD_STORE_S3_ENDPOINT"))
    saved = {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    os.environ.update({name: env[name] for name in saved if env.get(name)})
    try:
        with ChunkStore(scratch / "reader.duckdb", lake=lake).connect(read_only=True) as con:
            parsed = {row[0] for row in con.sql("SELECT doc_id FROM documents WHERE status = 'parsed'").fetchall()}
            chunk_counts = {(d, s): (n, distinct, first, last) for d, s, n, distinct, first, last in con.sql("""
                SELECT doc_id, strategy, count(*), count(DISTINCT chunk_index), min(chunk_index), max(chunk_index)
                FROM chunks GROUP BY ALL""").fetchall()}
            embedded = {(d, s): n for d, s, n in con.sql(
                "SELECT doc_id, strategy, count(*) FROM chunk_embeddings GROUP BY ALL").fetchall()}
            texts: dict[tuple[str, str], list[str]] = {}
            for d, s, text in con.sql(
                    "SELECT doc_id, strategy, text FROM chunks ORDER BY doc_id, strategy, chunk_index").fetchall():
                texts.setdefault((d, s), []).append(text)
    finally:
        close_lakes()  # before the cluster stops PostgreSQL
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return LakeContents(parsed, chunk_counts, embedded, texts)


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
