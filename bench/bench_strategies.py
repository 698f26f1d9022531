"""Chunking throughput per strategy, against tiktoken encoding the same text once.

Run: ``.venv/bin/python bench/bench_strategies.py [CORPUS_DIR] [--strategies a,b] [--repeat N]``
(default corpus: ../shared/corpus beside the repo; exits quietly when absent).

Every document of the corpus (hostile/ included; files that fail to parse are
skipped with their message) is parsed once, untimed. Then, for each strategy with
its default config and the offline cl100k_base tokenizer, the time to chunk all
documents is compared with the time tiktoken alone needs to encode the same
texts once, measured in the same run, document by document alternating with
that strategy (the machine is shared and its speed drifts: interleaving puts
the strategy and its reference under the same load; each ratio pairs the best
of N strategy passes with the best of the N encode passes taken with them).
Target: ratio <= 3 (a strategy should tokenize about once, not re-tokenize its
accumulator).

Strategies that need the embedding model while chunking (``semantic``) are left
out unless named in ``--strategies``: their time is the model's, not chunking's.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunking import default_tokenizer  # noqa: E402
from chunking.model import ParsedDocument  # noqa: E402
from chunking.strategies import StrategySpec, all_strategies  # noqa: E402

DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus"
TARGET_RATIO = 3.0
# Strategies of this issue, benchmarked even before they are registered.
_OWN_MODULES = ("chunking.strategies.sentence", "chunking.strategies.sentence_window", "chunking.strategies.simple")


def load_documents(corpus: Path, hostile: bool = True) -> list[ParsedDocument]:
    try:
        from chunking.parsers import SUPPORTED_EXTENSIONS, DocumentError, is_sidecar_path, parse_document
    except ImportError:  # parsers not there yet: decoded plain text is enough here
        return [
            ParsedDocument.from_text(p.read_bytes().decode("utf-8", "replace"), doc_id=str(p))
            for p in sorted(corpus.rglob("*"))
            if p.suffix in {".txt", ".md", ".html", ".json"} and (hostile or "hostile" not in p.parts)
        ]
    docs = []
    for path in sorted(corpus.rglob("*")):
        if not hostile and "hostile" in path.relative_to(corpus).parts:
            continue
        if not path.is_file() or path.suffix.lower() not in SUPPORTED_EXTENSIONS or is_sidecar_path(path):
            continue
        try:
            docs.append(parse_document(path, str(path.relative_to(corpus))))
        except DocumentError as err:
            print(f"  skipped: {err}", file=sys.stderr)
    return docs


def strategies(names: list[str] | None) -> list[StrategySpec]:
    specs = {spec.name: spec for spec in all_strategies()}
    for module in _OWN_MODULES:
        spec = importlib.import_module(module).SPEC
        specs.setdefault(spec.name, spec)
    if names:
        unknown = [n for n in names if n not in specs]
        if unknown:
            raise SystemExit(f"unknown strategies {unknown}; known: {', '.join(specs)}")
        return [specs[n] for n in names]
    return [spec for spec in specs.values() if not spec.needs_embedder]


def best_time(run, repeat: int) -> float:
    """Best CPU seconds of this process over ``repeat`` runs.

    CPU time, not wall time: the machine is shared, and other people's load
    would otherwise decide the ratio.
    """
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def best_interleaved_times(items, first, second, repeat: int) -> tuple[float, float]:
    """Best CPU seconds of ``first`` and of ``second`` over all ``items``, per pass.

    Each item is handed to ``first`` then ``second`` in turn, so both see the same
    machine load; of ``repeat`` passes, the best total of each is kept.
    """
    best_first = best_second = float("inf")
    clock = time.process_time
    for _ in range(repeat):
        total_first = total_second = 0.0
        for item in items:
            t0 = clock()
            first(item)
            t1 = clock()
            second(item)
            t2 = clock()
            total_first += t1 - t0
            total_second += t2 - t1
        best_first, best_second = min(best_first, total_first), min(best_second, total_second)
    return best_first, best_second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--strategies", help="comma-separated strategy names (default: all without an embedder)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N interleaved passes (default 3)")
    parser.add_argument("--no-hostile", action="store_true",
                        help="leave out hostile/ (its 2 MB one-line file is half the corpus's characters)")
    args = parser.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}; nothing to benchmark")
        return

    docs = load_documents(args.corpus, hostile=not args.no_hostile)
    chars = sum(len(d.text) for d in docs)
    tokenizer = default_tokenizer()

    def encode_once() -> None:
        for d in docs:
            tokenizer.encode(d.text)

    encode_s = best_time(encode_once, args.repeat)
    print(f"{len(docs)} documents, {chars:,} chars; tiktoken cl100k_base encode once: {encode_s:.3f}s "
          f"({chars / encode_s:,.0f} chars/s)\n")

    header = f"{'strategy':<16} {'chunks':>8} {'chars':>11} {'seconds':>8} {'chars/s':>12} {'encode s':>9} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    embedder = None
    for spec in strategies(args.strategies.split(",") if args.strategies else None):
        if spec.needs_embedder and embedder is None:
            from chunking.embedding import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder()
        config = spec.default_config()
        chunk_counts: dict[int, int] = {}  # per document, from the last pass

        def chunk_one(doc: ParsedDocument) -> None:
            chunk_counts[id(doc)] = len(spec.chunk(doc, config, tokenizer, embedder))

        seconds, reference_s = best_interleaved_times(docs, chunk_one, lambda doc: tokenizer.encode(doc.text), args.repeat)
        ratio = seconds / reference_s
        flag = "" if ratio <= TARGET_RATIO else "  > target"
        print(f"{spec.name:<16} {sum(chunk_counts.values()):>8} {chars:>11,} {seconds:>8.3f} {chars / seconds:>12,.0f} "
              f"{reference_s:>9.3f} {ratio:>6.2f}{flag}")
    print(f"\nseconds are CPU seconds of this process, best of {args.repeat}; ratio = strategy seconds / tiktoken "
          f"encode-once seconds on the same text, interleaved with it document by document; target <= {TARGET_RATIO:g}")


if __name__ == "__main__":
    main()
