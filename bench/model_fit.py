"""How many stored chunks the embedding model reads only in part: per strategy, the current
chunks longer than the model's max sequence, counted in the model's own word pieces.

Run: ``.venv/bin/python bench/model_fit.py [--db data/chunkyard.duckdb] [--model all-MiniLM-L6-v2]``

The strategies cap chunks in cl100k tokens; the model reads at most ``max_seq_length`` word
pieces (special tokens included) and drops the rest, so a chunk of code or JSON within its cap
can still be cut. The ``within_model_max_sequence`` check warns per document; this prints the
whole store's share per strategy, read-only (``current_chunks``: rows of the current bytes).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def chunks_over_limit_per_strategy(rows: list[tuple[str, str, str]], count, max_pieces: int) -> list[tuple[str, int, int, int, int]]:
    """``(strategy, chunks, over max_pieces, documents, documents with one over)`` per strategy, from
    ``(strategy, doc_id, text)`` rows and ``count(texts) -> word pieces of each``."""
    lengths = count([text for _, _, text in rows])
    chunks, over = Counter(), Counter()
    documents: dict[str, set[str]] = {}
    documents_over: dict[str, set[str]] = {}
    for (strategy, doc_id, _), n in zip(rows, lengths):
        chunks[strategy] += 1
        documents.setdefault(strategy, set()).add(doc_id)
        if n > max_pieces:
            over[strategy] += 1
            documents_over.setdefault(strategy, set()).add(doc_id)
    return [(s, chunks[s], over[s], len(documents[s]), len(documents_over.get(s, ()))) for s in sorted(chunks)]


def table(results: list[tuple[str, int, int, int, int]], max_pieces: int) -> str:
    lines = [f"| strategy | chunks | over {max_pieces} word pieces | share | documents with one |",
             "|---|---:|---:|---:|---:|"]
    for strategy, chunks, over, documents, documents_over in results:
        lines.append(f"| {strategy} | {chunks} | {over} | {over / chunks:.1%} | {documents_over} of {documents} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from chunking.embedding import DEFAULT_MODEL, SentenceTransformerEmbedder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(ROOT / "data" / "chunkyard.duckdb"))
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    embedder = SentenceTransformerEmbedder(args.model)

    def count(texts: list[str]) -> list[int]:
        return [embedder.count_model_tokens(text) for text in texts]

    with duckdb.connect(args.db, read_only=True) as con:
        rows = con.execute("SELECT strategy, doc_id, text FROM current_chunks ORDER BY ALL").fetchall()
    print(f"{args.db}: {len(rows)} current chunks; model {args.model} reads {embedder.max_seq_length} word pieces")
    print(table(chunks_over_limit_per_strategy(rows, count, embedder.max_seq_length), embedder.max_seq_length))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
