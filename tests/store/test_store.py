"""The store: one copy per vector, the current_* views, one folder per database,
migration of a version-1 file, and readers beside a writer in another process.

Tests taking ``store`` run in both modes (conftest.py): the embedded DuckDB file and a
DuckLake with its catalog in PostgreSQL. ``file_store`` tests are about the file itself
(its migration, its lock)."""

from datetime import datetime
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest

from chunking.model import Chunk, Page, ParsedDocument
from chunking.sidecar import sidecar_paths, write_sidecars
from resources import schema
from resources.store import ChunkStore, SourceRootConflict, StoreLockedError

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT = "/docs/one"
MODEL = "test-model"


def parsed(doc_id: str, text: str, sha: str) -> ParsedDocument:
    return ParsedDocument(doc_id=doc_id, source_name=doc_id, format="txt", text=text,
                          pages=[Page(page_num=0, char_offset=0, text=text)], sha256=sha)


def chunk(text: str, start: int = 0) -> Chunk:
    return Chunk(text=text, token_count=len(text.split()), char_start=start, char_end=start + len(text))


def ingest(store: ChunkStore, doc_id: str, text: str, sha: str, root: str = ROOT) -> None:
    """What the assets do for one document: read, parse, chunk (one chunk), embed."""
    store.record_read(doc_id, root, doc_id, sha, len(text))
    store.replace_parsed(parsed(doc_id, text, sha), root, doc_id, len(text))
    c = chunk(text)
    store.replace_chunks(doc_id, "recursive", [c], config_hash="cfg", doc_sha256=sha)
    vector = np.arange(4, dtype=np.float32) + len(text)
    store.replace_embeddings(doc_id, "recursive", MODEL, [(0, c.text_sha256, vector)], {c.text_sha256: vector})


def query(store: ChunkStore, sql: str, params=None):
    with store.connect(read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


# -- 12.9: a vector is stored once ------------------------------------------------------


def test_a_vector_is_stored_once_and_embeddings_reads_as_before(store):
    ingest(store, "a.txt", "the same words", "sha-a")
    ingest(store, "b.txt", "the same words", "sha-b")  # same text, same model: one vector
    assert query(store, "SELECT count(*) FROM embedding_vectors") == [(1,)]
    rows = query(store, "SELECT doc_id, strategy, chunk_index, model_id, text_sha256, dim, embedding "
                        "FROM embeddings ORDER BY doc_id")
    assert [r[:3] for r in rows] == [("a.txt", "recursive", 0), ("b.txt", "recursive", 0)]
    assert rows[0][3:] == rows[1][3:] and rows[0][5] == 4 and rows[0][6] == [14.0, 15.0, 16.0, 17.0]
    # No base table but embedding_vectors holds a vector column.
    vector_tables = query(store, "SELECT table_name FROM information_schema.columns c "
                                 "JOIN information_schema.tables t USING (table_name) "
                                 "WHERE c.data_type LIKE 'FLOAT%' AND t.table_type = 'BASE TABLE'")
    assert vector_tables == [("embedding_vectors",)]
    assert store.load_embeddings("b.txt", "recursive")[0][1].tolist() == [14.0, 15.0, 16.0, 17.0]


def test_deleting_a_document_keeps_the_vector_other_chunks_reference(store):
    ingest(store, "a.txt", "the same words", "sha-a")
    ingest(store, "b.txt", "the same words", "sha-b")
    store.delete_document("a.txt")
    assert query(store, "SELECT doc_id FROM embeddings") == [("b.txt",)]
    assert query(store, "SELECT count(*) FROM chunk_embeddings WHERE doc_id = 'a.txt'") == [(0,)]


def test_a_referenced_vector_missing_from_the_store_is_stored(store):
    # rows carry every vector: a caller that believed one cached never leaves a dangling reference.
    store.record_read("a.txt", ROOT, "a.txt", "sha", 1)
    store.replace_embeddings("a.txt", "recursive", MODEL, [(0, "h0", np.ones(2)), (1, "h1", np.zeros(2))], {})
    assert query(store, "SELECT count(*) FROM embeddings WHERE doc_id = 'a.txt'") == [(2,)]


def make_v1_database(path: Path) -> None:
    """A file as schema version 1 left it: vectors in embeddings and embedding_cache."""
    tables = [s for s in schema.DDL if "CREATE TABLE" in s
              and s not in (schema.EMBEDDING_VECTORS_DDL, schema.CHUNK_EMBEDDINGS_DDL)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(path)) as con:
        for statement in (*tables, *schema.V1_EMBEDDING_TABLES_DDL):
            con.execute(statement)
        con.execute("INSERT INTO schema_info VALUES ('schema_version', '1')")
        con.execute("INSERT INTO embeddings VALUES ('a.txt', 'recursive', 0, 'm', 'h0', 2, [1, 2]), "
                    "('a.txt', 'recursive', 1, 'm', 'h1', 2, [3, 4]), ('b.txt', 'recursive', 0, 'm', 'h0', 2, [1, 2])")
        # The cache holds h0 and a vector no chunk references any more; h1 only in embeddings.
        con.execute("INSERT INTO embedding_cache VALUES ('m', 'h0', 2, [1, 2]), ('m', 'old', 2, [9, 9])")


V1_EMBEDDINGS = [
    ("a.txt", "recursive", 0, "m", "h0", 2, [1.0, 2.0]),
    ("a.txt", "recursive", 1, "m", "h1", 2, [3.0, 4.0]),
    ("b.txt", "recursive", 0, "m", "h0", 2, [1.0, 2.0]),
]


def test_a_version_1_file_is_migrated_with_every_vector(file_store):
    store = file_store
    make_v1_database(store.path)
    store.initialize()
    assert query(store, "SELECT value FROM schema_info WHERE key = 'schema_version'") == [(str(schema.SCHEMA_VERSION),)]
    assert query(store, "SELECT * FROM embeddings ORDER BY doc_id, chunk_index") == V1_EMBEDDINGS
    assert query(store, "SELECT text_sha256 FROM embedding_vectors ORDER BY 1") == [("h0",), ("h1",), ("old",)]
    kinds = dict(query(store, "SELECT table_name, table_type FROM information_schema.tables"))
    assert kinds["embeddings"] == "VIEW" and "embedding_cache" not in kinds
    assert store.cached_embeddings("m", ["old"])["old"].tolist() == [9.0, 9.0]


def test_a_failed_migration_leaves_the_version_1_file_intact(file_store, monkeypatch):
    store = file_store
    make_v1_database(store.path)
    broken = (*schema.MIGRATIONS[1], "SELECT * FROM no_such_table")
    monkeypatch.setitem(schema.MIGRATIONS, 1, broken)
    with pytest.raises(duckdb.CatalogException):
        store.initialize()
    with duckdb.connect(str(store.path), read_only=True) as con:
        assert con.execute("SELECT value FROM schema_info").fetchall() == [("1",)]
        assert con.execute("SELECT * FROM embeddings ORDER BY doc_id, chunk_index").fetchall() == V1_EMBEDDINGS
        assert con.execute("SELECT count(*) FROM embedding_cache").fetchone() == (2,)
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert "embedding_vectors" not in tables and "chunk_embeddings" not in tables


# -- 12.7: stale rows ------------------------------------------------------------------


def test_current_chunks_hold_only_the_current_parse(store):
    ingest(store, "a.txt", "alpha text", "sha-1")
    ingest(store, "b.txt", "beta text", "sha-b")
    current = "SELECT doc_id FROM current_chunks ORDER BY doc_id"
    assert query(store, current) == [("a.txt",), ("b.txt",)]
    chunk_columns = query(store, "SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = 'chunks' ORDER BY ordinal_position")
    assert query(store, "SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_name = 'current_chunks' ORDER BY ordinal_position") == chunk_columns

    # a.txt changed and became unparseable: its old rows stay, marked, but are not current.
    store.record_read("a.txt", ROOT, "a.txt", "sha-2", 5)
    assert query(store, current) == [("b.txt",)]
    store.record_error("a.txt", ROOT, "a.txt", "sha-2", 5, "a.txt: broken")
    assert query(store, current) == [("b.txt",)]
    assert query(store, "SELECT doc_id FROM current_embeddings") == [("b.txt",)]
    assert query(store, "SELECT count(*) FROM chunks WHERE doc_id = 'a.txt'") == [(1,)]
    # The old rows are told apart by the document row.
    assert query(store, "SELECT c.doc_sha256, d.sha256, d.status FROM chunks c JOIN documents d USING (doc_id) "
                        "WHERE doc_id = 'a.txt'") == [("sha-1", "sha-2", "error")]
    summary = store.summary(ROOT)
    assert summary["chunks"] == {"recursive": 1} and summary["embeddings"] == {"recursive": 1}

    # Parsed again but not yet re-chunked: still not current.
    store.replace_parsed(parsed("a.txt", "alpha text v2", "sha-2"), ROOT, "a.txt", 5)
    assert query(store, current) == [("b.txt",)]


def test_deleting_a_document_deletes_its_sidecars(store):
    ingest(store, "sub/a.txt", "alpha text", "sha-1")
    ingest(store, "b.txt", "beta text", "sha-b")
    for doc_id in ("sub/a.txt", "b.txt"):
        write_sidecars(parsed(doc_id, "text", "sha"), store.sidecar_dir)
    store.delete_document("sub/a.txt")
    assert not any(p.exists() for p in sidecar_paths("sub/a.txt", store.sidecar_dir))
    assert all(p.exists() for p in sidecar_paths("b.txt", store.sidecar_dir))


# -- 11.7: one folder per database -------------------------------------------------------


def test_a_second_folder_is_refused_and_the_first_keeps_its_rows(store):
    ingest(store, "notes.txt", "first folder", "sha-1", root=ROOT)
    with pytest.raises(SourceRootConflict, match=r"holds the documents of /docs/one.*CHUNKYARD_DB"):
        store.claim_source_root("/docs/two")
    for write in (
        lambda: store.record_read("notes.txt", "/docs/two", "notes.txt", "sha-2", 1),
        lambda: store.record_error("notes.txt", "/docs/two", "notes.txt", "sha-2", 1, "x"),
        lambda: store.replace_parsed(parsed("notes.txt", "second folder", "sha-2"), "/docs/two", "notes.txt", 1),
    ):
        with pytest.raises(SourceRootConflict):
            write()
    assert query(store, "SELECT source_root, sha256, status FROM documents") == [(ROOT, "sha-1", "parsed")]
    assert query(store, "SELECT text FROM pages") == [("first folder",)]
    assert store.source_root_conflict("/docs/two") and store.source_root_conflict(ROOT) is None
    store.claim_source_root(ROOT)  # the same folder again is fine
    assert store.source_root() == ROOT


def test_the_advice_for_a_second_folder_never_names_the_database_that_refused_it(tmp_path, monkeypatch):
    # The advice's own database for /docs/one/notes (data/notes/chunkyard.duckdb, from the project
    # folder), asked to take another folder called notes: its advice must name another file.
    monkeypatch.chdir(tmp_path)
    store = ChunkStore(tmp_path / "data" / "notes" / "chunkyard.duckdb")
    ingest(store, "a.txt", "first folder", "sha-1", root="/docs/one/notes")
    message = store.source_root_conflict("/docs/two/notes")
    assert "CHUNKYARD_DB=data/notes-2/chunkyard.duckdb DAGSTER_HOME=.dagster-notes-2 make run DOCS=/docs/two/notes" in message
    # From another folder, the same file is not data/notes/ there: the plain name.
    monkeypatch.chdir(tmp_path / "data")
    assert "CHUNKYARD_DB=data/notes/chunkyard.duckdb" in store.source_root_conflict("/docs/two/notes")


def test_an_unclaimed_database_is_claimed_only_if_it_holds_one_folder(store):
    store.initialize()
    with store.transaction() as con:  # as a database written before claims existed could be
        con.execute("INSERT INTO documents (doc_id, source_root, source_path, sha256, size_bytes, status, updated_at) "
                    "VALUES ('a', '/x', 'a', 's', 1, 'read', now()), ('b', '/y', 'b', 's', 1, 'read', now())")
    with pytest.raises(SourceRootConflict, match="/y"):
        store.claim_source_root("/x")
    assert store.source_root() is None
    with store.transaction() as con:
        con.execute("DELETE FROM documents WHERE source_root = '/y'")
    store.claim_source_root("/x")
    assert store.source_root() == "/x"


# -- 12.6: readers beside the writer, in real processes ---------------------------------------


def start(code: str) -> subprocess.Popen:
    """A Python process of this repository that prints 'ready' once it holds what it should hold."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + proc.stderr.read()
    return proc


def stop(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate("\n", timeout=60)
    return out


def test_a_reader_holding_a_snapshot_never_blocks_the_writer(store):
    ingest(store, "a.txt", "alpha text", "sha-1")
    reader = start(f"""
        import sys
        from resources.store import ChunkStore, LakeConfig, S3Options  # the names in LakeConfig's repr
        with ChunkStore({str(store.path)!r}, lake={store.lake!r}).snapshot() as con:
            print("ready", flush=True)
            sys.stdin.readline()
            print(con.execute("SELECT count(*) FROM current_chunks").fetchone()[0], flush=True)
    """)
    try:
        writer = ChunkStore(store.path, lock_timeout_s=0.5, sidecar_dir=store.sidecar_dir, lake=store.lake)
        ingest(writer, "b.txt", "beta text", "sha-b")  # would raise StoreLockedError on a held live file
    finally:
        seen = stop(reader)
    assert seen.strip() == "1"  # the snapshot's state, unchanged by the later write
    assert query(store, "SELECT count(*) FROM current_chunks") == [(2,)]


def test_a_held_live_connection_is_reported_in_one_line_with_its_pid(file_store):
    store = file_store
    store.initialize()
    holder = start(f"""
        import sys, duckdb
        con = duckdb.connect({str(store.path)!r}, read_only=True)
        print("ready", flush=True)
        sys.stdin.readline()
    """)
    try:
        with pytest.raises(StoreLockedError) as caught:
            ChunkStore(store.path, lock_timeout_s=0.3).record_read("a.txt", ROOT, "a.txt", "s", 1)
    finally:
        stop(holder)
    message = str(caught.value)
    assert f"locked by process {holder.pid}" in message and "\n" not in message
    store.record_read("a.txt", ROOT, "a.txt", "s", 1)  # free again once the holder is gone


# -- one write transaction per step (issue 16: commits, not compute, bounded lake runs) -----


def writes_committed(store: ChunkStore) -> int:
    return query(store, "SELECT writes FROM write_serial")[0][0]


def test_a_steps_documents_are_written_in_one_commit_each_whole(store):
    docs = {f"d{i}.txt": f"text number {i} of the batch" for i in range(5)}
    for doc_id, text in docs.items():
        store.record_read(doc_id, ROOT, doc_id, f"sha-{doc_id}", len(text))
    before = writes_committed(store)
    failures = store.write_documents(
        {doc_id: ([chunk(text), chunk("second " + text, 3)], f"sha-{doc_id}") for doc_id, text in docs.items()},
        lambda items: store.replacing_chunks("recursive", items, config_hash="cfg"))
    assert failures == {}
    assert writes_committed(store) == before + 1  # one commit for five documents
    for doc_id, text in docs.items():
        assert [c.text for c in store.load_chunks(doc_id, "recursive")] == [text, "second " + text]


def test_a_document_whose_rows_fail_is_left_out_and_keeps_its_old_rows(store):
    docs = ("a.txt", "b.txt", "c.txt")
    for doc_id in docs:
        store.record_read(doc_id, ROOT, doc_id, "sha-old", 3)
        store.replace_chunks(doc_id, "recursive", [chunk(f"old {doc_id}")], config_hash="cfg", doc_sha256="sha-old")
    # b.txt's new chunks cannot be stored (a token count over INTEGER): a DuckDB error of its own rows.
    bad = Chunk(text="new b.txt", token_count=2**40, char_start=0, char_end=9)
    failures = store.write_documents(
        {doc_id: ([bad] if doc_id == "b.txt" else [chunk(f"new {doc_id}")], "sha-new") for doc_id in docs},
        lambda items: store.replacing_chunks("recursive", items, config_hash="cfg"))
    assert set(failures) == {"b.txt"} and isinstance(failures["b.txt"], duckdb.Error)
    assert [c.text for c in store.load_chunks("a.txt", "recursive")] == ["new a.txt"]
    assert [c.text for c in store.load_chunks("c.txt", "recursive")] == ["new c.txt"]
    assert [c.text for c in store.load_chunks("b.txt", "recursive")] == ["old b.txt"]  # nothing of it written


def test_a_row_the_binding_cannot_convert_fails_its_document_alone(store):
    # A lone surrogate cannot be cast to a DuckDB VARCHAR: the Python binding raises a plain
    # RuntimeError ("Unable to cast Python instance"), not a duckdb.Error. It is still that
    # document's rows, not the store's fault.
    docs = ("a.txt", "b.txt", "c.txt")
    for doc_id in docs:
        store.record_read(doc_id, ROOT, doc_id, "sha-old", 3)
        store.replace_chunks(doc_id, "recursive", [chunk(f"old {doc_id}")], config_hash="cfg", doc_sha256="sha-old")
    def write_of(subset):
        def write(con):
            if "b.txt" in subset:  # b.txt's rows carry a value the binding cannot convert
                con.execute("SELECT ?::VARCHAR", ["b\ud800"])
            store.replacing_chunks("recursive", {d: ([chunk(f"new {d}")], "sha-new") for d in subset},
                                   config_hash="cfg")(con)
        return write

    failures = store.write_documents(dict.fromkeys(docs), write_of)
    assert set(failures) == {"b.txt"} and type(failures["b.txt"]) is RuntimeError
    assert [c.text for c in store.load_chunks("a.txt", "recursive")] == ["new a.txt"]
    assert [c.text for c in store.load_chunks("c.txt", "recursive")] == ["new c.txt"]
    assert [c.text for c in store.load_chunks("b.txt", "recursive")] == ["old b.txt"]


def test_the_stores_own_refusals_are_raised_not_charged_to_a_document(store):
    from resources.store import WriteConflictError

    def write_of(subset):
        def write(con):
            raise WriteConflictError("lost")
        return write

    with pytest.raises(WriteConflictError):
        store.write_documents({"a.txt": 1, "b.txt": 2}, write_of)


def test_a_cause_shared_by_every_document_raises_with_nothing_stored(store):
    store.record_read("a.txt", ROOT, "a.txt", "sha", 3)
    bad = Chunk(text="x", token_count=2**40, char_start=0, char_end=1)
    items = {d: ([bad], "sha") for d in ("a.txt", "b.txt")}

    def write_of(subset):
        return store.replacing_chunks("recursive", subset, config_hash="cfg")

    with pytest.raises(duckdb.Error):
        store.write_documents(items, write_of)
    # One document: the only one to blame, so its error is returned as its own (its step records
    # it on the document's partition) rather than raised; nothing of it is stored either way.
    (only,) = store.write_documents({"a.txt": items["a.txt"]}, write_of).items()
    assert only[0] == "a.txt" and isinstance(only[1], duckdb.Error)
    assert query(store, "SELECT count(*) FROM chunks") == [(0,)]


def test_a_retried_steps_stage_costs_replace_its_rows_and_keep_the_others(store):
    def row(run, doc, stage, strategy, seconds):
        return ("ingest", run, doc, stage, strategy, seconds, 0.0, 0.0, 0, 0)

    at = datetime(2026, 1, 1)
    store.record_stage_costs([row("r1", "a", "chunk", "recursive", 1.0), row("r1", "b", "chunk", "recursive", 2.0),
                              row("r1", "a", "chunk", "sentence", 3.0), row("r0", "a", "chunk", "recursive", 4.0)],
                             recorded_at=at)
    # The same step (run r1, chunk, recursive) run again: its rows replaced, every other row kept.
    store.record_stage_costs([row("r1", "a", "chunk", "recursive", 5.0), row("r1", "b", "chunk", "recursive", 6.0)],
                             recorded_at=at)
    assert query(store, "SELECT run_id, doc_id, strategy, seconds FROM stage_costs ORDER BY ALL") == [
        ("r0", "a", "recursive", 4.0), ("r1", "a", "recursive", 5.0), ("r1", "a", "sentence", 3.0),
        ("r1", "b", "recursive", 6.0),
    ]


def test_a_schema_3_file_reads_read_only_before_any_write_migrates_it(file_store):
    from orchestration.status import stored_status

    store = file_store
    store.initialize()
    store.record_read("a.txt", ROOT, "a.txt", "sha", 3)
    with duckdb.connect(str(store.path)) as con:  # as schema 3 left it: no strategy_failures
        con.execute("DROP TABLE strategy_failures")
        con.execute("UPDATE schema_info SET value = '3' WHERE key = 'schema_version'")
    # Read-only callers (status, the nightly schedule, the summary) do not migrate: they read none.
    assert store.strategy_failures() == {}
    assert store.summary()["errors"] == []
    with store.connect(read_only=True) as con:
        assert [f.failed for f in stored_status(con)] == [[]]
    store.initialize()  # the first write migrates
    assert query(store, "SELECT value FROM schema_info WHERE key = 'schema_version'") == [(str(schema.SCHEMA_VERSION),)]
    store.record_strategy_failures("recursive", {"a.txt": ("sha", "cfg", "a.txt: refused")})
    assert store.strategy_failures() == {"recursive": {"a.txt": ("sha", "cfg", "a.txt: refused")}}


def test_strategy_failures_are_replaced_cleared_when_stored_and_forgotten_with_their_strategy(store):
    store.record_read("a.txt", ROOT, "a.txt", "sha", 3)
    store.record_strategy_failures("recursive", {"a.txt": ("sha", "cfg", "first")})
    store.record_strategy_failures("recursive", {"a.txt": ("sha", "cfg2", "second")})
    store.record_strategy_failures("token", {"a.txt": ("sha", "cfg", "token's")})
    assert store.strategy_failures() == {"recursive": {"a.txt": ("sha", "cfg2", "second")},
                                         "token": {"a.txt": ("sha", "cfg", "token's")}}
    store.write_transaction(store.replacing_chunks("recursive", {"a.txt": ([chunk("a")], "sha")}, config_hash="cfg2"))
    assert set(store.strategy_failures()) == {"token"}  # stored now: no longer failed
    store.forget_strategy_failures(["recursive"])  # token is no longer configured
    assert store.strategy_failures() == {}
    store.record_strategy_failures("recursive", {"a.txt": ("sha", "cfg", "x")})
    store.delete_document("a.txt")
    assert store.strategy_failures() == {}


def test_prune_removes_only_the_strategies_no_longer_configured(store):
    from chunking.model import Chunk

    store.record_read("a.txt", ROOT, "a.txt", "sha", 3)
    chunk = Chunk(text="abc", token_count=1, char_start=0, char_end=3)
    for strategy in ("recursive", "gone"):
        store.replace_chunks("a.txt", strategy, [chunk, chunk], config_hash="cfg", doc_sha256="sha")
        store.replace_embeddings("a.txt", strategy, MODEL, [(0, "h0", np.ones(2)), (1, "h0", np.ones(2))], {})
    store.record_strategy_failures("gone", {"a.txt": ("sha", "cfg", "refused")})
    assert store.prune_strategies(["recursive"]) == {"gone": 2}
    assert query(store, "SELECT DISTINCT strategy FROM chunks") == [("recursive",)]
    assert query(store, "SELECT DISTINCT strategy FROM embeddings") == [("recursive",)]
    assert store.strategy_failures() == {}
    assert store.cached_embeddings(MODEL, ["h0"])  # the vectors stay: a cache
    assert store.prune_strategies(["recursive"]) == {}
