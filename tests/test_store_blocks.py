"""The blocks table keeps ``is_title_block`` (schema version 3): written, read back,
and added to a version-2 file by its migration without touching the blocks it holds."""

import duckdb
import pytest

from chunking.model import Block, Page, ParsedDocument
from chunking.strategies.paragraph import ParagraphConfig, chunk_paragraph
from chunking.tokenizers import CharTokenizer
from resources import schema
from resources.store import ChunkStore

ROOT = "/docs/one"


@pytest.fixture
def store(tmp_path):
    return ChunkStore(tmp_path / "db" / "chunkyard.duckdb", sidecar_dir=tmp_path / "db" / "parsed")


def titled_document() -> ParsedDocument:
    title, body = "# Handbook", "## Setup\nInstall it first."
    text = f"{title}\n\n{body}"
    blocks = [
        Block(block_id="t", index=0, heading="Handbook", level=1, content=title,
              char_start=0, char_end=len(title), is_title_block=True),
        Block(block_id="s", index=1, heading="Setup", level=2, parent_headings=["Handbook"], content=body,
              char_start=len(title) + 2, char_end=len(text)),
    ]
    return ParsedDocument(doc_id="hb.md", source_name="hb.md", format="md", text=text,
                          pages=[Page(page_num=0, char_offset=0, text=text)], blocks=blocks, sha256="sha-hb")


def test_is_title_block_is_written_and_read_back(store):
    doc = titled_document()
    store.record_read(doc.doc_id, ROOT, doc.doc_id, doc.sha256, len(doc.text))
    store.replace_parsed(doc, ROOT, doc.doc_id, len(doc.text))
    loaded = store.load_parsed(doc.doc_id)
    assert [b.is_title_block for b in loaded.blocks] == [True, False]
    assert loaded.blocks == doc.blocks
    # What it is for: P on the stored parse keeps the title's level 0, as on the fresh one.
    config = ParagraphConfig(chunk_token_size=30, chunk_overlap_token_size=0)
    levels = [c.metadata["heading"]["level"] for c in chunk_paragraph(loaded, config, CharTokenizer())]
    assert levels == [c.metadata["heading"]["level"] for c in chunk_paragraph(doc, config, CharTokenizer())]
    assert 0 in levels


def make_v2_database(store: ChunkStore) -> None:
    """A file as schema version 2 left it: blocks without is_title_block, one block stored."""
    tables = [s for s in schema.DDL if "CREATE TABLE" in s and "TABLE IF NOT EXISTS blocks" not in s]
    store.path.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(store.path)) as con:
        for statement in (*tables, schema.V2_BLOCKS_DDL):
            con.execute(statement)
        con.execute("INSERT INTO schema_info VALUES ('schema_version', '2')")
        con.execute("INSERT INTO blocks VALUES ('a.md', 0, 'b0', 'A', 1, ['P'], '# A\nbody', 'body', 0, 9, '[]')")


def test_a_version_2_file_gains_the_column_and_keeps_its_blocks(store):
    make_v2_database(store)
    store.initialize()
    with duckdb.connect(str(store.path), read_only=True) as con:
        # Migrated through version 3 (the column) and on to the latest.
        version = con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall()
        assert version == [(str(schema.SCHEMA_VERSION),)]
        rows = con.execute("SELECT block_id, heading, parent_headings, content, is_title_block FROM blocks").fetchall()
    assert rows == [("b0", "A", ["P"], "# A\nbody", False)]
    # The migrated file takes title blocks like a new one.
    doc = titled_document()
    store.record_read(doc.doc_id, ROOT, doc.doc_id, doc.sha256, len(doc.text))
    store.replace_parsed(doc, ROOT, doc.doc_id, len(doc.text))
    assert [b.is_title_block for b in store.load_parsed(doc.doc_id).blocks] == [True, False]


def test_a_failed_migration_leaves_the_version_2_file_intact(store, monkeypatch):
    make_v2_database(store)
    monkeypatch.setitem(schema.MIGRATIONS, 2, (*schema.MIGRATIONS[2], "SELECT * FROM no_such_table"))
    with pytest.raises(duckdb.CatalogException):
        store.initialize()
    with duckdb.connect(str(store.path), read_only=True) as con:
        assert con.execute("SELECT value FROM schema_info").fetchall() == [("2",)]
        columns = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns "
                                             "WHERE table_name = 'blocks'").fetchall()]
    assert "is_title_block" not in columns
