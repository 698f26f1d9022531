"""The DuckDB store: SQL is the interface, the DDL lives in ``resources.schema``.

``ChunkStore`` is plain Python so tests and the CLI use it without Dagster;
``StoreResource`` is the typed Dagster resource around it. DuckDB allows one
writing process, so connections are opened briefly (compute first, then write)
and a connection attempt that meets another process's lock is retried for a
while before failing with a message that says so.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb
import numpy as np
from dagster import ConfigurableResource
from pydantic import Field

from chunking.model import Block, Chunk, Page, ParsedDocument
from resources.schema import DDL, SCHEMA_VERSION

DEFAULT_DB_PATH = "data/chunkyard.duckdb"

# Column lists for bulk inserts, in the DDL's order (resources/schema.py).
PAGE_COLUMNS = (("doc_id", "VARCHAR"), ("page_num", "INTEGER"), ("char_offset", "BIGINT"), ("text", "VARCHAR"))
BLOCK_COLUMNS = (
    ("doc_id", "VARCHAR"), ("block_index", "INTEGER"), ("block_id", "VARCHAR"), ("heading", "VARCHAR"),
    ("level", "INTEGER"), ("parent_headings", "VARCHAR[]"), ("content", "VARCHAR"), ("session_type", "VARCHAR"),
    ("char_start", "BIGINT"), ("char_end", "BIGINT"), ("positions", "JSON"),
)
TABLE_COLUMNS = (
    ("doc_id", "VARCHAR"), ("table_id", "VARCHAR"), ("table_format", "VARCHAR"), ("table_header", "VARCHAR"),
    ("entry", "JSON"),
)
CHUNK_COLUMNS = (
    ("doc_id", "VARCHAR"), ("strategy", "VARCHAR"), ("chunk_index", "INTEGER"), ("text", "VARCHAR"),
    ("text_sha256", "VARCHAR"), ("token_count", "INTEGER"), ("char_start", "BIGINT"), ("char_end", "BIGINT"),
    ("page_start", "INTEGER"), ("page_end", "INTEGER"), ("heading_path", "VARCHAR[]"), ("block_ids", "VARCHAR[]"),
    ("verbatim", "BOOLEAN"), ("metadata", "JSON"), ("config_hash", "VARCHAR"), ("doc_sha256", "VARCHAR"),
)
EMBEDDING_COLUMNS = (
    ("doc_id", "VARCHAR"), ("strategy", "VARCHAR"), ("chunk_index", "INTEGER"), ("model_id", "VARCHAR"),
    ("text_sha256", "VARCHAR"), ("dim", "INTEGER"), ("embedding", "FLOAT[]"),
)
CACHE_COLUMNS = (("model_id", "VARCHAR"), ("text_sha256", "VARCHAR"), ("dim", "INTEGER"), ("embedding", "FLOAT[]"))


class StoreLockedError(RuntimeError):
    """Another process holds DuckDB's write lock for longer than we waited."""


@dataclass(frozen=True)
class StoredChunk:
    chunk_index: int
    text: str
    text_sha256: str
    token_count: int
    char_start: int
    char_end: int


class ChunkStore:
    """All reads and writes of the chunkyard database."""

    def __init__(self, path: str | Path, *, lock_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s

    # -- connections ----------------------------------------------------------------

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        if read_only and not self.path.exists():
            # A read-only open of a missing file fails; an empty schema answers the same.
            read_only = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._connect_with_retry(read_only)
        try:
            if not read_only:
                self._ensure_schema(con)
            yield con
        finally:
            con.close()

    def _connect_with_retry(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    if "lock" in str(exc).lower():
                        raise StoreLockedError(
                            f"{self.path} is locked by another process (DuckDB allows one writer); "
                            f"waited {self.lock_timeout_s:.0f}s: {exc}"
                        ) from exc
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    @staticmethod
    def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
        for statement in DDL:
            con.execute(statement)
        con.execute(
            "INSERT INTO schema_info VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING",
            [str(SCHEMA_VERSION)],
        )

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction: all of it lands, or none of it (rollback on error)."""
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def initialize(self) -> None:
        with self.connect():
            pass

    # -- documents ------------------------------------------------------------------

    def record_read(self, doc_id: str, source_root: str, source_path: str, sha256: str, size_bytes: int) -> None:
        """Record that the raw bytes were read. Parsed rows stay until a parse replaces them."""
        with self.transaction() as con:
            con.execute(
                """
                INSERT INTO documents (doc_id, source_root, source_path, sha256, size_bytes, status, updated_at)
                VALUES (?, ?, ?, ?, ?, 'read', ?)
                ON CONFLICT (doc_id) DO UPDATE SET
                    source_root = excluded.source_root, source_path = excluded.source_path,
                    status = CASE WHEN documents.sha256 = excluded.sha256 THEN documents.status ELSE 'read' END,
                    error = CASE WHEN documents.sha256 = excluded.sha256 THEN documents.error ELSE NULL END,
                    sha256 = excluded.sha256,
                    size_bytes = excluded.size_bytes,
                    updated_at = excluded.updated_at
                """,
                [doc_id, source_root, source_path, sha256, size_bytes, _now()],
            )

    def record_error(
        self, doc_id: str, source_root: str, source_path: str, sha256: str, size_bytes: int, error: str
    ) -> None:
        """Mark a document failed. Rows from an earlier good parse are kept, not lost."""
        with self.transaction() as con:
            con.execute(
                """
                INSERT INTO documents (doc_id, source_root, source_path, sha256, size_bytes, status, error, updated_at)
                VALUES (?, ?, ?, ?, ?, 'error', ?, ?)
                ON CONFLICT (doc_id) DO UPDATE SET
                    source_root = excluded.source_root, source_path = excluded.source_path, sha256 = excluded.sha256,
                    size_bytes = excluded.size_bytes, status = 'error',
                    error = excluded.error, updated_at = excluded.updated_at
                """,
                [doc_id, source_root, source_path, sha256, size_bytes, error, _now()],
            )

    def replace_parsed(self, doc: ParsedDocument, source_root: str, source_path: str, size_bytes: int) -> None:
        """Replace a document's pages, blocks and tables in one transaction."""
        page_rows = [(doc.doc_id, p.page_num, p.char_offset, p.text) for p in doc.pages]
        block_rows = [
            (
                doc.doc_id, b.index, b.block_id, b.heading, b.level, list(b.parent_headings), b.content,
                b.session_type, b.char_start, b.char_end, json.dumps(b.positions, ensure_ascii=False),
            )
            for b in doc.blocks
        ]
        table_rows = [
            (doc.doc_id, table_id, entry.get("format"), entry.get("table_header"), json.dumps(entry, ensure_ascii=False))
            for table_id, entry in doc.tables.items()
        ]
        with self.transaction() as con:
            for table in ("pages", "blocks", "doc_tables"):
                con.execute(f"DELETE FROM {table} WHERE doc_id = ?", [doc.doc_id])
            insert_rows(con, "pages", PAGE_COLUMNS, page_rows)
            insert_rows(con, "blocks", BLOCK_COLUMNS, block_rows)
            insert_rows(con, "doc_tables", TABLE_COLUMNS, table_rows)
            con.execute(
                """
                INSERT INTO documents (doc_id, source_root, source_path, sha256, size_bytes, format, encoding,
                                       n_pages, n_chars, status, error, updated_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'parsed', NULL, ?)
                ON CONFLICT (doc_id) DO UPDATE SET
                    source_root = excluded.source_root, source_path = excluded.source_path, sha256 = excluded.sha256,
                    size_bytes = excluded.size_bytes, format = excluded.format,
                    encoding = excluded.encoding, n_pages = excluded.n_pages,
                    n_chars = excluded.n_chars, status = 'parsed', error = NULL,
                    updated_at = excluded.updated_at
                """,
                [doc.doc_id, source_root, source_path, doc.sha256, size_bytes, doc.format, doc.encoding,
                 len(doc.pages), len(doc.text), _now()],
            )

    def document(self, doc_id: str) -> dict[str, Any] | None:
        with self.connect(read_only=True) as con:
            cur = con.execute("SELECT * FROM documents WHERE doc_id = ?", [doc_id])
            row = cur.fetchone()
            if row is None:
                return None
            return dict(zip([d[0] for d in cur.description], row))

    def document_hashes(self, source_root: str) -> dict[str, str]:
        """doc_id -> sha256 of every document read so far from ``source_root`` (seeds the sensor cursor)."""
        with self.connect(read_only=True) as con:
            return dict(
                con.execute("SELECT doc_id, sha256 FROM documents WHERE source_root = ?", [source_root]).fetchall()
            )

    def load_parsed(self, doc_id: str) -> ParsedDocument | None:
        """The stored parse of a document, or None when it has none (never parsed, or failed)."""
        with self.connect(read_only=True) as con:
            doc_row = con.execute(
                "SELECT sha256, format, encoding, status, source_path FROM documents WHERE doc_id = ?", [doc_id]
            ).fetchone()
            if doc_row is None or doc_row[3] != "parsed":
                return None
            pages = [
                Page(page_num=n, char_offset=o, text=t)
                for n, o, t in con.execute(
                    "SELECT page_num, char_offset, text FROM pages WHERE doc_id = ? ORDER BY page_num", [doc_id]
                ).fetchall()
            ]
            blocks = [
                Block(
                    index=r[0], block_id=r[1], heading=r[2], level=r[3], parent_headings=list(r[4]),
                    content=r[5], session_type=r[6], char_start=r[7], char_end=r[8],
                    positions=json.loads(r[9]) if r[9] else [],
                )
                for r in con.execute(
                    """SELECT block_index, block_id, heading, level, parent_headings, content,
                              session_type, char_start, char_end, positions
                       FROM blocks WHERE doc_id = ? ORDER BY block_index""",
                    [doc_id],
                ).fetchall()
            ]
            tables = {
                table_id: json.loads(entry)
                for table_id, entry in con.execute(
                    "SELECT table_id, entry FROM doc_tables WHERE doc_id = ? ORDER BY table_id", [doc_id]
                ).fetchall()
            }
        return ParsedDocument(
            doc_id=doc_id, source_name=doc_row[4], format=doc_row[1] or "txt",
            text="".join(p.text for p in pages), pages=pages, blocks=blocks, tables=tables,
            encoding=doc_row[2], sha256=doc_row[0],
        )

    def delete_document(self, doc_id: str) -> None:
        """Remove every row of a document (the embedding cache is content-addressed and stays)."""
        with self.transaction() as con:
            for table in ("embeddings", "chunks", "doc_tables", "blocks", "pages", "documents"):
                con.execute(f"DELETE FROM {table} WHERE doc_id = ?", [doc_id])

    # -- chunks ---------------------------------------------------------------------

    def replace_chunks(
        self, doc_id: str, strategy: str, chunks: Sequence[Chunk], *, config_hash: str, doc_sha256: str
    ) -> None:
        rows = [
            (
                doc_id, strategy, i, c.text, c.text_sha256, c.token_count, c.char_start, c.char_end,
                c.page_start, c.page_end, list(c.heading_path), list(c.block_ids), c.verbatim,
                json.dumps(c.metadata, ensure_ascii=False, default=str), config_hash, doc_sha256,
            )
            for i, c in enumerate(chunks)
        ]
        with self.transaction() as con:
            con.execute("DELETE FROM chunks WHERE doc_id = ? AND strategy = ?", [doc_id, strategy])
            insert_rows(con, "chunks", CHUNK_COLUMNS, rows)

    def load_chunks(self, doc_id: str, strategy: str) -> list[StoredChunk]:
        with self.connect(read_only=True) as con:
            return [
                StoredChunk(*row)
                for row in con.execute(
                    """SELECT chunk_index, text, text_sha256, token_count, char_start, char_end
                       FROM chunks WHERE doc_id = ? AND strategy = ? ORDER BY chunk_index""",
                    [doc_id, strategy],
                ).fetchall()
            ]

    def chunk_state(self, strategy: str) -> dict[str, tuple[str, str]]:
        """doc_id -> (doc_sha256, config_hash) of the stored chunks of one strategy."""
        with self.connect(read_only=True) as con:
            return {
                doc_id: (sha, cfg)
                for doc_id, sha, cfg in con.execute(
                    "SELECT doc_id, any_value(doc_sha256), any_value(config_hash) FROM chunks "
                    "WHERE strategy = ? GROUP BY doc_id",
                    [strategy],
                ).fetchall()
            }

    # -- embeddings -----------------------------------------------------------------

    def cached_embeddings(self, model_id: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if not text_hashes:
            return {}
        with self.connect(read_only=True) as con:
            rows = con.execute(
                "SELECT text_sha256, embedding FROM embedding_cache "
                "WHERE model_id = ? AND text_sha256 IN (SELECT unnest(?::VARCHAR[]))",
                [model_id, list(set(text_hashes))],
            ).fetchall()
        return {sha: np.asarray(vec, dtype=np.float32) for sha, vec in rows}

    def replace_embeddings(
        self,
        doc_id: str,
        strategy: str,
        model_id: str,
        rows: Sequence[tuple[int, str, np.ndarray]],
        new_cache_entries: dict[str, np.ndarray],
    ) -> None:
        """Replace one partition's vectors and add fresh ones to the cache, atomically."""
        with self.transaction() as con:
            if new_cache_entries:
                # Another partition of the batch may have cached the same text already.
                present = {
                    sha for (sha,) in con.execute(
                        "SELECT text_sha256 FROM embedding_cache WHERE model_id = ? "
                        "AND text_sha256 IN (SELECT unnest(?::VARCHAR[]))",
                        [model_id, list(new_cache_entries)],
                    ).fetchall()
                }
                insert_rows(con, "embedding_cache", CACHE_COLUMNS, [
                    (model_id, sha, len(v), v.tolist()) for sha, v in new_cache_entries.items() if sha not in present
                ])
            con.execute("DELETE FROM embeddings WHERE doc_id = ? AND strategy = ?", [doc_id, strategy])
            insert_rows(con, "embeddings", EMBEDDING_COLUMNS, [
                (doc_id, strategy, i, model_id, sha, len(v), v.tolist()) for i, sha, v in rows
            ])

    def load_embeddings(self, doc_id: str, strategy: str) -> list[tuple[int, np.ndarray]]:
        with self.connect(read_only=True) as con:
            return [
                (i, np.asarray(v, dtype=np.float32))
                for i, v in con.execute(
                    "SELECT chunk_index, embedding FROM embeddings WHERE doc_id = ? AND strategy = ? "
                    "ORDER BY chunk_index",
                    [doc_id, strategy],
                ).fetchall()
            ]

    # -- reporting ------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        with self.connect(read_only=True) as con:
            statuses = dict(con.execute("SELECT status, count(*) FROM documents GROUP BY status").fetchall())
            chunks = dict(con.execute("SELECT strategy, count(*) FROM chunks GROUP BY strategy").fetchall())
            embeddings = dict(con.execute("SELECT strategy, count(*) FROM embeddings GROUP BY strategy").fetchall())
            cache = con.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
            errors = con.execute(
                "SELECT doc_id, error FROM documents WHERE status = 'error' ORDER BY doc_id"
            ).fetchall()
        return {"documents": statuses, "chunks": chunks, "embeddings": embeddings,
                "embedding_cache": cache, "errors": errors}


def insert_rows(
    con: duckdb.DuckDBPyConnection, table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
) -> None:
    """Insert ``rows`` with one statement: each column travels as one list parameter.

    ``executemany`` converts and binds row by row (about 4 s for 1000 vectors);
    unnesting column lists zips them back into rows in one pass (about 0.2 s).
    """
    if not rows:
        return
    names = ", ".join(name for name, _ in columns)
    selects = ", ".join(f"unnest(${i + 1}::{sql_type}[])" for i, (_, sql_type) in enumerate(columns))
    values = [list(column) for column in zip(*rows)]
    con.execute(f"INSERT INTO {table} ({names}) SELECT {selects}", values)


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class StoreResource(ConfigurableResource):
    """The chunkyard DuckDB database and the folder parsed sidecars are exported to."""

    path: str = Field(default=DEFAULT_DB_PATH, description="DuckDB file.")
    sidecar_dir: str | None = Field(
        default=None, description="Where .blocks.jsonl/.tables.json are written; default <db dir>/parsed."
    )

    def store(self) -> ChunkStore:
        return ChunkStore(self.path)

    def sidecar_path(self) -> Path:
        return Path(self.sidecar_dir) if self.sidecar_dir else Path(self.path).parent / "parsed"
