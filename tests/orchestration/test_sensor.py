"""The documents sensor: add, change, delete, and a restart that does not re-run everything."""

import json

import pytest
from dagster import (
    AddDynamicPartitionsRequest,
    DeleteDynamicPartitionsRequest,
    build_sensor_context,
)

from orchestration.sensors import documents_sensor
from resources.documents import DocumentsFolder, sha256_file
from resources.store import ChunkStore, StoreResource


@pytest.fixture
def resources(settings):
    return {"documents": DocumentsFolder(root=settings.docs_root), "store": StoreResource(path=settings.db_path)}


def evaluate(instance, resources, cursor=None):
    context = build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    result = documents_sensor(context)
    # Apply partition changes as the daemon would, so the next tick sees them.
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        elif isinstance(request, DeleteDynamicPartitionsRequest):
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return result


def run_keys(result):
    return sorted(r.run_key for r in result.run_requests)


def test_new_files_get_partitions_and_runs(instance, resources, docs_dir):
    result = evaluate(instance, resources)
    alpha, beta = sha256_file(docs_dir / "alpha.md"), sha256_file(docs_dir / "sub" / "beta.txt")
    assert run_keys(result) == [f"alpha.md:{alpha}", f"sub/beta.txt:{beta}"]
    assert {r.partition_key for r in result.run_requests} == {"alpha.md", "sub/beta.txt"}
    assert all([k.to_user_string() for k in r.asset_selection] == ["raw_documents"] for r in result.run_requests)
    add = [r for r in result.dynamic_partitions_requests if isinstance(r, AddDynamicPartitionsRequest)]
    assert sorted(add[0].partition_keys) == ["alpha.md", "sub/beta.txt"]
    assert sorted(instance.get_dynamic_partitions("documents")) == ["alpha.md", "sub/beta.txt"]

    # Nothing changed: the next tick requests nothing.
    again = evaluate(instance, resources, result.cursor)
    assert again.run_requests == [] and not again.dynamic_partitions_requests


def test_changed_content_gets_a_new_run_key(instance, resources, docs_dir):
    first = evaluate(instance, resources)
    (docs_dir / "alpha.md").write_text("# Alpha\n\nNew content.\n", encoding="utf-8")
    second = evaluate(instance, resources, first.cursor)
    new_sha = sha256_file(docs_dir / "alpha.md")
    assert run_keys(second) == [f"alpha.md:{new_sha}"]
    assert not second.dynamic_partitions_requests  # the partition already exists


def test_deleted_file_loses_its_partition_and_every_row(instance, resources, settings, docs_dir):
    first = evaluate(instance, resources)
    store = ChunkStore(settings.db_path)
    store.record_read("alpha.md", str(docs_dir.resolve()), "alpha.md", "x" * 64, 10)
    with store.transaction() as con:
        con.execute("INSERT INTO pages VALUES ('alpha.md', 0, 0, 'text')")
        con.execute(
            "INSERT INTO chunks VALUES ('alpha.md', 'recursive', 0, 'text', 'h', 1, 0, 4, 0, 0, [], [], true, "
            "'{}', 'cfg', 'sha')"
        )
    (docs_dir / "alpha.md").unlink()
    second = evaluate(instance, resources, first.cursor)
    assert second.run_requests == []
    delete = [r for r in second.dynamic_partitions_requests if isinstance(r, DeleteDynamicPartitionsRequest)]
    assert list(delete[0].partition_keys) == ["alpha.md"]
    assert instance.get_dynamic_partitions("documents") == ["sub/beta.txt"]
    with store.connect(read_only=True) as con:
        for table in ("documents", "pages", "chunks"):
            assert con.execute(f"SELECT count(*) FROM {table} WHERE doc_id = 'alpha.md'").fetchone()[0] == 0
    assert "alpha.md" not in json.loads(second.cursor)["docs"]


def test_empty_cursor_is_seeded_from_stored_hashes(instance, resources, settings, docs_dir):
    store = ChunkStore(settings.db_path)
    root = str(docs_dir.resolve())
    store.record_read("alpha.md", root, "alpha.md", sha256_file(docs_dir / "alpha.md"), 1)
    store.record_read("sub/beta.txt", root, "sub/beta.txt", "stale-hash", 1)
    # A document processed from another folder is neither re-run nor deleted.
    store.record_read("elsewhere.md", "/some/other/folder", "elsewhere.md", "y" * 64, 1)
    result = evaluate(instance, resources)  # cursor None: a fresh start
    assert [r.partition_key for r in result.run_requests] == ["sub/beta.txt"]
    assert store.document("elsewhere.md") is not None


def test_sidecars_and_hidden_files_are_not_documents(docs_dir):
    from resources.documents import scan_folder

    (docs_dir / "alpha.blocks.jsonl").write_text("{}\n", encoding="utf-8")
    (docs_dir / "alpha.tables.json").write_text("{}", encoding="utf-8")
    (docs_dir / ".hidden.md").write_text("# hidden", encoding="utf-8")
    (docs_dir / "image.png").write_bytes(b"\x89PNG")
    (docs_dir / "odd[1],v|2.md").write_text("# odd", encoding="utf-8")
    keys = sorted(scan_folder(docs_dir))
    # A cleaned key carries a hash of its own path (resources/documents.py).
    assert keys == ["alpha.md", "odd_1__v_2.md~4babd0f7", "sub/beta.txt"]
