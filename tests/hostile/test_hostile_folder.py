"""A hostile documents folder (issue 12, items 1, 4 and 8), generated at test time:
links out of the root or to nowhere, a refused file that must not be re-run, and
partition keys that must not depend on which other files exist."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from dagster import AssetKey, materialize

from orchestration.definitions import build_project
from orchestration.reconcile import diff_folder
from orchestration.schedules import RecordedFailures, plan_refresh, recorded_failures
from resources.documents import clean_partition_key, scan_folder, source_fingerprint
from resources.store import ChunkStore

SECRET = "root:x:0:0:root:/root:/bin/bash"
DOC_ASSETS = [AssetKey("raw_documents"), AssetKey("parsed_documents"), AssetKey("chunks_recursive")]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text(f"{SECRET}\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n", encoding="utf-8")
    return secret


def _ingest(settings, instance, doc_ids: list[str]):
    """raw, parsed and recursive chunks of ``doc_ids`` in one batched run, as the CLI runs them."""
    project = build_project(settings.model_copy(update={"enabled_strategies": ["recursive"]}))
    instance.add_dynamic_partitions("documents", doc_ids)
    assets = [project.defs.get_assets_def(key) for key in DOC_ASSETS]
    first, last = sorted(doc_ids)[0], sorted(doc_ids)[-1]
    result = materialize(assets, instance=instance, resources=project.defs.resources, raise_on_error=False,
                         tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last})
    return project, result


def _rows(db: str, sql: str) -> list[tuple]:
    with duckdb.connect(db, read_only=True) as con:
        return con.execute(sql).fetchall()


# -- item 1: nothing outside the root is read -----------------------------------------


def test_links_out_of_the_root_or_to_nowhere_are_listed_as_refused(docs_dir, outside):
    (docs_dir / "passwd.txt").symlink_to(outside)
    (docs_dir / "gone.md").symlink_to(docs_dir / "deleted.md")
    (docs_dir / "alias.md").symlink_to(docs_dir / "alpha.md")  # inside the root: an ordinary document
    (docs_dir / "linked_dir").symlink_to(outside.parent, target_is_directory=True)
    sources = scan_folder(docs_dir)
    assert sorted(sources) == ["alias.md", "alpha.md", "gone.md", "passwd.txt", "sub/beta.txt"]
    assert "outside the documents folder" in sources["passwd.txt"].refusal
    assert "dangling symbolic link" in sources["gone.md"].refusal and "deleted.md" in sources["gone.md"].refusal
    assert sources["alias.md"].refusal is None and sources["alias.md"].readable_path == (docs_dir / "alpha.md").resolve()
    # A refused link is identified without being opened: its fingerprint is not the target's hash.
    secret_sha = hashlib.sha256(outside.read_bytes()).hexdigest()
    assert source_fingerprint(sources["passwd.txt"]).startswith("refused:")
    assert secret_sha not in {source_fingerprint(s) for s in sources.values()}
    with pytest.raises(PermissionError):
        sources["passwd.txt"].readable_path


def test_a_loop_of_links_is_named_a_loop_not_a_dangling_link(docs_dir):
    (docs_dir / "a.txt").symlink_to(docs_dir / "b.txt")
    (docs_dir / "b.txt").symlink_to(docs_dir / "a.txt")
    (docs_dir / "self.md").symlink_to(docs_dir / "self.md")
    sources = scan_folder(docs_dir)
    for key in ("a.txt", "b.txt", "self.md"):
        assert f"{key}: refused: a loop of symbolic links" in sources[key].refusal
        assert "dangling" not in sources[key].refusal


def test_a_link_to_a_file_outside_the_root_never_reaches_a_chunk(settings, instance, docs_dir, outside):
    (docs_dir / "passwd.txt").symlink_to(outside)
    (docs_dir / "gone.md").symlink_to(docs_dir / "deleted.md")
    _, result = _ingest(settings, instance, sorted(scan_folder(docs_dir)))
    db = settings.db_path
    assert _rows(db, f"SELECT count(*) FROM chunks WHERE text LIKE '%{SECRET[:10]}%'") == [(0,)]
    assert _rows(db, f"SELECT count(*) FROM pages WHERE text LIKE '%{SECRET[:10]}%'") == [(0,)]
    errors = dict(_rows(db, "SELECT doc_id, error FROM documents WHERE status = 'error'"))
    assert set(errors) == {"passwd.txt", "gone.md"}
    assert "passwd.txt: refused: a symbolic link to a file outside the documents folder" in errors["passwd.txt"]
    assert "gone.md: refused: a dangling symbolic link" in errors["gone.md"]
    # The other documents of the same batch went on.
    assert {d for (d,) in _rows(db, "SELECT DISTINCT doc_id FROM chunks")} == {"alpha.md", "sub/beta.txt"}


def _special_files(docs_dir: Path) -> None:
    """A named pipe, a socket and a link to the pipe, each named like a document."""
    import os
    import socket

    os.mkfifo(docs_dir / "pipe.txt")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(docs_dir / "sock.md"))
    listener.close()  # the socket file stays
    (docs_dir / "to_pipe.txt").symlink_to(docs_dir / "pipe.txt")


def test_pipes_sockets_and_links_to_them_are_listed_as_refused_and_never_opened(docs_dir):
    _special_files(docs_dir)
    sources = scan_folder(docs_dir)
    assert "pipe.txt: refused: a named pipe (FIFO); only regular files are read" == sources["pipe.txt"].refusal
    assert "sock.md: refused: a socket; only regular files are read" == sources["sock.md"].refusal
    assert "a symbolic link to a named pipe (FIFO)" in sources["to_pipe.txt"].refusal
    # Fingerprinting them opens nothing: opening the FIFO would wait for a writer forever.
    assert all(source_fingerprint(sources[k]).startswith("refused:") for k in ("pipe.txt", "sock.md", "to_pipe.txt"))
    assert sources["alpha.md"].refusal is None


def test_a_pipe_or_a_socket_in_the_folder_fails_alone(settings, instance, docs_dir):
    _special_files(docs_dir)
    _, result = _ingest(settings, instance, sorted(scan_folder(docs_dir)))
    db = settings.db_path
    errors = dict(_rows(db, "SELECT doc_id, error FROM documents WHERE status = 'error'"))
    assert set(errors) == {"pipe.txt", "sock.md", "to_pipe.txt"}
    assert "refused: a named pipe (FIFO)" in errors["pipe.txt"] and "refused: a socket" in errors["sock.md"]
    assert {d for (d,) in _rows(db, "SELECT DISTINCT doc_id FROM chunks")} == {"alpha.md", "sub/beta.txt"}


def test_a_sidecar_with_a_lone_surrogate_fails_its_document_not_its_batch(settings, instance, docs_dir):
    import json

    data = b"Plain text of the document; its sidecar says otherwise.\n"
    (docs_dir / "lone.txt").write_bytes(data)
    meta = {"type": "meta", "format": "lightrag", "version": "1.0",
            "document_hash": "sha256:" + hashlib.sha256(data).hexdigest()}
    (docs_dir / "lone.blocks.jsonl").write_text(
        json.dumps(meta) + '\n{"type": "content", "blockid": "b1", "content": "A lone \\ud800 half.", "level": 0}\n')
    _, result = _ingest(settings, instance, sorted(scan_folder(docs_dir)))
    db = settings.db_path
    errors = dict(_rows(db, "SELECT doc_id, error FROM documents WHERE status = 'error'"))
    assert set(errors) == {"lone.txt"} and "holds a lone surrogate (U+D800)" in errors["lone.txt"]
    assert {d for (d,) in _rows(db, "SELECT DISTINCT doc_id FROM chunks")} == {"alpha.md", "sub/beta.txt"}


def test_a_file_name_that_is_not_utf8_fails_alone_under_a_printable_name(settings, instance, docs_dir):
    import os

    # b"caf\xe9.txt" (Latin-1 on disk): Python lists it with the byte as a lone surrogate.
    with open(os.path.join(os.fsencode(docs_dir), b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"Readable words in a file with a Latin-1 name.")
    sources = scan_folder(docs_dir)
    key = next(k for k in sources if k.startswith("caf"))
    assert key.startswith("caf_.txt~") and key.isprintable()
    assert sources[key].refusal == "caf\\xe9.txt: refused: its file name is not valid UTF-8; rename the file to read it"
    _, result = _ingest(settings, instance, sorted(sources))
    db = settings.db_path
    errors = dict(_rows(db, "SELECT doc_id, error FROM documents WHERE status = 'error'"))
    assert set(errors) == {key} and "not valid UTF-8" in errors[key]
    assert {d for (d,) in _rows(db, "SELECT DISTINCT doc_id FROM chunks")} == {"alpha.md", "sub/beta.txt"}


def test_the_sensor_lists_refused_links_without_crashing_or_reading_them(settings, instance, docs_dir, outside):
    from dagster import build_sensor_context

    from resources.documents import DocumentsFolder
    from resources.store import StoreResource

    (docs_dir / "passwd.txt").symlink_to(outside)
    (docs_dir / "gone.md").symlink_to(docs_dir / "deleted.md")
    project = build_project(settings)
    sensor = project.defs.resolve_sensor_def("documents_sensor")
    resources = {"documents": DocumentsFolder(root=settings.docs_root), "store": StoreResource(path=settings.db_path)}
    result = sensor(build_sensor_context(instance=instance, resources=resources))
    requested = {r.partition_key: r.run_key for r in result.run_requests}
    assert set(requested) == {"alpha.md", "gone.md", "passwd.txt", "sub/beta.txt"}
    assert hashlib.sha256(outside.read_bytes()).hexdigest() not in requested["passwd.txt"]


# -- item 4: a refused file is recorded with its real hash and not re-run -------------


def test_a_refused_file_is_recorded_with_its_real_hash_and_an_unchanged_folder_selects_nothing(
    settings, instance, docs_dir
):
    big = docs_dir / "big.json"
    big.write_text('{"k": "' + "v" * 5000 + '"}', encoding="utf-8")
    settings = settings.model_copy(update={"limits": settings.limits.model_copy(update={"max_bytes": 4096})})
    project, result = _ingest(settings, instance, sorted(scan_folder(docs_dir)))
    row = ChunkStore(settings.db_path).document("big.json")
    assert row["status"] == "error" and "raise limits.max_bytes" in row["error"]
    assert row["sha256"] == hashlib.sha256(big.read_bytes()).hexdigest() and row["size_bytes"] == big.stat().st_size

    # What the CLI and the nightly schedule decide on the unchanged folder: nothing to run.
    store = ChunkStore(settings.db_path)
    sources = scan_folder(docs_dir)
    current = {d: source_fingerprint(s) for d, s in sources.items()}
    assert diff_folder(current, store.document_hashes(str(docs_dir.resolve()))).to_process == {}
    materialized = {key: set(instance.get_materialized_partitions(key)) for key in DOC_ASSETS}
    failures = recorded_failures(store, current, settings.limits)
    assert failures == RecordedFailures(settled=frozenset({"big.json"}))
    assert "big.json" in plan_refresh(sorted(current), {k: set() for k in DOC_ASSETS}, DOC_ASSETS, {})
    assert plan_refresh(sorted(current), materialized, DOC_ASSETS, {}, failures) == {}
    assert recorded_failures(store).settled == {"big.json"}  # the nightly schedule, which does not read the folder

    # Raising the limit that refused it, as its message says, makes it worth a retry.
    raised = settings.limits.model_copy(update={"max_bytes": 1 << 20})
    retry = recorded_failures(store, current, raised)
    assert retry == RecordedFailures(retry=frozenset({"big.json"}))
    assert plan_refresh(sorted(current), materialized, DOC_ASSETS, {}, retry) == {"big.json": DOC_ASSETS}

    # Changed bytes are a new chance: no longer a recorded failure of these bytes.
    big.write_text('{"k": "short"}', encoding="utf-8")
    changed = {"big.json": source_fingerprint(scan_folder(docs_dir)["big.json"])}
    assert recorded_failures(store, changed, settings.limits) == RecordedFailures()


# -- item 8: a key depends on its own path only -----------------------------------------


def test_partition_keys_do_not_depend_on_other_files(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "x,y.txt").write_text("comma")
    (folder / "x_y.txt").write_text("underscore")
    both = {s.relative_path: d for d, s in scan_folder(folder).items()}
    assert both["x_y.txt"] == "x_y.txt"
    assert both["x,y.txt"] == "x_y.txt~" + hashlib.sha1(b"x,y.txt").hexdigest()[:8]
    (folder / "x,y.txt").unlink()
    assert {s.relative_path: d for d, s in scan_folder(folder).items()} == {"x_y.txt": "x_y.txt"}
    (folder / "x_y.txt").unlink()
    (folder / "x,y.txt").write_text("comma")
    assert {s.relative_path: d for d, s in scan_folder(folder).items()} == {"x,y.txt": both["x,y.txt"]}


@pytest.mark.parametrize("path", ["a.md", "sub/b c.txt", "zh/检索分块简介.txt", "v1.2/notes.md"])
def test_ordinary_paths_keep_their_key(path):
    assert clean_partition_key(path) == path


@pytest.mark.parametrize("path", ["a|b.md", "[x].txt", " lead.txt", "tab\there.md", "back\\slash.md"])
def test_cleaned_keys_are_safe_and_distinct_from_every_ordinary_key(path):
    key = clean_partition_key(path)
    assert not any(ch in key for ch in "|,[]\t\\") and key.strip() == key
    assert key.rsplit("~", 1)[1] == hashlib.sha1(path.encode()).hexdigest()[:8]


# -- item 3: the chunk budget is enforced where chunks are made ---------------------------


def test_a_document_over_the_chunk_budget_fails_its_strategy_naming_the_limit(settings, instance, caplog):
    settings = settings.model_copy(update={"limits": settings.limits.model_copy(update={"max_chunks": 1})})
    _, result = _ingest(settings, instance, ["alpha.md"])
    # A refusal is a message, not a crash: no Python trace logged (the CLI's terminal showed one).
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("assets")]
    failures = [e.step_failure_data.error.message for e in result.get_step_failure_events()]
    assert any("alpha.md: chunk count" in m and "over the limit of 1 (raise limits.max_chunks" in m for m in failures)
    assert _rows(settings.db_path, "SELECT count(*) FROM chunks") == [(0,)]
    assert _rows(settings.db_path, "SELECT status FROM documents") == [("parsed",)]  # the parse itself stands


def test_a_file_swapped_for_a_link_out_of_the_root_after_the_scan_is_not_parsed(docs_dir, outside):
    from assets.documents import parse_source
    from chunking.limits import DocumentLimits
    from chunking.parsers import DocumentError

    source = scan_folder(docs_dir)["alpha.md"]
    assert "Alpha" in parse_source(source, DocumentLimits(), str(docs_dir)).text
    (docs_dir / "alpha.md").unlink()
    (docs_dir / "alpha.md").symlink_to(outside)  # between the scan and the parse
    with pytest.raises(DocumentError, match="alpha.md: refused: it now resolves outside the documents folder"):
        parse_source(source, DocumentLimits(), str(docs_dir))


def test_a_path_too_long_to_examine_fails_alone_and_a_vanished_file_is_not_listed(docs_dir, monkeypatch):
    import os

    # 16 folders of 250 characters: the folder lists, but its file's path is over PATH_MAX.
    fd = os.open(docs_dir, os.O_RDONLY)
    try:
        for _ in range(16):
            os.mkdir("d" * 250, dir_fd=fd)
            deeper = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.close(os.open("f" * 100 + ".txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    real_lstat = Path.lstat

    def lstat(self):
        if self.name == "alpha.md":
            raise FileNotFoundError(2, "No such file or directory", str(self))  # removed since it was listed
        return real_lstat(self)

    monkeypatch.setattr(Path, "lstat", lstat)
    sources = scan_folder(docs_dir)  # before: OSError [Errno 36] out of the scan, and no document processed
    (deep,) = [s for s in sources.values() if s.relative_path.endswith(".txt") and "ddd" in s.relative_path]
    assert deep.refusal.endswith(": refused: cannot be examined: File name too long")
    assert "alpha.md" not in sources and "sub/beta.txt" in sources


def test_a_folder_that_cannot_be_listed_is_named_not_silently_skipped(docs_dir, caplog):
    import os

    locked = docs_dir / "locked"
    locked.mkdir()
    (locked / "hidden.txt").write_text("words", encoding="utf-8")
    real_scandir = os.scandir

    def scandir(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))  # as for a folder without r-x (root ignores modes)
        return real_scandir(path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        with caplog.at_level("WARNING", logger="resources.documents"):
            sources = scan_folder(docs_dir)
    assert set(sources) == {"alpha.md", "sub/beta.txt"}
    assert f"documents folder: cannot list {locked}: Permission denied; its files are left out" in caplog.text


def test_a_file_that_vanished_or_cannot_be_read_gets_a_fingerprint_that_says_so(docs_dir):
    from resources.documents import current_fingerprint

    sources = scan_folder(docs_dir)
    (docs_dir / "alpha.md").unlink()
    assert current_fingerprint(sources["alpha.md"]) is None
    (docs_dir / "alpha.md").mkdir()  # replaced by a folder: reading it fails
    assert current_fingerprint(sources["alpha.md"]).startswith("unreadable:")
    # Its read error is recorded under that same fingerprint, so the next scan finds it unchanged.
    from assets.documents import read_source
    from chunking.limits import DocumentLimits

    read = read_source("alpha.md", sources, DocumentLimits())
    assert read.sha256 == current_fingerprint(sources["alpha.md"]) and "alpha.md: cannot be read: " in read.error
    assert current_fingerprint(sources["sub/beta.txt"]) == source_fingerprint(sources["sub/beta.txt"])
