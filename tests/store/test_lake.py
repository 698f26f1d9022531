"""Lake mode: the DDL per mode, the [store] settings, and concurrent writers on one DuckLake.

The concurrency tests run real processes against a real PostgreSQL catalog (conftest.py):
several writers at once, one of them killed with SIGKILL mid-write, then a rerun.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from orchestration.settings import Settings, load_settings
from resources import schema
from resources.store import ChunkStore, LakeConfig, StoreResource, WriteConflictError, lake_config

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT = "/docs/lake"

# -- the DDL, rendered per mode ------------------------------------------------------------


def test_lake_ddl_is_the_file_ddl_without_its_keys():
    for file_statement, lake_statement in zip(schema.rendered_ddl("duckdb"), schema.rendered_ddl("ducklake")):
        assert "PRIMARY KEY" not in lake_statement
        # Only the constraint goes: every column line keeps its name, type and NOT NULL.
        file_columns = [line.split("--")[0].strip().rstrip(",").replace(" PRIMARY KEY", "")
                        for line in file_statement.splitlines() if "PRIMARY KEY (" not in line]
        lake_columns = [line.split("--")[0].strip().rstrip(",") for line in lake_statement.splitlines()]
        assert file_columns == lake_columns
    assert schema.rendered_ddl("duckdb") == schema.DDL
    with pytest.raises(ValueError, match="unknown store mode"):
        schema.render("CREATE TABLE t (x INTEGER)", "postgres")


def test_the_logical_keys_are_read_from_the_ddl():
    keys = schema.primary_keys()
    assert keys["documents"] == ("doc_id",)
    assert keys["chunks"] == ("doc_id", "strategy", "chunk_index")
    assert keys["embedding_vectors"] == ("model_id", "text_sha256")
    assert keys["schema_info"] == ("key",)
    # Every table of the schema has one, but the single-row counter.
    tables = {s.split("EXISTS")[1].split("(")[0].strip() for s in schema.DDL if "CREATE TABLE" in s}
    assert tables - set(keys) == {"write_serial"}


# -- [store] settings ----------------------------------------------------------------------


def test_store_settings_default_to_the_file_and_lake_mode_needs_both_locations(tmp_path, monkeypatch):
    for variable in ("CHUNKYARD_STORE_MODE", "CHUNKYARD_STORE_CATALOG", "CHUNKYARD_STORE_DATA_PATH"):
        monkeypatch.delenv(variable, raising=False)
    assert Settings().store.lake() is None
    assert load_settings(REPO_ROOT / "chunkyard.toml").store.mode == "duckdb"  # the shipped default
    with pytest.raises(ValueError, match="needs catalog .* and data_path"):
        Settings(store={"mode": "ducklake", "catalog": "postgres:dbname=x"})
    with pytest.raises(ValueError, match="expected postgres:<libpq string>, sqlite:<file> or duckdb:<file>"):
        Settings(store={"mode": "ducklake", "catalog": "mysql:x", "data_path": "d"})
    with pytest.raises(ValueError):
        Settings(store={"mode": "lake"})

    config = tmp_path / "chunkyard.toml"
    config.write_text('[store]\nmode = "ducklake"\ncatalog = "sqlite:meta.sqlite"\ndata_path = "lake"\n')
    monkeypatch.chdir(tmp_path)
    lake = load_settings(config).store.lake()
    # Relative paths are stored absolute: every process of a deployment names the same lake.
    assert lake == LakeConfig(catalog=f"sqlite:{tmp_path}/meta.sqlite", data_path=str(tmp_path / "lake"))
    assert lake.attach_target() == f"ducklake:sqlite:{tmp_path}/meta.sqlite"
    assert lake.extensions() == ("ducklake", "sqlite_scanner")

    monkeypatch.setenv("CHUNKYARD_STORE_CATALOG", "dbname=chunkyard host=db password=secret")
    monkeypatch.setenv("CHUNKYARD_STORE_DATA_PATH", "s3://bucket/lake")
    from_env = load_settings(config).store.lake()
    assert from_env.catalog_kind() == "postgres" and from_env.extensions() == ("ducklake", "postgres_scanner", "httpfs")
    assert from_env.attach_target() == "ducklake:postgres:dbname=chunkyard host=db password=secret"
    assert "secret" not in from_env.describe()

    resource = StoreResource(path=str(tmp_path / "x.duckdb"), **load_settings(config).store.model_dump())
    assert resource.store().lake == from_env and resource.store().mode == "ducklake"
    assert lake_config("duckdb", None, None) is None


def test_a_sqlite_catalog_holds_a_lake_on_one_machine(tmp_path):
    lake = LakeConfig(catalog=f"sqlite:{tmp_path}/meta.sqlite", data_path=str(tmp_path / "data"))
    store = ChunkStore(tmp_path / "x.duckdb", lake=lake)
    store.record_read("a.txt", ROOT, "a.txt", "sha", 3)
    assert store.document("a.txt")["status"] == "read"
    assert (tmp_path / "meta.sqlite").is_file()


def test_user_sql_cannot_change_a_lake_and_a_missing_catalog_is_not_created(tmp_path):
    # `chunkyard sql` is read-only in both modes (in lake mode DELETE / CREATE / DROP ran and
    # printed "ok", and the next run saw nothing to do); `status` of a lake whose catalog file is
    # not there says so instead of creating it.
    lake = LakeConfig(catalog=f"sqlite:{tmp_path}/meta.sqlite", data_path=str(tmp_path / "data"))
    store = ChunkStore(tmp_path / "x.duckdb", lake=lake)
    assert not store.exists()
    store.record_read("a.txt", ROOT, "a.txt", "sha", 3)
    assert store.exists()
    with store.query_connection() as con:
        assert con.execute("SELECT count(*) FROM documents").fetchone()[0] == 1
        for statement in ("DELETE FROM documents", "CREATE TABLE zzz (a INTEGER)", "DROP TABLE chunks"):
            with pytest.raises(duckdb.Error, match="read-only"):
                con.execute(statement)
    assert store.document("a.txt")["status"] == "read"
    typo = ChunkStore(tmp_path / "x.duckdb", lake=LakeConfig(catalog=f"sqlite:{tmp_path}/meta.sqlit",
                                                            data_path=str(tmp_path / "data")))
    assert not typo.exists() and not (tmp_path / "meta.sqlit").exists()


def test_catalog_passwords_are_never_shown():
    from resources.store import redact_passwords

    for catalog in ("postgres:host=h dbname=d user=u password=s3cr3t", "host=h password = s3cr3t dbname=d",
                    "postgres:host=h PASSWORD='s3 cr\\'3t' dbname=d", "postgresql://u:s3cr3t@h:5432/d",
                    "postgres://u:s3cr3t@h/d?sslmode=require"):
        shown = LakeConfig(catalog=catalog if "://" not in catalog else "postgres:" + catalog, data_path="/d").describe()
        assert "s3" not in shown.replace("s3://", "") and "cr" not in shown and "***" in shown, shown
        assert "s3cr3t" not in redact_passwords(f'IO Error: could not connect to "{catalog}"')


# -- many writers, one lake ----------------------------------------------------------------

WRITER = """
    import sys, time
    import numpy as np
    from chunking.model import Chunk, Page, ParsedDocument
    from resources.store import ChunkStore, LakeConfig, S3Options

    lake = LakeConfig(catalog={catalog!r}, data_path={data_path!r}, s3=S3Options(**{s3!r}))
    store = ChunkStore("unused.duckdb", lake=lake)
    tag, docs, rounds = {tag!r}, {docs!r}, {rounds!r}
    print("ready", flush=True)
    sys.stdin.readline()  # every writer starts at once
    n = 0
    while rounds is None or n < rounds:
        n += 1
        for doc_id in docs:
            label = f"{{tag}}.{{n}}"
            # Each unit of work names its writer and round in every row it writes.
            text = f"{{doc_id}} {{label}} " * 20
            store.record_read(doc_id, {root!r}, doc_id, label, len(text))
            store.replace_parsed(ParsedDocument(doc_id=doc_id, source_name=doc_id, format="txt", text=text,
                                                pages=[Page(page_num=0, char_offset=0, text=text)], sha256=label),
                                 {root!r}, doc_id, len(text))
            chunks = [Chunk(text=f"{{label}} part {{i}} of {{doc_id}}", token_count=5, char_start=0, char_end=5)
                      for i in range(3)]
            store.replace_chunks(doc_id, "recursive", chunks, config_hash="cfg", doc_sha256=label)
            # One vector per document whoever writes it, and one for all: the cache is contended.
            rows = [(i, c.text_sha256, np.full(4, i, dtype=np.float32)) for i, c in enumerate(chunks)]
            shared = {{f"vector-of-{{doc_id}}": np.ones(4, dtype=np.float32), "shared-vector": np.zeros(4)}}
            store.replace_embeddings(doc_id, "recursive", "m",
                                     rows + [(3 + i, sha, v) for i, (sha, v) in enumerate(shared.items())], shared)
            print("wrote", doc_id, label, flush=True)
"""


def start_writers(lake: LakeConfig, *work: tuple[str, list[str], int | None]) -> list[subprocess.Popen]:
    """One process per (tag, documents, rounds; None = until killed), released together once all are ready."""
    procs = []
    for tag, docs, rounds in work:
        code = textwrap.dedent(WRITER).format(catalog=lake.catalog, data_path=lake.data_path, s3=vars(lake.s3),
                                               tag=tag, docs=docs, rounds=rounds, root=ROOT)
        procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return procs


def assert_whole_documents(store: ChunkStore) -> dict[str, str]:
    """Every logical key once, and each unit of work (parse; chunks; embeddings) of one writer's round.

    Returns doc_id -> the label of its current parse.
    """
    with store.snapshot() as con:
        for table, key in schema.primary_keys().items():
            columns = ", ".join(key)
            duplicates = con.execute(
                f"SELECT {columns}, count(*) FROM {table} GROUP BY ALL HAVING count(*) > 1").fetchall()
            assert duplicates == [], f"{table}: duplicate keys {duplicates[:3]}"
        labels = dict(con.execute("SELECT doc_id, sha256 FROM documents").fetchall())
        parses = con.execute(
            "SELECT doc_id, list(DISTINCT split_part(text, ' ', 2)), count(*) FROM pages GROUP BY doc_id").fetchall()
        for doc_id, page_labels, pages in parses:
            assert pages == 1 and len(page_labels) == 1, (doc_id, page_labels)
        chunk_sets = con.execute(
            "SELECT doc_id, list(DISTINCT doc_sha256), list(DISTINCT split_part(text, ' ', 1)), count(*) "
            "FROM chunks GROUP BY doc_id").fetchall()
        for doc_id, shas, text_labels, count in chunk_sets:
            assert count == 3 and len(shas) == 1 and shas == text_labels, (doc_id, shas, text_labels, count)
        # The embedding unit references the vectors of one chunk set (by hash) plus the shared one.
        references = con.execute("""
            SELECT e.doc_id, count(*), count(v.text_sha256)
            FROM chunk_embeddings e LEFT JOIN embedding_vectors v USING (model_id, text_sha256)
            GROUP BY e.doc_id""").fetchall()
        for doc_id, count, resolved in references:
            assert count == 5 and resolved == 5, (doc_id, count, resolved)
        # A current chunk set is always the document's current parse.
        stale_current = con.execute(
            "SELECT count(*) FROM current_chunks c JOIN documents d USING (doc_id) "
            "WHERE c.doc_sha256 <> d.sha256").fetchone()[0]
        assert stale_current == 0
    return labels


@pytest.mark.parametrize("data_at", ["folder", "s3"])
def test_two_writers_and_a_killed_one_leave_every_document_whole_and_a_rerun_converges(data_at, request):
    # The lake's data files in a folder, or in the S3 server (whose credentials the writers inherit).
    lake = request.getfixturevalue("lake" if data_at == "folder" else "s3_lake")
    docs = [f"d{i:02d}.txt" for i in range(10)]
    # The overlap (d03..d06) is new to both writers below: their first writes race (no rows to
    # delete, so only write_serial makes them conflict); the rest hold an older version.
    [seed] = start_writers(lake, ("old", docs[:3] + docs[7:], 1))
    assert seed.wait(timeout=300) == 0, seed.stderr.read()
    store = ChunkStore("unused.duckdb", lake=lake)
    assert set(assert_whole_documents(store).values()) == {"old.1"}

    # Overlapping and disjoint documents, at once, both starting on the overlap; the victim loops until killed.
    survivor, victim = start_writers(lake, ("A", docs[3:7] + docs[:3], 1), ("B", docs[3:], None))
    written = 0
    deadline = time.monotonic() + 300
    while written < 3 and time.monotonic() < deadline:
        line = victim.stdout.readline()
        written += line.startswith("wrote")
    assert written == 3, victim.stderr.read()
    time.sleep(0.3)  # well into its next document's writes
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    assert survivor.wait(timeout=300) == 0, survivor.stderr.read()

    labels = assert_whole_documents(store)
    assert set(labels) == set(docs)
    assert {labels[d] for d in docs[:3]} == {"A.1"}
    assert all(labels[d] == "A.1" or labels[d].startswith("B.") for d in docs[3:7])
    assert all(labels[d] == "old.1" or labels[d].startswith("B.") for d in docs[7:])

    [rerun] = start_writers(lake, ("C", docs[3:], 1))
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read()
    labels = assert_whole_documents(store)
    assert {d: labels[d] for d in docs[3:]} == {d: "C.1" for d in docs[3:]}
    assert {d: labels[d] for d in docs[:3]} == {d: "A.1" for d in docs[:3]}
    summary = store.summary(ROOT)
    assert summary["documents"] == {"parsed": 10} and summary["chunks"] == {"recursive": 30}
    # current_embeddings pairs by chunk position: the shared vector's row (index 3) has no chunk.
    assert summary["embeddings"] == {"recursive": 30}


def test_processes_opening_a_new_lake_at_once_all_get_it(lake):
    code = textwrap.dedent(f"""
        import sys
        from resources.store import ChunkStore, LakeConfig
        store = ChunkStore("unused.duckdb", lake=LakeConfig({lake.catalog!r}, {lake.data_path!r}))
        print("ready", flush=True)
        sys.stdin.readline()
        store.record_read(sys.argv[1], {ROOT!r}, sys.argv[1], "sha", 1)  # creates catalog, tables, a row
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, f"{n}.txt"], cwd=REPO_ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in range(3)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    store = ChunkStore("unused.duckdb", lake=lake)
    assert sorted(store.document_hashes(ROOT)) == ["0.txt", "1.txt", "2.txt"]
    assert assert_whole_documents(store)


def test_a_write_that_keeps_losing_its_commit_stops_with_nothing_stored(lake, monkeypatch):
    import resources.store as store_module

    store = ChunkStore("unused.duckdb", lake=lake)
    store.record_read("a.txt", ROOT, "a.txt", "sha-1", 1)
    other = duckdb.connect()
    for name in lake.extensions():
        other.execute(f"LOAD '{store_module.extension_path(name)}'")
    other.execute(f"ATTACH '{lake.attach_target()}' AS lake (DATA_PATH '{lake.data_path}')")
    monkeypatch.setattr(store_module, "WRITE_ATTEMPTS", 3)
    monkeypatch.setattr(store_module, "WRITE_RETRY_DELAY_S", 0.01)
    attempts = []

    def write(con):
        attempts.append(1)
        con.execute("DELETE FROM chunks WHERE doc_id = 'a.txt'")
        con.execute("INSERT INTO chunks SELECT 'a.txt', 's', 0, 'x', 'h', 1, 0, 1, 0, 0, [], [], true, NULL, 'c', 's'")
        # Another process commits a write before this one does, every time.
        other.execute("UPDATE lake.write_serial SET writes = writes + 1")

    with pytest.raises(WriteConflictError, match="lost 3 commit conflicts in a row"):
        store.write_transaction(write)
    assert len(attempts) == 3
    assert store.load_chunks("a.txt", "s") == []
    other.close()


# -- the pool: one holder with the file, many with a lake ------------------------------------


def test_the_lake_instance_lets_the_store_pool_hold_as_many_runs_as_it_starts(tmp_path):
    import shutil

    from dagster import DagsterInstance

    from assets.partitions import DOCUMENT_ASSET_ARGS

    pool = DOCUMENT_ASSET_ARGS["pool"]
    limits = {}
    for template in ("dagster-instance.yaml", "dagster-instance-lake.yaml"):
        home = tmp_path / template
        home.mkdir()
        shutil.copyfile(REPO_ROOT / template, home / "dagster.yaml")
        with DagsterInstance.from_config(str(home)) as instance:  # the file is a valid instance config
            config = instance.get_concurrency_config()
            limits[template] = (config.pool_config.default_pool_limit,
                                config.run_queue_config.max_concurrent_runs)
    assert pool == "duckdb"
    assert limits["dagster-instance.yaml"][0] == 1  # the embedded file: one writer
    pool_limit, max_runs = limits["dagster-instance-lake.yaml"]
    assert pool_limit == max_runs > 1  # lake mode: the pool never holds back a run the coordinator starts


# -- readers: search reads the lake ----------------------------------------------------------


@pytest.mark.parametrize("data_at", ["folder", "s3"])
def test_search_reads_a_lake_as_it_reads_the_file(data_at, tmp_path, request):
    # On S3 the search index opens the lake as the store does (resources.store.prepare_lake_connection).
    lake = request.getfixturevalue("lake" if data_at == "folder" else "s3_lake")
    if data_at == "s3":
        # Every insert as a Parquet file in the bucket (not inlined in the catalog: these are
        # small), so the index has to read the bucket.
        with ChunkStore(tmp_path / "unused.duckdb", lake=lake).connect() as con:
            con.execute("CALL lake.set_option('data_inlining_row_limit', 0)")
    sys.path.insert(0, str(REPO_ROOT / "tests" / "search"))
    from fixture_store import DOCS, MODEL_ID, bag_of_words, put_document

    from search.engine import SearchIndex

    results = {}
    for mode, store in (("duckdb", ChunkStore(tmp_path / "file.duckdb")),
                        ("ducklake", ChunkStore(tmp_path / "unused.duckdb", lake=lake))):
        for doc_id, text in list(DOCS.items())[:2]:
            put_document(store, doc_id, text)
        index = SearchIndex(store.path, MODEL_ID, embed=bag_of_words, lake=store.lake)
        try:
            query = next(iter(DOCS.values())).split(".")[0]
            results[mode] = [(h.strategy, h.doc_id, h.chunk_index, round(h.score, 5))
                             for m in ("vector", "keyword", "hybrid") for h in index.search(query, mode=m, k=3)]
        finally:
            index.close()
    assert results["ducklake"] and results["ducklake"] == results["duckdb"]


def test_store_keys_that_could_never_work_are_refused_in_either_mode(tmp_path):
    # In duckdb mode they are kept for a switch back to the lake, and were accepted whatever they said.
    for store, message in (({"catalog": "bogus"}, "expected postgres:<libpq string>"),
                           ({"s3_url_style": "virtual"}, "expected 'path' or 'vhost'"),
                           ({"mode": "ducklake", "catalog": "sqlite:", "data_path": str(tmp_path)},
                            "a sqlite catalog needs a file"),
                           ({"catalog": "duckdb:  "}, "a duckdb catalog needs a file")):
        with pytest.raises(ValueError, match=message):
            Settings(store=store)
    kept = Settings(store={"catalog": f"sqlite:{tmp_path}/c.sqlite", "data_path": str(tmp_path / "d")})
    assert kept.store.lake() is None  # file mode: the lake keys wait for mode = "ducklake"
