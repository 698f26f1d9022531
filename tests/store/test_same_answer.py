"""Same answer everywhere: examples/docs ingested through the real Dagster job into the embedded
file (one run) and into a DuckLake (two runs at once, in two processes, over disjoint documents)
hold the same rows in every table: chunks, offsets, token counts, blocks, vectors within 1e-5.
The lake's data files are in a local folder, or in an S3-compatible server (moto's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest

from resources import schema
from resources.store import ChunkStore

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "examples" / "docs"

# Every table the ingest writes. Not compared: write_serial (a count of write transactions,
# retries and claims included) and tables no ingest writes (retrieval_eval).
CONTENT_TABLES = ("schema_info", "documents", "pages", "blocks", "doc_tables", "chunks", "chunk_embeddings",
                  "embedding_vectors")
# When the row was written: differs between any two runs.
RUN_DEPENDENT_COLUMNS = {("documents", "updated_at")}

INGEST = """
    import sys
    from dagster import DagsterInstance
    from orchestration.cli import RANGE_END, RANGE_START
    from orchestration.definitions import INGEST_JOB, build_project
    from orchestration.settings import load_settings

    docs = sys.argv[1:]
    project = build_project(load_settings())
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("documents", docs)
        job = project.defs.resolve_job_def(INGEST_JOB)
        result = job.execute_in_process(instance=instance, tags={RANGE_START: docs[0], RANGE_END: docs[-1]},
                                        raise_on_error=False)
    sys.exit(0 if result.success else 1)
"""


def start_ingest(env_overrides: dict[str, str], docs: list[str]) -> subprocess.Popen:
    """One process running one range run of the ingest job over ``docs`` (the shipped settings)."""
    env = {**os.environ, "CHUNKYARD_CONFIG": str(REPO_ROOT / "chunkyard.toml"), "CHUNKYARD_DOCS": str(DOCS),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env_overrides}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(INGEST), *docs], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=1200)
    assert proc.returncode == 0, (out + err)[-4000:]


def table_rows(con: duckdb.DuckDBPyConnection, table: str) -> tuple[list[str], list[tuple]]:
    columns = [c for (c,) in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table]).fetchall() if (table, c) not in RUN_DEPENDENT_COLUMNS]
    key = ", ".join(schema.primary_keys()[table])
    rows = con.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {key}").fetchall()
    return columns, rows


def assert_same_rows(table: str, columns: list[str], embedded: list[tuple], lake: list[tuple]) -> float:
    """Every row equal, vectors within 1e-5; returns the largest vector difference seen (0.0 without vectors)."""
    assert len(embedded) == len(lake), f"{table}: {len(embedded)} rows embedded, {len(lake)} in the lake"
    vector_column = columns.index("embedding") if "embedding" in columns else None
    largest = 0.0
    for file_row, lake_row in zip(embedded, lake):
        if vector_column is None:
            assert file_row == lake_row, table
            continue
        plain = [i for i in range(len(columns)) if i != vector_column]
        assert [file_row[i] for i in plain] == [lake_row[i] for i in plain], table
        np.testing.assert_allclose(file_row[vector_column], lake_row[vector_column], atol=1e-5, rtol=0)
        difference = np.abs(np.asarray(file_row[vector_column]) - np.asarray(lake_row[vector_column]))
        largest = max(largest, float(difference.max(initial=0.0)))
    return largest


class EmbeddedIngest:
    """The embedded-file ingest both lake cases compare with: started once, finished when first needed."""

    def __init__(self, db: Path, proc: subprocess.Popen) -> None:
        self.path, self.proc, self.done = db, proc, False

    def db(self) -> Path:
        if not self.done:
            finish(self.proc)
            self.done = True
        return self.path


def document_ids() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def embedded_ingest(tmp_path_factory):
    db = tmp_path_factory.mktemp("file") / "chunkyard.duckdb"
    ingest = EmbeddedIngest(db, start_ingest({"CHUNKYARD_DB": str(db)}, document_ids()))
    yield ingest
    if ingest.proc.poll() is None:  # a test failed before needing it
        ingest.proc.kill()
        ingest.proc.communicate()


@pytest.mark.model
@pytest.mark.parametrize("data_at", ["folder", "s3"])
def test_embedded_and_two_concurrent_lake_runs_store_the_same_rows(data_at, embedded_ingest, postgres, tmp_path,
                                                                    request):
    docs = document_ids()
    assert len(docs) >= 4
    if data_at == "s3":
        s3_server = request.getfixturevalue("s3_server")
        lake = request.getfixturevalue("s3_lake")  # the server's AWS_* credentials are in the environment
        data_env = {"CHUNKYARD_STORE_S3_ENDPOINT": s3_server.endpoint}
    else:
        lake = postgres.new_lake(tmp_path / "lake-data")
        data_env = {}
    lake_env = {"CHUNKYARD_DB": str(tmp_path / "lake" / "chunkyard.duckdb"), "CHUNKYARD_STORE_MODE": "ducklake",
                "CHUNKYARD_STORE_CATALOG": lake.catalog, "CHUNKYARD_STORE_DATA_PATH": lake.data_path, **data_env}
    half = len(docs) // 2
    runs = [
        start_ingest(lake_env, docs[:half]),  # the two lake runs write at once
        start_ingest(lake_env, docs[half:]),
    ]
    for proc in runs:
        finish(proc)
    if data_at == "s3":  # the rows are in Parquet files in the bucket, not on this disk
        prefix = lake.data_path.removeprefix(f"s3://{s3_server.bucket}/")
        files = [key for key in s3_server.keys(prefix + "/") if key.endswith(".parquet")]
        assert any(f"{prefix}/main/chunks/" in key for key in files), files
        assert any(f"{prefix}/main/embedding_vectors/" in key for key in files), files

    compared, largest_difference = {}, 0.0
    with duckdb.connect(str(embedded_ingest.db()), read_only=True) as file_con, \
            ChunkStore(tmp_path / "unused", lake=lake).snapshot() as lake_con:
        for table in CONTENT_TABLES:
            columns, embedded = table_rows(file_con, table)
            lake_columns, in_lake = table_rows(lake_con, table)
            assert columns == lake_columns, table
            largest_difference = max(largest_difference, assert_same_rows(table, columns, embedded, in_lake))
            compared[table] = len(embedded)
        strategies = {s for (s,) in file_con.execute("SELECT DISTINCT strategy FROM chunks").fetchall()}
    print(f"rows compared per table ({data_at}):", compared, "largest vector difference:", largest_difference)
    assert compared["documents"] == len(docs) and compared["chunks"] > 0 and compared["embedding_vectors"] > 0
    assert compared["chunk_embeddings"] == compared["chunks"] and len(strategies) == 7
