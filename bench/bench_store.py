"""Bytes per chunk of the vector storage: schema 1 (each vector in `embeddings` and in
`embedding_cache`) against schema 2 (one row in `embedding_vectors`, referenced).

Run: ``.venv/bin/python bench/bench_store.py [--chunks N] [--dim D] [--shared F]``

Builds a version-1 file with N chunks of D-dim vectors, F of them sharing their text
with another chunk (as overlapping strategies do), checkpoints it, then migrates a copy
in place with ``ChunkStore.initialize()`` and checkpoints again. Prints the bytes in use and
their ratio, both measured in this run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resources import schema  # noqa: E402
from resources.store import ChunkStore  # noqa: E402


def build_v1(path: Path, n_chunks: int, dim: int, shared: float) -> None:
    n_texts = max(1, int(n_chunks * (1 - shared)))
    tables = [s for s in schema.DDL if "CREATE TABLE" in s
              and s not in (schema.EMBEDDING_VECTORS_DDL, schema.CHUNK_EMBEDDINGS_DDL)]
    with duckdb.connect(str(path)) as con:
        for statement in (*tables, *schema.V1_EMBEDDING_TABLES_DDL):
            con.execute(statement)
        con.execute("INSERT INTO schema_info VALUES ('schema_version', '1')")
        con.execute("SELECT setseed(0.5)")
        con.execute(
            "INSERT INTO embedding_cache SELECT 'm', 't' || i, $dim, "
            "list_transform(range($dim), x -> random()::FLOAT) FROM range($texts) r(i)",
            {"dim": dim, "texts": n_texts},
        )
        # A chunk i has the text of t = i mod texts: the last `shared` share repeats earlier texts.
        con.execute(
            "INSERT INTO embeddings SELECT 'd' || (i // 50), 'recursive', i % 50, 'm', c.text_sha256, $dim, c.embedding "
            "FROM range($chunks) r(i) JOIN embedding_cache c ON c.text_sha256 = 't' || (i % $texts)",
            {"dim": dim, "chunks": n_chunks, "texts": n_texts},
        )
        con.execute("CHECKPOINT")


def used_bytes(path: Path) -> int:
    """Bytes in use (a file does not shrink when tables are dropped; DuckDB reuses the free blocks)."""
    with duckdb.connect(str(path), read_only=True) as con:
        block_size, used = con.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchone()
    return block_size * used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--shared", type=float, default=0.1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        v1 = Path(tmp) / "v1.duckdb"
        build_v1(v1, args.chunks, args.dim, args.shared)
        v2 = Path(tmp) / "v2.duckdb"
        shutil.copyfile(v1, v2)
        started = time.perf_counter()
        ChunkStore(v2).initialize()
        migrate_s = time.perf_counter() - started
        with duckdb.connect(str(v2)) as con:
            con.execute("CHECKPOINT")
            n = con.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        assert n == args.chunks
        size1, size2 = used_bytes(v1), used_bytes(v2)
    print(f"{args.chunks} chunks, dim {args.dim}, {args.shared:.0%} sharing their text; migration {migrate_s:.1f} s")
    print(f"{'schema':<10}{'used bytes':>14}{'bytes/chunk':>14}{'ratio':>8}")
    print(f"{'1 (copy)':<10}{size1:>14,}{size1 / args.chunks:>14,.0f}{1.0:>8.2f}")
    print(f"{'2 (ref)':<10}{size2:>14,}{size2 / args.chunks:>14,.0f}{size2 / size1:>8.2f}")


if __name__ == "__main__":
    main()
