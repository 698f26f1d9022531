"""The seed's workload for the ``semantic`` strategy: ~50k tokens of real text, timed per option.

    .venv/bin/python bench/bench_semantic.py [--tokens 50000] [--repeat 3] [--full] [--profile] [--busy N]

The workload is English prose and documentation from ../shared/corpus (md/*.md,
three licence texts from txt/, the html/ pages as text), cut at a paragraph near
``--tokens`` cl100k tokens: 50,024 tokens, 1,889 sentences (1,684 distinct).

Each run is ``split_semantic`` end to end (sentences, token counts, embeddings,
thresholds, groups, spans) with the bundled all-MiniLM-L6-v2 already loaded and
the strategy's defaults. Printed first: the CPU's features that decide the
precision (AVX2 / AVX-512 / AVX512-BF16 / AMX / VNNI), torch's CPU capability,
cores, and the load average (the machine may be shared: CPU time is the figure
least disturbed by other work, wall time the one a user waits for).

Then, interleaved ``--repeat`` times so that every variant sees the same load:
the default (``precision="auto"``: bfloat16 on a CPU with AVX512-BF16 or AMX,
float32 elsewhere), ``int8`` (dynamic per-channel quantization of the Linear
layers), ``float32`` when the default is not float32, and, with ``--full``,
``bfloat16`` where it is not the default (7.2x the CPU time of float32 on an
AVX2 CPU); min / median / max of wall and CPU seconds, and each variant's
breakpoint agreement with float32's, the model's own precision (F1 of the
breakpoint sets, exactly and within one sentence). ``--full`` also runs the reference once (re-embedded centred
windows, float32, ``SentenceTransformer.encode``) and prints the agreement of
the default with it. Last: the default cap (200 tokens) against the seed's
1200, in word pieces of the model (all-MiniLM-L6-v2 reads 256), on the same
breakpoints, with the count of chunks that are exactly one sentence (the
embeddings step reuses their vectors instead of computing them again).

A row for the default with ``packed=False`` (each one-length batch through the model on its
own, as before session 26) shows what packing batches into one forward brings, on the same
load. ``--busy N`` runs the timed rounds beside N busy loops (other processes spinning on the
cores): a shared machine, reproducibly. It adds the default without the extra worker threads
the embedder starts when it finds the cores shared (``max_workers`` = its workers), so the
table shows what they bring.

Then the floor: the word pieces the model reads (distinct sentences, with the
padding of the embedder's own length-sorted batches, ``batch_shapes``), the
FLOPs of its Linear layers and attention products for them, and this CPU's
sustained GEMM rate on the model's own Linear layers (one torch thread, CPU
seconds, float32 and the int8 copy); floor = FLOP / rate, and each variant's
measured CPU median against it. Last, the CPU seconds of each step of one
default run (sentences, token counts, word pieces, forward, windows, breakpoints,
spans).

Figures on a CPU with native bfloat16 (AMD EPYC, AVX512-BF16 and VNNI, no AMX; session
21): the default is bfloat16, 4.70 s wall median (9.17 CPU s), the same 95 breakpoints as
float32 (8.35 s); 55,214 word pieces, none padded; GEMM 188.6 GFLOP/s per core in
bfloat16; run 1.43x above its floor. Session 25, the same CPU, slower that day: 5.44 s quiet
(float32 9.33 s); ``--busy 2`` 8.14 s with 6 threads taking batches, 9.82 s without the extra
ones (2), the same 95 breakpoints. Session 26, packs of batches (``packed``): 5.02 s (CPU 9.74)
against 5.31 s (CPU 10.34) batch by batch in the same run, the same 95 breakpoints (float32
8.87 s). Session 27, the same code on a quieter host: 4.31 s median of 5 (CPU
8.41; float32 7.92 s), and 6.22 s with ``--busy 2``, the same 95 breakpoints. Figures on the earlier AVX2 host (AMD EPYC Zen 3,
2 cores, AVX2 + FMA, no AVX-512, VNNI, BF16 or AMX; the README's "Semantic speed" has
the tables of both), with the padded batches of then: 57,951 padded word
pieces, 1.27 TFLOP; GEMM 86.6 GFLOP/s per core in float32, 142.3 in int8; floor
14.6 CPU s (7.3 s wall on two free cores) in float32, 8.9 (4.5) in int8; runs at
17.9 and 12.0 CPU s, 1.22x and 1.35x the floor; the model is 97% of a run's CPU.
Wall time on the shared machine (load 10-13) was ~2.9x the CPU time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import logging
import os
import pstats
import re
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = REPO / ".." / "shared" / "corpus"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# No weight-loading progress bar between the tables (as the CLI does).
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from chunking.embedding import SentenceTransformerEmbedder, cpu_flags  # noqa: E402
from chunking.strategies.semantic import (  # noqa: E402
    DEFAULT_CHUNK_TOKEN_SIZE,
    SEED_CHUNK_TOKEN_SIZE,
    UnitSizes,
    find_breakpoints,
    gap_distances,
    sentence_units,
    split_semantic,
)
from chunking.tokenizers import TiktokenTokenizer  # noqa: E402

class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        self.skip += tag in ("script", "style")
        if tag in ("p", "div", "li", "h1", "h2", "h3", "h4", "pre", "dt", "dd", "tr", "br"):
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        self.skip -= tag in ("script", "style")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def workload(tokenizer, tokens: int) -> str:
    """English prose and docs from the corpus, cut at a paragraph near ``tokens`` tokens."""
    if not CORPUS.is_dir():
        sys.exit(f"corpus not found at {CORPUS.resolve()}")
    texts = [p.read_text(encoding="utf-8") for p in sorted((CORPUS / "md").glob("*.md"))]
    texts += [(CORPUS / "txt" / n).read_text(encoding="utf-8") for n in ("Apache-2.0.txt", "GPL-3.txt", "MPL-2.0.txt")]
    for page in sorted((CORPUS / "html").glob("*.html")):
        parser = _Text()
        parser.feed(page.read_text(encoding="utf-8"))
        texts.append(re.sub(r"\n\s*\n\s*", "\n\n", "".join(parser.parts)))
    paragraphs = "\n\n".join(texts).split("\n\n")
    out, total = [], 0
    for paragraph in paragraphs:
        if total >= tokens:
            break
        out.append(paragraph)
        total += len(tokenizer.encode(paragraph + "\n\n"))
    return "\n\n".join(out)


def agreement(found: list[int], reference: list[int], tolerance: int) -> float:
    """F1 of two breakpoint sets; a found break matches a reference one within ``tolerance`` sentences."""
    if not found and not reference:
        return 1.0
    ref = np.array(reference)
    matched = sum(bool(ref.size and np.abs(ref - b).min() <= tolerance) for b in found)
    return 2 * matched / (len(found) + len(reference))


FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_summary() -> str:
    import torch

    flags = cpu_flags()
    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo_lines() if line.startswith("model name")), "?")
    present = [f for f in FEATURES if f in flags] or ["(no /proc/cpuinfo flags)"]
    absent = [f for f in FEATURES if f not in flags]
    return (
        f"CPU: {model}; {os.cpu_count()} cores; has {' '.join(present)}; lacks {' '.join(absent) or '-'}; "
        f"torch {torch.__version__} capability {torch.backends.cpu.get_cpu_capability()}, "
        f"{torch.get_num_threads()} threads"
    )


def _cpuinfo_lines() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.contextmanager
def busy_loops(count: int):
    """``count`` other processes spinning on the cores while the block runs (``--busy``): a
    machine shared with other work, the same every time (the figures of a really shared
    machine depend on who else is on it)."""
    loops = []
    try:
        for _ in range(count):
            loops.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def timed_split(text, tokenizer, embedder, **options):
    """Run split_semantic once: wall s, CPU s, breakpoints, spans, the sentence vectors it embedded."""
    captured: list[np.ndarray] = []

    def embed(texts):
        vectors = embedder.embed(texts)
        captured.append(vectors)
        return vectors

    start, cpu = time.perf_counter(), time.process_time()
    spans = split_semantic(text, tokenizer, embed, **options)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return wall, cpu, replay_breaks(text, tokenizer, captured[0], **options), spans, captured[0]


def replay_breaks(text, tokenizer, vectors, window_mode="combine", window_shape="gap", buffer_size=1, **_):
    """The breakpoints split_semantic found, recomputed from the vectors it embedded."""
    units = sentence_units(text)
    sizes = UnitSizes.measure(text, units, tokenizer)
    replay = lambda _texts: vectors  # noqa: E731
    return find_breakpoints(gap_distances(text, units, replay, buffer_size, window_mode, window_shape, sizes.tokens))


def linear_layers(module) -> list:
    """The Linear layers of one module (float ``nn.Linear`` or torch's dynamic int8 ``Linear``)."""
    return [m for m in module.modules() if type(m).__name__ == "Linear"]


def model_flops(transformer, shapes: list[tuple[int, int, int]]) -> tuple[float, float]:
    """FLOPs (2 per multiply-add) of the encoder for batches of ``(texts, padded width, _)``:
    its Linear layers on every padded token, and attention (``QK^T`` and ``AV``, each
    ``width^2 x hidden`` multiply-adds per text and layer). Embeddings, layer norms,
    GELU and softmax are left out: they are memory-bound and their cost is what a
    measured run spends above this floor."""
    layers = transformer.encoder.layer
    per_token = sum(2 * lin.in_features * lin.out_features for layer in layers for lin in linear_layers(layer))
    hidden = transformer.config.hidden_size
    padded = sum(n * width for n, width, _ in shapes)
    attention = sum(n * 2 * 2 * width * width * hidden for n, width, _ in shapes) * len(layers)
    return float(per_token * padded), float(attention)


def gemm_rate(layer, rows: int, min_cpu: float = 1.0) -> float:
    """Sustained FLOP per CPU second of one torch thread running ``layer``'s Linear layers
    (the model's own shapes, float32 or int8) on ``rows`` tokens. CPU time, not wall:
    other tenants of a shared machine slow the wall clock, much less the thread's own work."""
    import torch

    linears = linear_layers(layer)
    # A float Linear takes its weight's dtype (bfloat16 copy); the int8 one takes float32.
    dtypes = [lin.weight.dtype if isinstance(getattr(lin, "weight", None), torch.Tensor) else torch.float32
              for lin in linears]
    inputs = [torch.randn(rows, lin.in_features, dtype=dtype) for lin, dtype in zip(linears, dtypes)]
    flops = sum(2 * rows * lin.in_features * lin.out_features for lin in linears)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            for x, lin in zip(inputs, linears):  # warm up (packing, first-touch)
                lin(x)
            done, start = 0, time.process_time()
            while time.process_time() - start < min_cpu:
                for x, lin in zip(inputs, linears):
                    lin(x)
                done += 1
            return flops * done / (time.process_time() - start)
    finally:
        torch.set_num_threads(threads)


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} | {float(np.median(values)):.2f} | {max(values):.2f}"


def print_floor(embedder, sentences, variants, cpus, walls) -> None:
    """The model's arithmetic for this workload against this CPU's measured GEMM rate."""
    shapes = embedder.batch_shapes(sentences)
    real, padded = sum(s[2] for s in shapes), sum(s[0] * s[1] for s in shapes)
    float_model = embedder._mean_pooled
    linear, attention = model_flops(float_model, shapes)
    cores = len(os.sched_getaffinity(0))
    print(
        f"\nfloor: the model reads {real} word pieces ({len(set(sentences))} distinct sentences; "
        f"{padded} with padding in {len(shapes)} length-sorted batches, {padded / real - 1:.1%} padding); "
        f"{linear / 1e12:.3f} TFLOP in Linear layers + {attention / 1e12:.3f} TFLOP attention; "
        f"GEMM rate of one torch thread on the model's Linear shapes ({embedder.batch_tokens or 2048} rows), "
        f"CPU seconds; floor = FLOP / rate (CPU s), / {cores} cores (wall s, a quiet machine); {load()}"
    )
    print("| variant | GFLOP/s per core (GEMM) | floor CPU s | floor wall s | run CPU median | run wall median "
          "| CPU above floor |")
    print("|---|---|---|---|---|---|---|")
    rows = embedder.batch_tokens or 2048
    saved = embedder.precision
    for name, (precision, _) in variants.items():
        embedder.precision = precision
        layer = embedder._transformer().encoder.layer[0]
        rate = gemm_rate(layer, rows)
        floor = (linear + attention) / rate
        cpu, wall = float(np.median(cpus[name])), float(np.median(walls[name]))
        print(f"| {name} | {rate / 1e9:.1f} | {floor:.2f} | {floor / cores:.2f} | {cpu:.2f} | {wall:.2f} "
              f"| {cpu / floor:.2f}x |")
    embedder.precision = saved


def print_phases(text, tokenizer, embedder) -> None:
    """CPU seconds of each step of one default split_semantic, run step by step."""
    from chunking.strategies.semantic import _GroupEmitter, _groups, fit_groups_to_cap

    clock = time.process_time
    phases: dict[str, float] = {}
    t = clock()
    units = sentence_units(text)
    phases["sentences"] = clock() - t
    t = clock()
    sizes = UnitSizes.measure(text, units, tokenizer)
    phases["cl100k token counts"] = clock() - t
    sentences = [text[s:e] for s, e in units]
    t = clock()
    embedder._sorted_batches(list(dict.fromkeys(sentences)))
    phases["word pieces (model tokenizer, distinct sentences)"] = clock() - t
    t = clock()
    vectors = embedder.embed(sentences)
    phases["model forward + pooling"] = clock() - t - phases["word pieces (model tokenizer, distinct sentences)"]
    t = clock()
    distances = gap_distances(text, units, lambda _texts: vectors, 1, "combine", "gap", sizes.tokens)
    phases["windows combined + distances"] = clock() - t
    t = clock()
    breaks = find_breakpoints(distances)
    phases["threshold + breakpoints"] = clock() - t
    t = clock()
    groups = fit_groups_to_cap(_groups(len(units), breaks), sizes, DEFAULT_CHUNK_TOKEN_SIZE)
    _GroupEmitter(text, units, sizes, tokenizer, DEFAULT_CHUNK_TOKEN_SIZE).emit_all(groups)
    phases["groups + chunk spans"] = clock() - t
    total = sum(phases.values())
    print(f"\nwhere the CPU time goes (one default run, {embedder.precision}, step by step; {load()}):")
    print("| step | CPU s | share |")
    print("|---|---|---|")
    for name, seconds in phases.items():
        print(f"| {name} | {seconds:.3f} | {seconds / total:.1%} |")


def main() -> None:
    # The same oversize sentences are re-split on every run: one warning each is noise here.
    logging.getLogger("chunking.strategies.semantic").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each variant (default 3)")
    parser.add_argument("--full", action="store_true", help="add bfloat16 and the reference (slow: minutes)")
    parser.add_argument("--profile", action="store_true", help="cProfile one default run")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="N busy loops (other processes) on the cores during the timed runs: a shared machine")
    args = parser.parse_args()
    if args.busy < 0:
        parser.error(f"--busy: expected 0 or more busy loops, got {args.busy}")

    tokenizer = TiktokenTokenizer()
    text = workload(tokenizer, args.tokens)
    n_tokens = len(tokenizer.encode(text))
    units = sentence_units(text)
    sentences = [text[s:e] for s, e in units]
    started = time.perf_counter()
    embedder = SentenceTransformerEmbedder()  # precision "auto"
    load_seconds = time.perf_counter() - started
    default_precision = embedder.precision
    print(cpu_summary())
    print(
        f"workload: {n_tokens} tokens, {len(text)} chars, {len(units)} sentences ({len(set(sentences))} distinct), "
        f"from {CORPUS.resolve()}; model load {load_seconds:.1f} s; auto precision here: {default_precision}; {load()}"
    )

    # name -> (precision, max_workers); None: the embedder's default (three times its workers).
    variants = {f"default ({default_precision})": (default_precision, None), "int8": ("int8", None)}
    # The same default with each one-length batch through the model on its own (no packs).
    variants["default, batch by batch (packed=False)"] = (default_precision, None)
    if args.busy:
        # The same default without the extra threads it starts on shared cores (run_on_shared_cores).
        workers = embedder.resolved_workers
        variants[f"default, no extra threads (max_workers={workers})"] = (default_precision, workers)
    # float32 is the model's own precision, so the breakpoints every variant is held to:
    # where ``auto`` picks bfloat16, float32 runs too (its breaks are the reference).
    if default_precision != "float32":
        variants["float32"] = ("float32", None)
    if args.full and default_precision != "bfloat16":
        variants["bfloat16"] = ("bfloat16", None)
    for precision, _ in variants.values():  # warm up each, and make the int8 / bfloat16 copies, untimed
        embedder.precision = precision
        embedder.embed(["warm up the model and its kernels"] * 4)

    walls: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    threads: dict[str, list[int]] = {name: [] for name in variants}  # threads that ran batches, per run
    breaks: dict[str, list[int]] = {}
    default_run = None
    with busy_loops(args.busy):
        for round_ in range(args.repeat):
            names = list(variants) if round_ % 2 == 0 else list(variants)[::-1]
            for name in names:
                embedder.precision, embedder.max_workers = variants[name]
                embedder.packed = "packed=False" not in name
                wall, cpu, found, spans, vectors = timed_split(text, tokenizer, embedder)
                walls[name].append(wall)
                cpus[name].append(cpu)
                threads[name].append(embedder.threads_used)
                breaks.setdefault(name, found)
                if name == next(iter(variants)) and default_run is None:
                    default_run = (found, spans, vectors)
            print(f"  round {round_ + 1}/{args.repeat} done; {load()}", flush=True)
    embedder.precision, embedder.max_workers, embedder.packed = default_precision, None, True
    default_name = next(iter(variants))
    reference_name = next(name for name, (precision, _) in variants.items() if precision == "float32")
    reference = breaks[reference_name]

    print(f"\nsemantic, {n_tokens} tokens, x{args.repeat} interleaved (defaults of split_semantic: combine, gap, "
          f"buffer 1, percentile 95, cap {DEFAULT_CHUNK_TOKEN_SIZE})"
          + (f"; {args.busy} busy loops on the cores throughout" if args.busy else ""))
    print("| variant | wall min | wall median | wall max | cpu min | cpu median | cpu max | breaks "
          "| agree float32 exact / ±1 | threads that ran batches |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in variants:
        found = breaks[name]
        print(
            f"| {name} | {spread(walls[name])} | {spread(cpus[name])} | {len(found)} | "
            f"{agreement(found, reference, 0):.2f} / {agreement(found, reference, 1):.2f} | "
            f"{min(threads[name])}-{max(threads[name])} |"
        )
    median = float(np.median(walls[default_name]))
    if n_tokens < 49_000:
        print(f"seed's 10 s for 50k tokens: n/a ({n_tokens} tokens); {load()}")
    else:
        print(f"seed's 10 s: {'met' if median < 10 else 'not met'} at the median ({median:.2f} s wall); "
              f"5 s: {'met' if median < 5 else 'not met'}; {load()}")

    if args.full:
        embedder.precision, embedder.length_sorted = "float32", False
        wall, cpu, found, _, _ = timed_split(text, tokenizer, embedder, window_mode="reembed", window_shape="centered")
        embedder.precision, embedder.length_sorted = default_precision, True
        print(
            f"reference (reembed, centered, float32, ST.encode): wall {wall:.2f} s, cpu {cpu:.2f} s, "
            f"{len(found)} breaks; the default agrees at {agreement(breaks[default_name], found, 0):.2f} exact / "
            f"{agreement(breaks[default_name], found, 1):.2f} ±1"
        )

    # The cap against the model: the same breakpoints (the vectors of the default run replayed).
    found, spans, vectors = default_run
    replay = lambda _texts: vectors  # noqa: E731
    print("\ncap against the model (all-MiniLM-L6-v2 reads 256 word pieces, [CLS] and [SEP] included):")
    print("| chunk_token_size | chunks | tokens median | word pieces median | max | chunks over 256 | text unread "
          "| one-sentence chunks (vector reused) |")
    print("|---|---|---|---|---|---|---|---|")
    sentence_texts = set(sentences)
    for cap in (DEFAULT_CHUNK_TOKEN_SIZE, SEED_CHUNK_TOKEN_SIZE):
        capped = split_semantic(text, tokenizer, replay, chunk_token_size=cap)
        pieces = np.array([embedder.count_model_tokens(s.text) for s in capped])
        tokens = np.array([s.tokens for s in capped])
        unread = float(np.maximum(pieces - embedder.max_seq_length, 0).sum() / pieces.sum())
        print(
            f"| {cap} | {len(capped)} | {np.median(tokens):.0f} | {np.median(pieces):.0f} | {pieces.max()} | "
            f"{int((pieces > embedder.max_seq_length).sum())} | {unread:.0%} | "
            f"{sum(sp.text in sentence_texts for sp in capped)} |"
        )

    print_floor(embedder, sentences, variants, cpus, walls)
    print_phases(text, tokenizer, embedder)
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        split_semantic(text, tokenizer, embedder.embed)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())


if __name__ == "__main__":
    main()
