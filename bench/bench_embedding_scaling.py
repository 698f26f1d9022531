"""The embedding step alone at 1 and 2 processes: how far two runs can beat one on this CPU.

Run (about 6 min on a quiet 2-core machine; HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1)::

    .venv/bin/python bench/bench_embedding_scaling.py [--multiple 10] [--repeat 3] [--calls step|set|one]
        [--precision auto|float32|bfloat16|int8] [--corpus examples/docs]

Issue 16 expects the embedding step to bound the 2-run / 1-run ratio of ``bench_scale.py``.
This bench measures that bound with nothing else in the way: no Dagster, no store, no
parsing or chunking inside the timed part. The workload is the chunk texts the embed step
gets for ``bench_scale.py``'s N-times corpus (the same distinct copies), from every enabled
strategy of chunkyard.toml except ``semantic`` (which needs the model to chunk), embedded
with chunkyard's default embedder (``SentenceTransformerEmbedder``: all-MiniLM-L6-v2,
length-sorted batches of at most 2048 padded tokens, the pipeline's own code path).

How the texts reach the model: ``--calls step`` (the default) as the pipeline's
embeddings steps do, per strategy per range run of at most 25 documents (``--per-run``),
the calls ``assets.embed_groups.plan_calls`` plans for the run's documents (small ones
together up to 256 texts, large ones alone: each call runs under one time budget); ``--calls set`` one call per document and strategy (a run of one document);
``--calls one`` every text of the process in one call (the model's best case: full batches).
A text is embedded once per process, as the store's embedding cache serves a run the vectors
it already wrote (many short documents give several strategies the same chunk); the two
processes of the 2-process case do not share theirs (their documents are distinct copies).

Configurations, interleaved over ``--repeat`` rounds (medians printed):

- 1 process, 2 torch threads: every document (what one run does with ``embedding_threads = auto``);
- 1 process, 1 thread: every document;
- 2 processes at once, 1 thread each: each a contiguous half of the documents, as
  ``bench_scale.py`` splits them between 2 runs (what 2 runs do with ``auto``).

Each child process imports, loads the model and embeds 8 texts as a warm-up, then reports
ready; the parent starts every child's timed embed at the same moment (a line on its
stdin) and takes the wall time to the last child's answer. So the "embed" columns are the
model's work alone, all processes overlapping; the "process" column is the wall time from
starting the processes to the last exit (imports and model load included, as in a run).

"chunk texts/s" counts the workload's chunk texts (every strategy's), the same for every
configuration; "texts embedded" the distinct ones the model read. The ratio printed is the configuration's wall over the best 1-process wall (the target's
baseline). ``2 processes`` at ratio r means two runs whose work were all embedding would
take r of one run's time on this machine: a floor for ``bench_scale.py``'s ratio, whose runs
also pay everything else a second time. Per-process speed: a child's texts/s in the 2-process
configuration over the 1-process 1-thread texts/s (1.0 = the two cores do not slow each other).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench_scale, a script beside this one

# The same distinct copies as the pipeline bench, split between runs the same way (contiguous halves).
from assets.embed_groups import plan_calls  # noqa: E402  (the embeddings step's model calls)
from bench_scale import PER_RUN, make_corpus, range_batches, split_ranges  # noqa: E402
from chunking.embedding import SentenceTransformerEmbedder  # noqa: E402  (numpy only until a model loads)

WARM_UP_TEXTS = 8
# (label, processes, torch threads per process)
CONFIGURATIONS = (
    ("1 process, 2 threads", 1, 2),
    ("1 process, 1 thread", 1, 1),
    ("2 processes, 1 thread each", 2, 1),
)


def chunk_texts(corpus: Path, multiple: int, work: Path) -> list[dict[str, list[str]]]:
    """The chunk texts of ``multiple`` distinct copies of ``corpus`` (bench_scale's copies): per
    document (in document id order, as bench_scale registers them), strategy name -> its chunk
    texts, for every strategy instance of the settings (CHUNKYARD_CONFIG, else chunkyard.toml)
    but ``semantic`` (its chunking needs the model) and those embedded with context (their
    embedded text is not the chunk's). A document that does not parse is left out."""
    from chunking import default_tokenizer
    from chunking.errors import DocumentError
    from chunking.parsers import parse_document
    from orchestration.settings import load_settings
    from resources.documents import scan_folder

    make_corpus(corpus, multiple, work)
    settings = load_settings(os.environ.get("CHUNKYARD_CONFIG") or ROOT / "chunkyard.toml")
    instances = [i for i in settings.strategy_instances() if i.spec.name != "semantic" and not i.embed_context]
    tokenizer = default_tokenizer()
    documents = []
    for doc_id, source in sorted(scan_folder(work).items()):
        try:
            document = parse_document(source.path, doc_id)
        except DocumentError:  # a hostile file (../shared/corpus/hostile): the pipeline skips it too
            continue
        documents.append({instance.name: [chunk.text for chunk in instance.spec.chunk(
            document, instance.config, tokenizer, None)] for instance in instances})
    return documents


def calls(documents: list[dict[str, list[str]]], how: str, per_run: int) -> list[list[str]]:
    """The ``embed`` calls one process makes for ``documents``, in order (see ``--calls``); no empty call."""
    if how == "one":
        groups = [[text for document in documents for texts in document.values() for text in texts]]
    elif how == "set":
        groups = [texts for document in documents for texts in document.values()]
    else:  # "step": per range run of at most per_run documents and per strategy, the step's calls
        groups = []
        for batch in range_batches(documents, per_run):
            for name in dict.fromkeys(name for document in batch for name in document):
                texts = {i: document.get(name, []) for i, document in enumerate(batch)}
                for docs in plan_calls({i: len(t) for i, t in texts.items()}):  # as the embeddings step groups
                    groups.append([text for i in docs for text in texts[i]])
    return [group for group in groups if group]


def child(calls_file: Path, threads: int, precision: str) -> None:
    """Load the model, warm up, say ready, wait for "go" on stdin, embed, print the timing as JSON.
    (Offline: the parent's environment says so, and the embedder sets it too before its import.)"""
    groups = json.loads(calls_file.read_text(encoding="utf-8"))
    embedder = SentenceTransformerEmbedder(num_threads=threads, precision=precision)
    embedder.embed(["A warm-up text, not timed."] * WARM_UP_TEXTS if not groups else groups[0][:WARM_UP_TEXTS])
    print("ready", flush=True)
    if sys.stdin.readline() != "go\n":
        raise SystemExit("no go from the parent: not embedding")  # the parent gave up (its stdin closed)
    started = time.time()
    wall, cpu = time.perf_counter(), time.process_time()
    embedded: set[str] = set()  # as the store's embedding cache: a text this run embedded is not embedded again
    texts = rows = 0
    for group in groups:
        fresh = [text for text in dict.fromkeys(group) if text not in embedded]
        if fresh:
            rows += int(embedder.embed(fresh).shape[0])
            texts += len(fresh)
            embedded.update(fresh)
    print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                      "texts": texts, "rows": rows, "started": started}), flush=True)


@dataclass
class Sample:
    embed_wall: float  # from "go" to the last child's answer
    embed_cpu: float  # summed over the children's timed embeds
    process_wall: float  # from starting the children to the last exit
    child_rates: list[float]  # texts/s of each child's own embed
    embedded: int  # distinct texts the children embedded, summed
    start_spread: float  # seconds between "go" and the last child's timed start (clock of the machine)


@dataclass
class Row:
    label: str
    processes: int
    threads: int
    samples: list[Sample] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(getattr(s, name) for s in self.samples)


def run_configuration(slices: list[Path], threads: int, precision: str = "auto") -> Sample:
    """Start one child per calls file, wait until all have loaded the model, send them "go" at
    once, and time them. A child that fails stops the bench, and every other child is killed."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    started = time.perf_counter()
    children = [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(path),
                                  "--threads", str(threads), "--precision", precision], cwd=ROOT, env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE) for path in slices]
    try:
        for process in children:
            _answer(process, lambda line: line == "ready", "getting ready (importing, loading the model)")
        go, go_clock = time.perf_counter(), time.time()
        for process in children:
            process.stdin.write("go\n")
            process.stdin.flush()
        results = [json.loads(_answer(process, lambda line: line.startswith('{"wall"'), "embedding"))
                   for process in children]
        embed_wall = time.perf_counter() - go
        for process in children:
            if process.wait() != 0:
                raise SystemExit(f"embedding child failed with exit {process.returncode}")
    finally:
        for process in children:
            if process.poll() is None:
                process.kill()
                process.wait()
    if any(r["rows"] != r["texts"] for r in results):
        raise SystemExit(f"an embedding child returned a number of vectors other than its texts: {results}")
    return Sample(embed_wall, sum(r["cpu"] for r in results), time.perf_counter() - started,
                  [r["texts"] / r["wall"] for r in results], sum(r["texts"] for r in results),
                  max(r["started"] for r in results) - go_clock)


def _answer(process: subprocess.Popen, wanted, doing: str) -> str:
    """The first line of ``process``'s output that is ``wanted`` (other output, such as a library's
    notice, is passed over); SystemExit naming what the child was doing if it ends first."""
    for line in process.stdout:
        if wanted(line.strip()):
            return line.strip()
    raise SystemExit(f"an embedding child ended while {doing} (exit {process.wait()})")


def table(rows: list[Row], texts: int) -> str:
    best = min(rows[0].median("embed_wall"), rows[1].median("embed_wall"))
    best_process = min(rows[0].median("process_wall"), rows[1].median("process_wall"))
    one_thread_rate = statistics.median(rate for s in rows[1].samples for rate in s.child_rates)
    lines = [
        "| configuration | texts embedded | embed wall s (median; min-max) | embed CPU s | chunk texts/s | "
        "ratio to best 1 process | process wall s (start + load + embed) | its ratio | "
        "per-process speed vs 1 process, 1 thread |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        walls = [s.embed_wall for s in row.samples]
        rate = statistics.median(r for s in row.samples for r in s.child_rates)
        lines.append(
            f"| {row.label} | {row.samples[0].embedded} | {row.median('embed_wall'):.2f} ({min(walls):.2f}-{max(walls):.2f}) | "
            f"{row.median('embed_cpu'):.2f} | {texts / row.median('embed_wall'):.1f} | "
            f"{row.median('embed_wall') / best:.2f} | {row.median('process_wall'):.2f} | "
            f"{row.median('process_wall') / best_process:.2f} | {rate / one_thread_rate:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "examples" / "docs")
    parser.add_argument("--multiple", type=int, default=10, help="distinct copies of the corpus (bench_scale's 10x)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of the three configurations")
    parser.add_argument("--calls", choices=("step", "set", "one"), default="step",
                        help="step: one embed call per strategy per range run, as the pipeline; set: per document "
                             "and strategy; one: a single call per process")
    parser.add_argument("--per-run", type=int, default=PER_RUN, help="documents per range run (the CLI's batch)")
    parser.add_argument("--precision", default="auto", choices=SentenceTransformerEmbedder.PRECISIONS,
                        help="the embedder's precision (auto, the pipeline's default: float32 without native bf16)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.threads, args.precision)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-embed-scale-") as tmp:
        work = Path(tmp)
        documents = chunk_texts(args.corpus, args.multiple, work / "corpus")
        texts = sum(len(t) for document in documents for t in document.values())
        files = {}
        for parts in {processes for _, processes, _ in CONFIGURATIONS}:
            files[parts] = []
            for index, share in enumerate(split_ranges(documents, parts)):
                part = calls(share, args.calls, args.per_run)
                path = work / f"texts-{parts}-{index}.json"
                path.write_text(json.dumps(part), encoding="utf-8")
                files[parts].append(path)
        print(f"bench_embedding_scaling: {texts} chunk texts of {len(documents)} documents, embed calls per "
              f"{args.calls} ({args.multiple}x {args.corpus}, the settings' strategies but semantic), "
              f"all-MiniLM-L6-v2 (precision {args.precision}), {os.cpu_count()} cores, {args.repeat} rounds; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        rows = [Row(label, processes, threads) for label, processes, threads in CONFIGURATIONS]
        for round_index in range(args.repeat):
            for row in rows:
                sample = run_configuration(files[row.processes], row.threads, args.precision)
                row.samples.append(sample)
                print(f"  round {round_index + 1}, {row.label}: embed {sample.embed_wall:.2f} s wall, "
                      f"{sample.embed_cpu:.2f} s CPU; process {sample.process_wall:.2f} s "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
    print()
    print(table(rows, texts))
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
