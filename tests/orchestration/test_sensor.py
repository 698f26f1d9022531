"""The documents sensor: add, change, delete, and a restart that does not re-run everything."""

import json

import pytest
from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    DagsterRun,
    DagsterRunStatus,
    DeleteDynamicPartitionsRequest,
    SkipReason,
    build_sensor_context,
)

from chunking.model import Page, ParsedDocument
from chunking.sidecar import sidecar_paths, write_sidecars

from orchestration.sensors import documents_sensor
from resources.documents import DocumentsFolder, sha256_file
from resources.store import ChunkStore, StoreResource


@pytest.fixture
def resources(settings):
    return {"documents": DocumentsFolder(root=settings.docs_root), "store": StoreResource(path=settings.db_path)}


def evaluate(instance, resources, cursor=None, launch=True):
    context = build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    result = documents_sensor(context)
    # Apply partition changes as the daemon would, so the next tick sees them.
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        elif isinstance(request, DeleteDynamicPartitionsRequest):
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    if launch:
        # And submit the requested runs, as the daemon does: waiting for a run worker (a QUEUED
        # run needs a code-location origin to be stored; NOT_STARTED waits the same way).
        for request in result.run_requests:
            if request.partition_key is None:  # the statistics' refresh after a deletion
                continue
            instance.add_run(DagsterRun(job_name="ingest_job", status=DagsterRunStatus.NOT_STARTED,
                                        tags={"dagster/partition": request.partition_key}))
    return result


def run_keys(result):
    """The run keys without their tick number (``doc:version#n``)."""
    return sorted(r.run_key.rsplit("#", 1)[0] for r in result.run_requests)


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


def _alpha_changed(instance, resources, docs_dir):
    """A first tick, alpha.md rewritten, a second tick: (the second tick's result, alpha's new sha256)."""
    first = evaluate(instance, resources)
    (docs_dir / "alpha.md").write_text("# Alpha\n\nNew content.\n", encoding="utf-8")
    return evaluate(instance, resources, first.cursor), sha256_file(docs_dir / "alpha.md")


def test_changed_content_gets_a_new_run_key(instance, resources, docs_dir):
    second, new_sha = _alpha_changed(instance, resources, docs_dir)
    assert run_keys(second) == [f"alpha.md:{new_sha}"]
    assert not second.dynamic_partitions_requests  # the partition already exists


def test_a_change_whose_run_ended_without_storing_it_is_requested_again(instance, resources, docs_dir):
    # The run of a changed file failed (the store locked, the run cancelled) before its read was
    # stored: once no run of it is queued or running, the next tick asks again (before, never: the
    # cursor held the content, and the schedule does not read the folder).
    second, new_sha = _alpha_changed(instance, resources, docs_dir)
    assert run_keys(second) == [f"alpha.md:{new_sha}"]
    # Its run is waiting: not asked again.
    assert evaluate(instance, resources, second.cursor).run_requests == []
    for run in instance.get_runs():
        if run.tags["dagster/partition"] == "alpha.md":
            instance.report_run_failed(run)
    third = evaluate(instance, resources, second.cursor)
    assert run_keys(third) == [f"alpha.md:{new_sha}"] and third.run_requests[0].run_key != second.run_requests[0].run_key
    # A cause that persists is not asked again every tick for ever: three times per content.
    cursor = third.cursor
    for expected in (1, 1, 0, 0):
        for run in instance.get_runs():
            if run.tags["dagster/partition"] == "alpha.md" and not run.is_finished:
                instance.report_run_failed(run)
        tick = evaluate(instance, resources, cursor)
        assert len(tick.run_requests) == expected
        cursor = tick.cursor


def _after_the_ctime_moves(path, write):
    """``write()``, retried until ``path``'s ctime moved: file timestamps are as coarse as the
    kernel's clock tick, so two writes within one tick may leave the same ctime."""
    import time

    before = path.stat().st_ctime_ns
    for _ in range(200):
        write()
        if path.stat().st_ctime_ns != before:
            return
        time.sleep(0.01)
    raise AssertionError(f"the ctime of {path} did not move in 2 s")


def test_a_rewrite_that_keeps_the_size_and_restores_the_mtime_is_seen(instance, resources, docs_dir):
    # cp -p, rsync -a, tar -x: new bytes of the same length under the old mtime. Only the
    # ctime, which no user can set, says the file changed.
    import os

    alpha = docs_dir / "alpha.md"
    first = evaluate(instance, resources)
    old = alpha.stat()
    new_text = alpha.read_text(encoding="utf-8").replace("a", "b", 1)
    assert len(new_text) == len(alpha.read_text(encoding="utf-8")) and new_text.isascii()

    def rewrite_keeping_the_mtime():
        alpha.write_text(new_text, encoding="utf-8")
        os.utime(alpha, ns=(old.st_atime_ns, old.st_mtime_ns))

    _after_the_ctime_moves(alpha, rewrite_keeping_the_mtime)
    assert (alpha.stat().st_size, alpha.stat().st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    second = evaluate(instance, resources, first.cursor)
    assert run_keys(second) == [f"alpha.md:{sha256_file(alpha)}"]


def test_an_unchanged_folder_is_not_hashed_again_and_an_older_cursor_once(instance, resources, docs_dir,
                                                                         monkeypatch):
    import orchestration.sensors as sensors

    first = evaluate(instance, resources)
    hashed = []
    fingerprint = sensors.current_fingerprint
    monkeypatch.setattr(sensors, "current_fingerprint", lambda source: hashed.append(source) or fingerprint(source))
    again = evaluate(instance, resources, first.cursor)
    assert hashed == [] and again.run_requests == []
    # A cursor of the version before ctime was kept: each document is hashed once more, and
    # nothing is requested again (the content is the one that cursor requested).
    cursor = json.loads(first.cursor)
    cursor["docs"] = {doc: entry[:4] for doc, entry in cursor["docs"].items()}
    older = evaluate(instance, resources, json.dumps(cursor))
    assert len(hashed) == 2 and older.run_requests == []


def test_content_back_to_an_earlier_version_gets_a_run_key_the_daemon_has_not_seen(instance, resources, docs_dir):
    # The daemon skips a request whose run key an earlier run of this sensor had: "doc:sha" alone
    # made a document reverted to an earlier version (or a sidecar removed again) never run.
    original = (docs_dir / "alpha.md").read_text(encoding="utf-8")
    first = evaluate(instance, resources)
    (docs_dir / "alpha.md").write_text("# Alpha\n\nAn edit, then undone.\n", encoding="utf-8")
    second = evaluate(instance, resources, first.cursor)
    (docs_dir / "alpha.md").write_text(original, encoding="utf-8")
    third = evaluate(instance, resources, second.cursor)
    seen = {r.run_key for result in (first, second) for r in result.run_requests}
    (back,) = third.run_requests
    assert back.run_key.startswith(f"alpha.md:{sha256_file(docs_dir / 'alpha.md')}#")
    assert back.run_key not in seen
    # Evaluated again from the same cursor (the daemon retrying a failed tick): the same keys.
    assert [r.run_key for r in evaluate(instance, resources, second.cursor).run_requests] == [back.run_key]


def test_deleted_file_loses_its_partition_and_every_row(instance, resources, settings, docs_dir):
    first = evaluate(instance, resources)
    store = resources["store"].store()
    store.record_read("alpha.md", str(docs_dir.resolve()), "alpha.md", "x" * 64, 10)
    doc = ParsedDocument(doc_id="alpha.md", text="text", pages=[Page(page_num=0, char_offset=0, text="text")])
    sidecars = write_sidecars(doc, resources["store"].sidecar_path())
    assert sidecars == sidecar_paths("alpha.md", resources["store"].sidecar_path())
    with store.transaction() as con:
        con.execute("INSERT INTO pages VALUES ('alpha.md', 0, 0, 'text')")
        con.execute(
            "INSERT INTO chunks VALUES ('alpha.md', 'recursive', 0, 'text', 'h', 1, 0, 4, 0, 0, [], [], true, "
            "'{}', 'cfg', 'sha')"
        )
    from orchestration.viewer import viewer_path

    page = viewer_path(store.path, "alpha.md")  # where `chunkyard show alpha.md` writes the whole text
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("<html>text</html>", encoding="utf-8")
    (docs_dir / "alpha.md").unlink()
    second = evaluate(instance, resources, first.cursor)
    assert [r.asset_selection for r in second.run_requests] == [[AssetKey("strategy_stats")]]  # no document run
    delete = [r for r in second.dynamic_partitions_requests if isinstance(r, DeleteDynamicPartitionsRequest)]
    assert list(delete[0].partition_keys) == ["alpha.md"]
    assert instance.get_dynamic_partitions("documents") == ["sub/beta.txt"]
    with store.connect(read_only=True) as con:
        for table in ("documents", "pages", "chunks"):
            assert con.execute(f"SELECT count(*) FROM {table} WHERE doc_id = 'alpha.md'").fetchone()[0] == 0
    assert "alpha.md" not in json.loads(second.cursor)["docs"]
    assert not any(path.exists() for path in sidecars)
    assert not page.exists()


def test_empty_cursor_is_seeded_from_stored_hashes(instance, resources, settings, docs_dir):
    store = ChunkStore(settings.db_path)
    root = str(docs_dir.resolve())
    store.record_read("alpha.md", root, "alpha.md", sha256_file(docs_dir / "alpha.md"), 1)
    store.record_read("sub/beta.txt", root, "sub/beta.txt", "stale-hash", 1)
    result = evaluate(instance, resources)  # cursor None: a fresh start
    assert [r.partition_key for r in result.run_requests] == ["sub/beta.txt"]


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


# -- one owner per document run (issue 11.8) -----------------------------------------------


# Another process holding the CLI's run lock on this instance, as `make run` does.
from tests.orchestration.test_runlock import hold as hold_run_lock  # noqa: E402


def test_the_sensor_skips_while_a_cli_run_holds_the_lock(instance, resources, docs_dir):
    first = evaluate(instance, resources)  # both documents requested
    (docs_dir / "gamma.md").write_text("# Gamma\n\nNew while the CLI runs.\n", encoding="utf-8")
    cli = hold_run_lock(instance.root_directory)
    try:
        skipped = documents_sensor(build_sensor_context(instance=instance, cursor=first.cursor, resources=resources))
        assert isinstance(skipped, SkipReason)
        assert f"pid {cli.pid}" in skipped.skip_message
        assert "gamma.md" not in instance.get_dynamic_partitions("documents")
    finally:
        cli.communicate("\n", timeout=60)
    # The CLI processed gamma.md (and re-read alpha.md) before it let go: the store has their hashes.
    store = resources["store"].store()
    root = str(docs_dir.resolve())
    for name in ("gamma.md", "alpha.md"):
        store.record_read(name, root, name, sha256_file(docs_dir / name), 1)
    after = evaluate(instance, resources, first.cursor)
    assert after.run_requests == []  # the cursor never saw gamma.md; the store's hashes decide
    assert "gamma.md" in instance.get_dynamic_partitions("documents")


def test_the_sensor_skips_a_folder_the_database_does_not_hold(instance, resources, docs_dir):
    resources["store"].store().claim_source_root("/another/folder")
    skipped = documents_sensor(build_sensor_context(instance=instance, resources=resources))
    assert isinstance(skipped, SkipReason) and "/another/folder" in skipped.skip_message
    assert instance.get_dynamic_partitions("documents") == []


def test_a_cli_run_that_starts_during_a_tick_still_owns_the_documents(instance, resources, monkeypatch):
    import orchestration.sensors as sensors

    holders = []

    fingerprint = sensors.current_fingerprint

    def hash_while_a_cli_run_starts(source):
        if not holders:
            holders.append(hold_run_lock(instance.root_directory))
        return fingerprint(source)

    monkeypatch.setattr(sensors, "current_fingerprint", hash_while_a_cli_run_starts)
    try:
        result = documents_sensor(build_sensor_context(instance=instance, resources=resources))
    finally:
        for holder in holders:
            holder.communicate("\n", timeout=60)
    assert isinstance(result, SkipReason) and f"pid {holders[0].pid}" in result.skip_message
    assert instance.get_dynamic_partitions("documents") == []


def test_a_run_that_stored_the_change_during_the_tick_is_not_asked_again(instance, resources, docs_dir, monkeypatch):
    # The tick reads the store's hashes, hashes the folder, then looks for runs in flight: a short run
    # that stored its read and ended in between is neither in the store's first answer nor in
    # flight. The store is read again before asking again.
    second, new_sha = _alpha_changed(instance, resources, docs_dir)
    store = resources["store"].store()
    stale = store.document_hashes(str(docs_dir.resolve()))
    store.record_read("alpha.md", str(docs_dir.resolve()), "alpha.md", new_sha, 10)  # its run stored it...
    for run in instance.get_runs():
        instance.report_run_failed(run)  # ...and ended (how does not matter here)
    reads = []
    real = ChunkStore.document_hashes

    def first_read_before_the_run(self, root):
        reads.append(root)
        return stale if len(reads) == 1 else real(self, root)

    monkeypatch.setattr(ChunkStore, "document_hashes", first_read_before_the_run)
    third = evaluate(instance, resources, second.cursor)
    assert len(reads) == 2 and "alpha.md" not in {r.partition_key for r in third.run_requests}


def test_a_deletion_refreshes_the_statistics_without_the_deleted_document(instance, settings, docs_dir):
    """The statistics refresh after embeddings, which a deletion makes none of: before, they kept a
    document the sensor had deleted until the next run. The sensor asks for them itself."""
    from orchestration.definitions import build_project

    project = build_project(settings.model_copy(update={"enabled_strategies": ["recursive"]}))
    resources = {"documents": DocumentsFolder(root=settings.docs_root), "store": StoreResource(path=settings.db_path)}
    first = evaluate(instance, resources)
    assert all(r.asset_selection == [AssetKey("raw_documents")] for r in first.run_requests)  # nothing deleted yet
    ingest = project.defs.resolve_job_def("ingest_job")
    for doc_id in ("alpha.md", "sub/beta.txt"):
        assert ingest.execute_in_process(instance=instance, partition_key=doc_id).success

    (docs_dir / "alpha.md").unlink()
    # Evaluated as the daemon does: through the sensor definition, which resolves each request
    # against its target's job (and refuses one that job cannot run).
    with build_sensor_context(instance=instance, cursor=first.cursor, resources=resources,
                              repository_def=project.defs.get_repository_def()) as context:
        second = project.defs.resolve_sensor_def("documents_sensor").evaluate_tick(context)
    [request] = second.run_requests
    assert request.asset_selection == [AssetKey("strategy_stats")] and request.partition_key is None
    # Keyed by what was deleted too: after a cursor reset the tick numbers start again.
    assert request.run_key.startswith("strategy_stats:") and request.run_key.endswith("#2")  # the second asking tick
    # Run as the daemon runs a request of this sensor: its target's job, the request's selection.
    job = project.defs.get_repository_def().get_job("__anonymous_asset_job_documents_sensor")
    assert job.execute_in_process(instance=instance, asset_selection=request.asset_selection).success
    stats = instance.get_latest_materialization_event(AssetKey("strategy_stats")).asset_materialization.metadata
    assert stats["recursive/documents"].value == 1
    # A later tick with nothing deleted asks for nothing.
    assert evaluate(instance, resources, second.cursor, launch=False).run_requests == []
