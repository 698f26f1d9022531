"""Peak memory of each strategy on one document at the ``max_chars`` limit, per shape of text.

Run::

    .venv/bin/python bench/bench_memory.py                       # 5,000,000 characters, stub embedder
    .venv/bin/python bench/bench_memory.py --chars 1000000 --model --strategies semantic --shapes tiny

The chunk step has no process limit of its own (the parse has ``parse_memory_mb``): a
document's cost is bounded by ``max_chars`` (5,000,000 characters by default) and
``max_chunks``. This bench measures what that bound means, one fresh process per
(strategy, shape), so each figure is that strategy's alone: the peak resident set
during ``spec.chunk`` (``VmHWM``, reset just before it through ``/proc/self/clear_refs``,
so an earlier peak of the setup does not hide it) less the resident set just before
it, the bytes per character, the seconds, the chunk count, and whether the pipeline
would refuse the document for more than ``max_chunks`` chunks (after chunking it,
so its memory is spent either way).

Shapes of text, each cut to ``--chars``:

* ``prose``: the chunker bench's workload (``bench_strategies.workload``) repeated;
* ``lines``: one short word per line (``w1\\nw2\\n...``): a piece per line;
* ``one``: one run of ``x`` with no separator at all: token windows only;
* ``tiny``: distinct sentences of a few characters (``W1. W2. ...``): hundreds of
  thousands of sentences, each embedded (repeated ones are embedded once).

``semantic`` embeds as the chunk step does, through a ``RecordingEmbedder`` keeping
up to ``max_chunks`` vectors, with a stub that returns float32 vectors of the
model's 384 dimensions (memory is what is measured, not the model); ``--model`` loads the
bundled all-MiniLM-L6-v2 instead (its weights count in the base, not the growth; a
5M-character ``tiny`` document then takes minutes and is over the 300 s
``chunk_timeout_s`` in the pipeline).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("recursive", "sentence", "sentence_window", "token", "simple", "paragraph", "semantic")
SHAPES = ("prose", "lines", "one", "tiny")


def text_of(shape: str, chars: int) -> str:
    if shape == "prose":
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_strategies import DEFAULT_CORPUS, workload

        text, _ = workload(DEFAULT_CORPUS, False)
        return ((text + "\n\n") * (chars // len(text) + 1))[:chars]
    # Enough items for ``chars`` (each takes at least 3 and 4 characters), then cut.
    if shape == "lines":
        return "\n".join(f"w{i}" for i in range(chars // 3 + 1))[:chars]
    if shape == "one":
        return "x" * chars
    if shape == "tiny":
        return " ".join(f"W{i}." for i in range(chars // 4 + 1))[:chars]
    raise SystemExit(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")


class StubEmbedder:
    """Float32 vectors of the default model's dimension, no model: the memory of the rest."""

    model_id, dimension = "stub", 384

    def embed(self, texts):
        import numpy as np

        return np.ones((len(texts), self.dimension), dtype=np.float32)


def _status_kib(field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of this process from /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Set this process's peak resident set (VmHWM) to its current one (Linux 4.0+)."""
    Path("/proc/self/clear_refs").write_text("5")


def measure_one(strategy: str, shape: str, chars: int, model: bool) -> dict:
    """In this process: chunk one document, report the peak RSS growth during the chunking."""
    sys.path.insert(0, str(ROOT))
    from chunking import default_tokenizer
    from chunking.embedding import RecordingEmbedder
    from chunking.limits import DocumentLimits
    from chunking.model import ParsedDocument
    from chunking.strategies import get_strategy

    text = text_of(shape, chars)
    tokenizer = default_tokenizer()
    embedder = None
    if strategy == "semantic":
        if model:
            from chunking.embedding import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder()
            embedder.embed(["warm up"])
        else:
            embedder = StubEmbedder()
    limits = DocumentLimits()
    if embedder is not None:
        embedder = RecordingEmbedder(embedder, limit=limits.max_chunks)  # as the chunk step wraps it
    doc = ParsedDocument.from_text(text)
    spec = get_strategy(strategy)
    config = spec.parse_config({})
    gc.collect()
    _reset_peak()
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    chunks = spec.chunk(doc, config, tokenizer, embedder)
    seconds = time.perf_counter() - started
    peak = _status_kib("VmHWM")
    return {"strategy": strategy, "shape": shape, "chars": len(text), "chunks": len(chunks),
            "growth_kib": peak - before, "base_kib": before, "seconds": seconds,
            "over_max_chunks": len(chunks) > limits.max_chunks}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=5_000_000)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--model", action="store_true", help="semantic with the bundled model, not the stub")
    parser.add_argument("--one", nargs=2, metavar=("STRATEGY", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # the child: one measurement, as JSON
        print(json.dumps(measure_one(args.one[0], args.one[1], args.chars, args.model)))
        return
    print(f"one document of {args.chars:,} characters per row, each in a fresh process; "
          f"semantic with {'the bundled model' if args.model else 'a stub embedder (float32, 384 dimensions)'}")
    print("| strategy | shape | chunks | peak RSS growth MiB | bytes / char | seconds | RSS before MiB |")
    print("|---|---|---|---|---|---|---|")
    for strategy in args.strategies.split(","):
        for shape in args.shapes.split(","):
            command = [sys.executable, __file__, "--chars", str(args.chars), "--one", strategy, shape]
            done = subprocess.run(command + (["--model"] if args.model else []), capture_output=True, text=True)
            if done.returncode:
                # A child the kernel killed (out of memory: -9) leaves no message of its own.
                said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
                print(f"| {strategy} | {shape} | failed: {said[:80]} | | | | |")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            refused = " (over max_chunks: refused)" if row["over_max_chunks"] else ""
            print(f"| {strategy} | {shape} | {row['chunks']:,}{refused} | {row['growth_kib'] / 1024:.0f} | "
                  f"{row['growth_kib'] * 1024 / row['chars']:.0f} | {row['seconds']:.1f} | {row['base_kib'] / 1024:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
