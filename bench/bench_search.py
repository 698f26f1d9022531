"""Exact cosine vs vss HNSW in an in-memory DuckDB: why search/engine.py defaults to exact.

    .venv/bin/python bench/bench_search.py [--n 12000] [--dim 384] [--queries 20]

Prints seconds and ratios against one exact top-5 query measured in the same run
(the machine is shared and noisy), the HNSW build, and how many of the exact top-5
a filtered HNSW query returns (vss filters after its index scan).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from search.engine import load_extensions  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=12000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args()
    n, d = args.n, args.dim
    con = duckdb.connect(":memory:")
    load_extensions(con)
    con.execute("SELECT setseed(0.42)")
    con.execute(
        f"CREATE TABLE t AS SELECT i::INTEGER AS id, i % 6 AS part, "
        f"list_transform(range({d}), x -> random() - 0.5)::FLOAT[{d}] AS vec FROM range({n}) r(i)"
    )
    queries = [row[0] for row in con.execute(f"SELECT vec FROM t USING SAMPLE {args.queries} ROWS").fetchall()]
    exact_sql = (f"SELECT id FROM t WHERE part = 0 ORDER BY 1 - array_cosine_distance(vec, ?::FLOAT[{d}]) DESC, id "
                 "LIMIT 5")
    unfiltered_exact = (f"SELECT id FROM t ORDER BY 1 - array_cosine_distance(vec, ?::FLOAT[{d}]) DESC, id LIMIT 5")
    exact_times, exact_filtered, exact_all = [], [], []
    for q in queries:
        s, rows = timed(lambda: con.execute(exact_sql, [q]).fetchall())
        exact_times.append(s)
        exact_filtered.append([r[0] for r in rows])
        exact_all.append([r[0] for r in con.execute(unfiltered_exact, [q]).fetchall()])
    build, _ = timed(lambda: con.execute("CREATE INDEX h ON t USING HNSW (vec) WITH (metric = 'cosine')"))
    hnsw_sql = f"SELECT id FROM t ORDER BY array_cosine_distance(vec, ?::FLOAT[{d}]) LIMIT 5"
    hnsw_filtered_sql = f"SELECT id FROM t WHERE part = 0 ORDER BY array_cosine_distance(vec, ?::FLOAT[{d}]) LIMIT 5"
    hnsw_times, agree, filtered_rows = [], 0, 0
    for q, truth in zip(queries, exact_all):
        s, rows = timed(lambda: con.execute(hnsw_sql, [q]).fetchall())
        hnsw_times.append(s)
        agree += len({r[0] for r in rows} & set(truth))
        filtered_rows += len(con.execute(hnsw_filtered_sql, [q]).fetchall())
    ref = statistics.median(exact_times)
    print(f"{n} vectors of {d} dims, {len(queries)} queries, top 5")
    print(f"{'what':<34}{'seconds':>10}{'x exact query':>15}")
    for name, secs in (("exact query (filtered), median", ref),
                       ("HNSW build", build),
                       ("HNSW query (unfiltered), median", statistics.median(hnsw_times))):
        print(f"{name:<34}{secs:>10.3f}{secs / ref:>15.1f}")
    print(f"HNSW top-5 found of exact top-5: {agree}/{5 * len(queries)}")
    print(f"filtered HNSW query rows returned: {filtered_rows}/{5 * len(queries)} (exact returns all)")


if __name__ == "__main__":
    main()
