"""A sidecar beside a document is part of its content: editing, adding or removing one is seen
as a change by the fingerprint, the sensor and `chunkyard run`, and the chunks follow it.

Before, a document's fingerprint was its own bytes only: a `.blocks.jsonl` edited after the
first run was never read again (its stored parse and chunks still shown as current) until the
document itself changed or `--force` was used.
"""

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterRun, DagsterRunStatus, build_sensor_context

from orchestration.sensors import documents_sensor
from resources.documents import DocumentsFolder, data_version, scan_folder, sha256_file, source_fingerprint
from resources.store import StoreResource

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = b"Plain words that our own parser would read as they are.\n"


def write_sidecar(folder: Path, body: str, *, name: str = "report") -> None:
    """A LightRAG sidecar for ``report.txt``, declaring its bytes' sha256, with one block."""
    meta = {"type": "meta", "format": "lightrag", "version": "1.0",
            "document_hash": "sha256:" + hashlib.sha256(DOC).hexdigest(), "parse_engine": "mineru"}
    block = {"type": "content", "blockid": "b1", "format": "plain_text", "content": f"# Report\n{body}",
             "heading": "Report", "parent_headings": [], "level": 1}
    (folder / f"{name}.blocks.jsonl").write_text(json.dumps(meta) + "\n" + json.dumps(block) + "\n", encoding="utf-8")


def fingerprint(folder: Path) -> str:
    return source_fingerprint(scan_folder(folder)["report.txt"])


def test_the_fingerprint_follows_the_sidecars_and_is_the_bare_hash_without_them(tmp_path):
    (tmp_path / "report.txt").write_bytes(DOC)
    bare = hashlib.sha256(DOC).hexdigest()
    # No sidecar: the version every earlier store recorded, so nothing is re-run for it.
    assert fingerprint(tmp_path) == bare == data_version(bare, None)

    write_sidecar(tmp_path, "First version.")
    first = fingerprint(tmp_path)
    assert first.startswith(bare + "+sidecars:")
    assert fingerprint(tmp_path) == first  # the same files, the same version

    write_sidecar(tmp_path, "Second version.")
    second = fingerprint(tmp_path)
    assert second not in (first, bare)

    (tmp_path / "report.tables.json").write_text('{"version": "1.0", "tables": {}}', encoding="utf-8")
    with_tables = fingerprint(tmp_path)
    assert with_tables not in (first, second, bare)

    (tmp_path / "report.blocks.jsonl").unlink()
    (tmp_path / "report.tables.json").unlink()
    assert fingerprint(tmp_path) == bare


def fingerprint_within(folder: Path, seconds: float = 30.0) -> str:
    """The fingerprint, or a failure (not a hang) when taking it blocks: opening a FIFO would."""
    found: list[str] = []
    worker = threading.Thread(target=lambda: found.append(fingerprint(folder)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert found, f"the fingerprint did not come back within {seconds} s: a sidecar was opened"
    return found[0]


def test_a_sidecar_that_is_a_link_or_a_fifo_counts_without_being_opened(tmp_path):
    (tmp_path / "report.txt").write_bytes(DOC)
    os.mkfifo(tmp_path / "report.tables.json")  # opening it would block until a writer came
    as_fifo = fingerprint_within(tmp_path)
    (tmp_path / "report.tables.json").unlink()
    (tmp_path / "report.tables.json").symlink_to("/dev/zero")  # reading it would never end
    as_link = fingerprint_within(tmp_path)
    assert len({as_fifo, as_link, hashlib.sha256(DOC).hexdigest()}) == 3


def test_a_document_whose_name_leaves_no_room_for_a_sidecar_name_keeps_its_bare_hash(tmp_path):
    # Its "<stem>.blocks.jsonl" is over the file-name limit: no sidecar can be there, and looking
    # for one must not read as "cannot be examined" (a sidecar digest) nor fail its parse.
    from chunking.parsers import parse_document

    long_name = tmp_path / ("a" * 245 + ".txt")
    long_name.write_bytes(DOC)
    (source,) = scan_folder(tmp_path).values()
    assert source_fingerprint(source) == hashlib.sha256(DOC).hexdigest()
    assert parse_document(long_name, "long").text == DOC.decode()


def test_the_sensor_requests_a_run_when_only_a_sidecar_changes(instance, settings, tmp_path):
    folder = Path(settings.docs_root)
    (folder / "report.txt").write_bytes(DOC)
    write_sidecar(folder, "First version.")
    resources = {"documents": DocumentsFolder(root=str(folder)), "store": StoreResource(path=settings.db_path)}

    def tick(cursor):
        result = documents_sensor(build_sensor_context(instance=instance, cursor=cursor, resources=resources))
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        for request in result.run_requests:  # submitted, as the daemon does: waiting for a worker
            instance.add_run(DagsterRun(job_name="ingest_job", status=DagsterRunStatus.NOT_STARTED,
                                        tags={"dagster/partition": request.partition_key}))
        return result, {r.partition_key: r.run_key.rsplit("#", 1)[0] for r in result.run_requests}

    first, runs = tick(None)
    assert runs["report.txt"].startswith("report.txt:" + sha256_file(folder / "report.txt") + "+sidecars:")
    again, runs = tick(first.cursor)
    assert runs == {}

    write_sidecar(folder, "Second version, which the next tick must see.")
    changed, runs = tick(again.cursor)
    assert list(runs) == ["report.txt"]
    (folder / "report.blocks.jsonl").unlink()
    removed, runs = tick(changed.cursor)
    assert runs == {"report.txt": "report.txt:" + sha256_file(folder / "report.txt")}


CONFIG = 'enabled_strategies = ["paragraph"]\n'


@pytest.fixture
def env(tmp_path):
    (tmp_path / "chunkyard.toml").write_text(CONFIG)
    return {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "CHUNKYARD_DB": str(tmp_path / "chunkyard.duckdb"),
            "CHUNKYARD_CONFIG": str(tmp_path / "chunkyard.toml"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def chunkyard(env, *args) -> str:
    proc = subprocess.run([sys.executable, "-m", "orchestration.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def current_texts(env) -> list[str]:
    with duckdb.connect(env["CHUNKYARD_DB"], read_only=True) as con:
        rows = con.execute("SELECT c.text FROM current_chunks c JOIN current_embeddings e "
                           "USING (doc_id, strategy, chunk_index) WHERE doc_id = 'report.txt' "
                           "ORDER BY chunk_index").fetchall()
    return [r[0] for r in rows]


def test_chunkyard_run_reparses_rechunks_and_reembeds_when_only_the_sidecar_changed(tmp_path, env):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "report.txt").write_bytes(DOC)
    write_sidecar(folder, "The first version of the body.")
    run = ("run", "--docs", str(folder), "--progress", "none")

    chunkyard(env, *run)
    assert current_texts(env) == ["# Report\nThe first version of the body."]

    write_sidecar(folder, "The second version of the body.")
    out = chunkyard(env, *run)
    assert "1 to process" in out, out
    assert current_texts(env) == ["# Report\nThe second version of the body."]

    out = chunkyard(env, *run)  # nothing changed since: a no-op
    assert "0 to process" in out, out

    (folder / "report.blocks.jsonl").unlink()  # our own parse of the bytes again
    chunkyard(env, *run)
    assert current_texts(env) == [DOC.decode().strip()]
