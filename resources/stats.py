"""Strategy statistics computed from the store: what is stored now, not what the last
batch produced. Plain functions over a DuckDB connection (the store's), so they are
testable without Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import duckdb

# The chunks the statistics describe. The store's current chunks (of each document's
# current good parse) are the truth a person wants; switch to that view's name here.
CHUNKS_TABLE = "chunks"

PERCENTILES = (0.10, 0.50, 0.90, 0.99)


@dataclass(frozen=True)
class StrategyStats:
    """Token-length distribution of one strategy's stored chunks (cl100k tokens).

    Percentiles are nearest-rank (``quantile_disc``): each is a real chunk's length.
    """

    strategy: str
    chunks: int
    documents: int
    p10: int
    p50: int
    p90: int
    p99: int
    max: int
    mean: float


def strategy_stats(con: duckdb.DuckDBPyConnection, table: str = CHUNKS_TABLE) -> list[StrategyStats]:
    """One row per strategy that has chunks, ordered by name."""
    rows = con.execute(
        f"""
        SELECT strategy, count(*), count(DISTINCT doc_id),
               quantile_disc(token_count, [{", ".join(str(p) for p in PERCENTILES)}]),
               max(token_count), avg(token_count)
        FROM {table} GROUP BY strategy ORDER BY strategy
        """
    ).fetchall()
    return [
        StrategyStats(strategy, chunks, docs, *[int(q) for q in quantiles], int(mx), round(float(mean), 1))
        for strategy, chunks, docs, quantiles, mx, mean in rows
    ]


def token_histogram(
    con: duckdb.DuckDBPyConnection, bin_width: int, table: str = CHUNKS_TABLE
) -> dict[str, dict[int, int]]:
    """strategy -> {bin start: chunks whose token count is in [start, start + bin_width)}."""
    if bin_width < 1:
        raise ValueError(f"bin_width must be at least 1, got {bin_width}")
    rows = con.execute(
        f"""
        SELECT strategy, (token_count // ?) * ? AS bin, count(*)
        FROM {table} GROUP BY ALL ORDER BY strategy, bin
        """,
        [bin_width, bin_width],
    ).fetchall()
    out: dict[str, dict[int, int]] = {}
    for strategy, start, n in rows:
        out.setdefault(strategy, {})[int(start)] = int(n)
    return out


def chunk_texts(con: duckdb.DuckDBPyConnection, table: str = CHUNKS_TABLE, batch: int = 2048) -> Iterator[tuple[str, str]]:
    """(strategy, text) of every stored chunk, fetched in batches."""
    cursor = con.execute(f"SELECT strategy, text FROM {table}")
    while rows := cursor.fetchmany(batch):
        yield from rows


def over_limit_counts(
    pairs: Iterator[tuple[str, str]], count_tokens: Callable[[str], int], limit: int
) -> dict[str, tuple[int, int]]:
    """strategy -> (chunks whose ``count_tokens`` exceeds ``limit``, chunks)."""
    out: dict[str, list[int]] = {}
    for strategy, text in pairs:
        tally = out.setdefault(strategy, [0, 0])
        tally[0] += count_tokens(text) > limit
        tally[1] += 1
    return {s: (over, total) for s, (over, total) in out.items()}
