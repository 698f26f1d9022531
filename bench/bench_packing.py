"""The embeddings step's embed calls with and without packs of batches (``packed``), in one process.

Run (HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1; ~3 min on a quiet 2-core machine, 4.5 with --repeat 5; the whole
``../shared/corpus``, 41 documents, takes ~5 min a pass)::

    .venv/bin/python bench/bench_packing.py [--corpus ../shared/corpus/md] [--multiple 1] [--repeat 3]

The workload is the chunk texts the pipeline's embeddings steps get for ``--corpus``: every
enabled strategy of chunkyard.toml but ``semantic``, in the calls those steps make
(``bench_embedding_scaling.calls``, ``--calls step``), each text embedded once per process as
the store's embedding cache allows. Chunks spread over many lengths with one to three texts
of each, so the embedder's one-length batches are small; ``packed=True`` (the default) runs
consecutive ones through one forward (``chunking.packed_forward``). The two variants run
interleaved, ``--repeat`` rounds, each after an untimed pass over the first calls, with the
embedder's defaults otherwise (``--precision``, default ``auto``; a worker per core) but no
extra threads (``max_workers`` = workers: the two variants give ``run_on_shared_cores``
different numbers of items, so on a loaded machine its extra threads would start differently
and blur the comparison). Timed: the whole ``embed`` calls, tokenizing and the Python around
each forward included. Printed: wall and CPU seconds (min / median / max), and whether the
vectors are the same bit for bit (else the largest difference).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

from bench_embedding_scaling import PER_RUN, calls, chunk_texts  # noqa: E402
from bench_semantic import cpu_summary, load, spread  # noqa: E402
from chunking.embedding import SentenceTransformerEmbedder  # noqa: E402

VARIANTS = {"packed (default)": True, "batch by batch (packed=False)": False}


def embed_calls(embedder: SentenceTransformerEmbedder, groups: list[list[str]]) -> tuple[float, float, np.ndarray]:
    """Wall and CPU seconds of the step's calls, each text embedded once; the vectors in first-seen order."""
    embedded: dict[str, None] = {}
    parts = []
    wall, cpu = time.perf_counter(), time.process_time()
    for group in groups:
        fresh = [text for text in dict.fromkeys(group) if text not in embedded]
        if fresh:
            parts.append(embedder.embed(fresh))
            embedded.update(dict.fromkeys(fresh))
    return time.perf_counter() - wall, time.process_time() - cpu, np.concatenate(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / ".." / "shared" / "corpus" / "md")
    parser.add_argument("--multiple", type=int, default=1, help="distinct copies of the corpus")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of the two variants")
    parser.add_argument("--precision", default="auto", choices=SentenceTransformerEmbedder.PRECISIONS)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as work:
        documents = chunk_texts(args.corpus.resolve(), args.multiple, Path(work))
    groups = calls(documents, "step", PER_RUN)
    texts = len({text for group in groups for text in group})
    embedder = SentenceTransformerEmbedder(precision=args.precision)
    embedder.max_workers = embedder.resolved_workers
    for name in VARIANTS:  # warm up each on the workload's first calls, untimed
        embedder.packed = VARIANTS[name]
        embed_calls(embedder, groups[:3])
    shapes = embedder.batch_shapes([text for group in groups for text in group])
    print(cpu_summary())
    print(f"workload: {len(documents)} documents of {args.corpus.resolve()} (x{args.multiple}), {len(groups)} embed "
          f"calls, {texts} distinct chunk texts, {sum(s[2] for s in shapes)} word pieces; as one call they would "
          f"make {len(shapes)} one-length batches, median {statistics.median(s[2] for s in shapes):.0f} word pieces; "
          f"precision {embedder.precision}, {embedder.resolved_workers} workers; {load()}")

    walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpus: dict[str, list[float]] = {name: [] for name in VARIANTS}
    vectors: dict[str, np.ndarray] = {}
    for round_ in range(args.repeat):
        names = list(VARIANTS) if round_ % 2 == 0 else list(VARIANTS)[::-1]
        for name in names:
            embedder.packed = VARIANTS[name]
            wall, cpu, found = embed_calls(embedder, groups)
            walls[name].append(wall)
            cpus[name].append(cpu)
            vectors.setdefault(name, found)
        print(f"  round {round_ + 1}/{args.repeat} done; {load()}", flush=True)
    embedder.packed = True

    packed, unpacked = (vectors[name] for name in VARIANTS)
    same = "yes, bit for bit" if np.array_equal(packed, unpacked) else f"no: up to {np.abs(packed - unpacked).max():.1e}"
    print(f"\nembeddings step, x{args.repeat} interleaved")
    print("| variant | wall min | wall median | wall max | CPU min | CPU median | CPU max |")
    print("|---|---|---|---|---|---|---|")
    for name in VARIANTS:
        print(f"| {name} | {spread(walls[name])} | {spread(cpus[name])} |")
    baseline = statistics.median(cpus["batch by batch (packed=False)"])
    print(f"packed / batch by batch, CPU medians: {statistics.median(cpus['packed (default)']) / baseline:.2f}; "
          f"wall: {statistics.median(walls['packed (default)']) / statistics.median(walls['batch by batch (packed=False)']):.2f}; "
          f"same vectors: {same}; {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
