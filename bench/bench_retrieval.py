"""Retrieval experiments: chunk an ingested store's documents per configuration, embed, evaluate.

    .venv/bin/python bench/bench_retrieval.py --db path/to/ingested.duckdb \\
        [--eval-set eval/corpus.jsonl] [--work /tmp/bench_retrieval.duckdb] \\
        [--configs shipped,shipped+ctx,...] [--modes vector,hybrid] [--skip-covered off,0.5] [--k 5] \\
        [--within off,semantic+ctx@10] [--within-rank fine,rrf,product]

``--db`` is a store that ``chunkyard run`` filled with the eval set's documents
(read only: it is copied to ``--work`` first, so its embedding cache makes repeated
configurations cheap; ``--keep-work`` reuses an existing work copy and its cache).
Each configuration is a registered strategy with a config (the shipped
``chunkyard.toml`` one, with overrides) and optionally context embedding
(search/context.py); the ``[variants.*]`` of ``--config-file`` are configurations
too, under their own names and in the ``shipped`` group, read as the pipeline reads
them (their table is their whole config). Its chunks are stored in the work copy under the
configuration's name as the strategy, embedded through the (model, text sha256)
cache (``--stored-chunks semantic`` takes the shipped semantic chunks from
``--db`` instead of embedding every sentence again), and every configuration is scored by search.evaluation.evaluate in one
pass per mode, so the rows of one run are comparable. The table prints recall,
precision, IoU and MRR at k, chunks, tokens, the texts embedded in this run
and the seconds that took (0 when the cache held them all); each pass's header gives its wall
and CPU milliseconds per search (one strategy, one question) and the load average.
``--within COARSE@N`` scores every configuration by coarse-to-fine search inside
configuration COARSE's top N hits (``SearchIndex.search(within=...)``), once per
``--within-rank``. ``--bootstrap N`` draws the scored questions again N times (a paired
bootstrap) and prints how often each row outside the shipped ones leads on both counts, with
its margins' 95% range. ``--halves`` reads the leaders again on the scored questions in odd and
in even places, each half averaged alone from the same searches (is a lead a property of the
configuration or of these questions?). ``--score-only`` scores
what a work copy already holds (a run stopped part way, or the same rows in other
modes) without chunking or embedding again.
"""

from __future__ import annotations

import argparse
import json
import hashlib
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from chunking.model import Chunk  # noqa: E402
from chunking.strategies import DEFAULT_TOKENIZER_ENCODING, config_hash, get_strategy, strategy_names  # noqa: E402
from orchestration.settings import load_settings  # noqa: E402
from resources.embedding import EmbeddingModelResource  # noqa: E402
from resources.store import VECTOR_COLUMNS, ChunkStore, insert_rows  # noqa: E402
from resources.tokenizer import TokenizerResource  # noqa: E402
from search.context import EmbedContext, embed_rows, with_context  # noqa: E402
from search.engine import SearchIndex  # noqa: E402
from search.evaluation import evaluate, lead_support, leaders_line, load_eval_set  # noqa: E402


@dataclass(frozen=True)
class Configuration:
    """One experiment: ``strategy`` with the shipped config plus ``overrides``; ``context``: embed with the
    title and heading path, ``neighbours``: and with that many word pieces of the text around the chunk,
    ``late``: late-chunked in a window of that many word pieces.

    ``on_shipped=False`` (a ``[variants.*]`` table): ``overrides`` is the whole config over the library
    defaults, as the pipeline reads a variant.
    """

    name: str
    strategy: str
    overrides: dict[str, Any] = field(default_factory=dict)
    context: bool = False
    on_shipped: bool = True
    neighbours: int = 0  # word pieces of neighbouring text embedded with the chunk (EmbedContext)
    late: int = 0  # late chunking: word pieces of the window the chunk is pooled from (EmbedContext)
    late_tiled: bool = False  # consecutive chunks share late windows
    # The heading path embedded with +ctx is the source block's outline (its parent headings and
    # heading), without the short paragraphs P's AnchorSplit promotes to headings (code lines too).
    outline_headings: bool = False
    late_blend: float = 0.0  # the chunk's own vector's weight in its late vector (EmbedContext)

    def embed_context(self) -> EmbedContext:
        return EmbedContext(headings=self.context, neighbour_tokens=self.neighbours, late_tokens=self.late,
                            late_tiled=self.late_tiled, late_blend=self.late_blend)


def shipped_configurations(settings=None) -> list[Configuration]:
    """Every registered strategy as shipped, with and without context embedding, then the shipped variants."""
    out = []
    for name in strategy_names():
        out += [Configuration(name, name), Configuration(f"{name}+ctx", name, context=True)]
    variants = settings.variants if settings is not None else {}
    return out + [Configuration(name, v.strategy, v.options(), v.embed_with_context, on_shipped=False,
                                neighbours=v.embed_neighbours, late=v.embed_late, late_tiled=v.embed_late_tiled,
                                late_blend=v.embed_late_blend)
                  for name, v in variants.items()]


# Candidates for "best on recall@5 and IoU@5 at once", sized for all-MiniLM-L6-v2.
EXPERIMENTS: list[Configuration] = [
    Configuration("sw100/50+ctx", "sentence_window", {"chunk_size": 100, "overlap": 50, "min_size": 20}, True),
    Configuration("sw64/48+ctx", "sentence_window", {"chunk_size": 64, "overlap": 48, "min_size": 16}, True),
    Configuration("sw100/50", "sentence_window", {"chunk_size": 100, "overlap": 50, "min_size": 20}),
    Configuration("p100+ctx", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 10}, True),
    Configuration("p120+ctx", "paragraph", {"chunk_token_size": 120, "chunk_overlap_token_size": 20}, True),
    Configuration("p80+ctx", "paragraph", {"chunk_token_size": 80, "chunk_overlap_token_size": 10}, True),
    Configuration("r100/50+ctx", "recursive", {"chunk_token_size": 100, "chunk_overlap_token_size": 50}, True),
    Configuration("sent100+ctx", "sentence", {"max_tokens_per_section": 100, "max_section_length": 300}, True),
    Configuration("sw150/75+ctx", "sentence_window", {"chunk_size": 150, "overlap": 75, "min_size": 20}, True),
    # Neighbour context ("+nb"): small disjoint chunks embedded with the text around them, up to
    # the model's 256 word pieces; the stored (retrieved) spans stay small.
    Configuration("simple+ctx+nb", "simple", {}, True, neighbours=256),
    Configuration("simple+ctx+nb96", "simple", {}, True, neighbours=96),
    Configuration("sw80/0+ctx+nb", "sentence_window", {"chunk_size": 80, "overlap": 0, "min_size": 20}, True,
                  neighbours=256),
    Configuration("sw100/0+ctx+nb", "sentence_window", {"chunk_size": 100, "overlap": 0, "min_size": 20}, True,
                  neighbours=256),
    Configuration("p100+ctx+nb", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 0}, True,
                  neighbours=256),
    Configuration("sent100+ctx+nb96", "sentence", {"max_tokens_per_section": 100, "max_section_length": 300}, True,
                  neighbours=96),
    Configuration("sent100+ctx+nb", "sentence", {"max_tokens_per_section": 100, "max_section_length": 300}, True,
                  neighbours=256),
    Configuration("sw100/50+ctx+nb", "sentence_window", {"chunk_size": 100, "overlap": 50, "min_size": 20}, True,
                  neighbours=256),
    Configuration("simple+nb", "simple", {}, False, neighbours=256),
    # Late chunking ("+late"): the model reads the chunk centred in its neighbours (a window of
    # 256 word pieces, or 128 for "+late128") and pools only the chunk's own word pieces.
    Configuration("sent100+ctx+late", "sentence", {"max_tokens_per_section": 100, "max_section_length": 300}, True,
                  late=256),
    Configuration("sent100+late", "sentence", {"max_tokens_per_section": 100, "max_section_length": 300}, False,
                  late=256),
    Configuration("sent100+ctx+late128", "sentence", {"max_tokens_per_section": 100, "max_section_length": 300},
                  True, late=128),
    Configuration("p100+ctx+late", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 10}, True,
                  late=256),
    Configuration("simple+ctx+late", "simple", {}, True, late=256),
    Configuration("p80+ctx+late", "paragraph", {"chunk_token_size": 80, "chunk_overlap_token_size": 10}, True,
                  late=256),
    # Around p100+ctx+late, which came 0.0006 short of paragraph+ctx's recall@5 (session 12):
    # a little larger, and without the overlap (five hits then cover more distinct text).
    Configuration("p105+ctx+late", "paragraph", {"chunk_token_size": 105, "chunk_overlap_token_size": 10}, True,
                  late=256),
    Configuration("p110+ctx+late", "paragraph", {"chunk_token_size": 110, "chunk_overlap_token_size": 10}, True,
                  late=256),
    Configuration("p100/0+ctx+late", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 0}, True,
                  late=256),
    # Session 13, the other side of p100 and the overlap, and a narrower window.
    Configuration("p90+ctx+late", "paragraph", {"chunk_token_size": 90, "chunk_overlap_token_size": 10}, True,
                  late=256),
    Configuration("p95+ctx+late", "paragraph", {"chunk_token_size": 95, "chunk_overlap_token_size": 10}, True,
                  late=256),
    Configuration("p100/20+ctx+late", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 20}, True,
                  late=256),
    Configuration("p100+ctx+late192", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 10}, True,
                  late=192),
    # "+outline": the +ctx heading path without promoted anchors (with_outline_headings).
    Configuration("p100+ctx+late+outline", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 10},
                  True, late=256, outline_headings=True),
    Configuration("paragraph+ctx+outline", "paragraph", {}, True, outline_headings=True),
    # Tiled ("+tiled"): runs of consecutive chunks share one 256-word-piece window.
    Configuration("sent100+ctx+late+tiled", "sentence", {"max_tokens_per_section": 100, "max_section_length": 300},
                  True, late=256, late_tiled=True),
    Configuration("p100+ctx+late+tiled", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 10},
                  True, late=256, late_tiled=True),
    Configuration("paragraph+ctx+late", "paragraph", {}, True, late=256),
    # Session 14, "+blendB": the late vector blended with the chunk's own (+ctx) vector, weight B
    # (neighbours' late vectors share their window's context; the own vector keeps what only the
    # chunk says). 0.5 is the even blend, 0.3 the other weight first tried (search/context.py).
    Configuration("p100+ctx+late+blend0.5", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 10},
                  True, late=256, late_blend=0.5),
    Configuration("p100+ctx+late+blend0.3", "paragraph", {"chunk_token_size": 100, "chunk_overlap_token_size": 10},
                  True, late=256, late_blend=0.3),
]


def all_configurations(settings=None) -> dict[str, Configuration]:
    return {c.name: c for c in shipped_configurations(settings) + EXPERIMENTS}


class StoreCachedEmbedder:
    """The embedder with the work copy's vector cache in front, for strategies that embed while
    chunking (semantic's sentences): a rerun of the bench chunks them without the model."""

    def __init__(self, embedder, store: ChunkStore, model_id: str) -> None:
        self._embedder, self._store, self._model_id = embedder, store, model_id

    def __getattr__(self, name: str):
        return getattr(self._embedder, name)

    def embed(self, texts):
        hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        cached = self._store.cached_embeddings(self._model_id, hashes)
        missing = {h: t for h, t in zip(hashes, texts) if h not in cached}
        if missing:
            fresh = dict(zip(missing, self._embedder.embed(list(missing.values()))))
            with self._store.transaction() as con:
                insert_rows(con, "embedding_vectors", VECTOR_COLUMNS, [
                    (self._model_id, h, len(v), np.asarray(v, dtype=np.float32).tolist()) for h, v in fresh.items()
                ])
            cached.update(fresh)
        return np.stack([cached[h] for h in hashes]) if hashes else np.zeros((0, self._embedder.dimension))


_CHUNKS_MEMO: dict[tuple[str, str, str], list] = {}  # (strategy, config hash, doc) -> chunks, within one run


def stored_chunks(db: str, strategy: str, version: str) -> dict[str, list[Chunk]]:
    """doc_id -> the chunks ``db`` holds for ``strategy``, when they were made with the config and
    tokenizer that ``version`` (``config_hash(config, encoding)``) names.

    For strategies whose chunking is the slow part (semantic embeds every sentence):
    the chunks ``chunkyard run`` stored are the strategy's output for the same config
    hash, so the bench need not make them again.
    """
    con = duckdb.connect(db, read_only=True)
    try:
        rows = con.execute(
            """SELECT doc_id, text, char_start, char_end, token_count, page_start, page_end, heading_path, block_ids,
                      verbatim, metadata, config_hash FROM current_chunks WHERE strategy = ? ORDER BY doc_id, chunk_index""",
            [strategy],
        ).fetchall()
    finally:
        con.close()
    out: dict[str, list[Chunk]] = {}
    for doc_id, text, start, end, tokens, p0, p1, heading, blocks, verbatim, metadata, cfg in rows:
        if cfg != version:
            sys.exit(f"{db} holds {strategy} chunks of config {cfg}, not {version}: chunk them instead")
        out.setdefault(doc_id, []).append(Chunk(
            text=text, char_start=start, char_end=end, token_count=tokens, page_start=p0, page_end=p1,
            heading_path=list(heading), block_ids=list(blocks), verbatim=verbatim, metadata=json.loads(metadata or "{}"),
        ))
    return out


def with_outline_headings(store: ChunkStore, doc_id: str, chunks: list[Chunk]) -> list[Chunk]:
    """Each chunk with its first source block's outline as heading path (copies: the memo is shared)."""
    with store.connect(read_only=True) as con:
        outline = {block_id: [*parents, heading] for block_id, parents, heading in con.execute(
            "SELECT block_id, parent_headings, heading FROM blocks WHERE doc_id = ?", [doc_id]).fetchall()}
    return [c.model_copy(update={"heading_path": outline[c.block_ids[0]]})
            if c.block_ids and c.block_ids[0] in outline else c for c in chunks]


def chunk_and_embed(
    store: ChunkStore, cfg: Configuration, shipped: dict, tokenizer, embedding, reuse: dict[str, str]
) -> dict:
    """Store ``cfg``'s chunks and vectors for every parsed document; returns cost figures."""
    spec = get_strategy(cfg.strategy)
    config = spec.parse_config({**(shipped.get(cfg.strategy, {}) if cfg.on_shipped else {}), **cfg.overrides})
    # As the pipeline names them: the config and the encoding that cut and counted the chunks.
    version = config_hash(config, getattr(tokenizer, "name", DEFAULT_TOKENIZER_ENCODING))
    embedder = embedding.get_embedder()
    chunk_embedder = StoreCachedEmbedder(embedder, store, embedding.model_id) if spec.needs_embedder else None
    with store.connect(read_only=True) as con:
        doc_ids = [d for (d,) in con.execute("SELECT doc_id FROM documents WHERE status = 'parsed' ORDER BY 1").fetchall()]
    chunk_s = embed_s = 0.0
    embedded = model_inputs = 0  # vectors made; texts (late chunking: windows) the model read
    if cfg.strategy in reuse and cfg.on_shipped and not cfg.overrides:
        for doc_id, chunks in stored_chunks(reuse[cfg.strategy], cfg.strategy, version).items():
            _CHUNKS_MEMO[(cfg.strategy, version, doc_id)] = chunks
    for doc_id in doc_ids:
        doc = store.load_parsed(doc_id)
        memo_key = (cfg.strategy, version, doc_id)
        if memo_key not in _CHUNKS_MEMO:  # "x" and "x+ctx" chunk once
            start = time.perf_counter()
            _CHUNKS_MEMO[memo_key] = spec.chunk(doc, config, tokenizer, chunk_embedder)
            chunk_s += time.perf_counter() - start
        chunks = _CHUNKS_MEMO[memo_key]
        if cfg.outline_headings:
            chunks = with_outline_headings(store, doc_id, chunks)
        store.replace_chunks(doc_id, cfg.name, chunks, config_hash=version, doc_sha256=doc.sha256)
        rows = store.load_chunks(doc_id, cfg.name)
        if cfg.embed_context():
            rows = with_context(store, doc_id, cfg.name, rows, cfg.embed_context(), embedder)
        cached = store.cached_embeddings(embedding.model_id, [r.text_sha256 for r in rows])
        missing = {r.text_sha256: r for r in rows if r.text_sha256 not in cached}
        fresh = {}
        if missing:
            start = time.perf_counter()
            fresh = dict(zip(missing, embed_rows(embedder, list(missing.values()))))
            embed_s += time.perf_counter() - start
            embedded += len(missing)
            model_inputs += len({r.text for r in missing.values()})
        vectors = {**cached, **fresh}
        store.replace_embeddings(
            doc_id, cfg.name, embedding.model_id, [(r.chunk_index, r.text_sha256, vectors[r.text_sha256]) for r in rows],
            fresh,
        )
    return {"embedded": embedded, "model_inputs": model_inputs, "embed_s": embed_s, "chunk_s": chunk_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True, help="a store ingested with the eval set's documents (read only)")
    parser.add_argument("--eval-set", default="eval/corpus.jsonl")
    parser.add_argument("--work", default="/tmp/bench_retrieval.duckdb", help="the scratch copy written to")
    parser.add_argument("--keep-work", action="store_true", help="reuse an existing --work copy (and its cache)")
    parser.add_argument("--configs", default="shipped", help="comma list of names; 'shipped', 'experiments', 'all'")
    parser.add_argument("--modes", default="vector")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--keyword-weights", default="1", help="comma list of hybrid keyword_weight values to score "
                        "hybrid mode with (the BM25 ranking's weight in the fusion; 1 = plain RRF)")
    parser.add_argument("--skip-covered", default="off", help="comma list of overlap-aware top-k settings to score "
                        "each mode with: 'off' or a fraction in (0, 1] (SearchIndex.search skip_covered)")
    parser.add_argument("--within", default="off", help="comma list of coarse-to-fine settings to score each mode "
                        "with: 'off' or COARSE@N (each configuration's chunks inside the top N hits of configuration "
                        "COARSE, which must be in --configs; SearchIndex.search within/within_depth)")
    parser.add_argument("--within-rank", default="fine", help="comma list of coarse-to-fine orders "
                        "(search.engine.WITHIN_RANKS: fine, rrf, product), each scored with every --within")
    parser.add_argument("--config-file", default="chunkyard.toml", help="the shipped strategy configs")
    parser.add_argument("--cold", action="store_true", help="empty the work copy's vector cache first, so every "
                        "configuration's embed seconds are measured in this run (a text two configurations share "
                        "is embedded once, by the first)")
    parser.add_argument("--score-only", action="store_true", help="score the configurations the --work copy "
                        "already holds (with --keep-work), without chunking or embedding them again")
    parser.add_argument("--halves", action="store_true", help="also read the leaders on each half of the eval set "
                        "(the scored questions in odd and in even places, each half averaged alone): a lead that "
                        "holds on one half only says more about those questions than about the configuration")
    parser.add_argument("--bootstrap", type=int, default=0, metavar="N", help="also draw the scored questions "
                        "again N times (paired bootstrap, seed 0) and print, for each row outside the shipped ones "
                        "(every row when all are shipped), the share of draws on which it leads on recall@k and "
                        "IoU@k at once and the 95%% range of its margins over the best of the others")
    parser.add_argument("--stored-chunks", default="", help="comma list of strategies whose chunks (shipped config) "
                        "are read from --db instead of made again (semantic: its sentence embeddings are slow)")
    args = parser.parse_args()
    reuse = {name: args.db for name in args.stored_chunks.split(",") if name}

    settings = load_settings(args.config_file)
    known = all_configurations(settings)
    groups = {"shipped": [c.name for c in shipped_configurations(settings)], "experiments": [c.name for c in EXPERIMENTS],
              "all": list(known)}
    names: list[str] = []
    for item in args.configs.split(","):
        for name in groups.get(item, [item]):
            if name not in known:
                sys.exit(f"unknown configuration {name!r}; known: {', '.join(known)}")
            if name not in names:
                names.append(name)

    withins: list[tuple[str | None, int]] = []
    for item in args.within.split(","):
        if item == "off":
            withins.append((None, 10))
            continue
        coarse, _, depth = item.rpartition("@")
        if coarse not in names or not depth.isdigit() or int(depth) < 1:
            sys.exit(f"--within {item!r}: expected COARSE@N with COARSE one of --configs ({', '.join(names)})")
        withins.append((coarse, int(depth)))
    within_ranks = args.within_rank.split(",")

    work = Path(args.work)
    if args.score_only and not work.is_file():
        sys.exit(f"--score-only: no work copy {work}")
    args.keep_work = args.keep_work or args.score_only
    if not (args.keep_work and work.is_file()):
        shutil.copyfile(args.db, work)
    store = ChunkStore(work)
    tokenizer = TokenizerResource(encoding=settings.tokenizer_encoding).get_tokenizer()
    embedding = EmbeddingModelResource(model=settings.embedding_model, batch_size=settings.embedding_batch_size,
                                       batch_tokens=settings.embedding_batch_tokens)
    if args.cold and args.score_only:
        sys.exit("--cold embeds again; it cannot go with --score-only")
    if args.cold:
        with store.transaction() as con:
            con.execute("DELETE FROM embedding_vectors")
    with store.transaction() as con:  # configurations not asked for stay out of this run's scores
        con.execute("DELETE FROM chunk_embeddings WHERE strategy NOT IN (SELECT unnest(?::VARCHAR[]))", [names])
        con.execute("DELETE FROM chunks WHERE strategy NOT IN (SELECT unnest(?::VARCHAR[]))", [names])
    costs = {}
    for name in names:
        if args.score_only:
            with store.connect(read_only=True) as con:
                if not con.execute("SELECT count(*) FROM chunk_embeddings WHERE strategy = ?", [name]).fetchone()[0]:
                    sys.exit(f"--score-only: {work} holds no vectors of {name!r}; run without --score-only first")
            costs[name] = {"embedded": 0, "embed_s": 0.0, "chunk_s": 0.0}
            continue
        costs[name] = chunk_and_embed(store, known[name], settings.strategies, tokenizer, embedding, reuse)
        print(f"  {name}: {costs[name]['embedded']} texts embedded ({costs[name]['model_inputs']} model inputs) in "
              f"{costs[name]['embed_s']:.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)

    questions = load_eval_set(args.eval_set)
    index = SearchIndex(work, embedding.model_id, embed=lambda texts: embedding.get_embedder().embed(texts))
    try:
        weights = [float(w) for w in args.keyword_weights.split(",")]
        passes = [(m, s, w, within, rank) for m in args.modes.split(",") for s in args.skip_covered.split(",")
                  for w in (weights if m == "hybrid" else [1.0]) for within in withins
                  for rank in (within_ranks if within[0] is not None else ["fine"])]
        for mode, skip, weight, (within, within_depth), within_rank in passes:
            skip_covered = None if skip == "off" else float(skip)
            wall, cpu = time.perf_counter(), time.process_time()
            report = evaluate(index, questions, ks=(args.k,), mode=mode, strategies=names, skip_covered=skip_covered,
                              keyword_weight=weight, within=within, within_depth=within_depth, within_rank=within_rank)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rows = report.at(args.k)
            searches = len(names) * next(iter(rows.values())).questions
            print(f"\nmode {report.mode}, k={args.k}, {next(iter(rows.values())).questions} questions "
                  f"({len(report.skipped)} skipped), eval set {args.eval_set} "
                  f"sha256 {hashlib.sha256(Path(args.eval_set).read_bytes()).hexdigest()[:12]}; "
                  f"{1000 * wall / max(searches, 1):.1f} ms wall, {1000 * cpu / max(searches, 1):.1f} ms CPU "
                  f"per search (query embedding included), load {os.getloadavg()[0]:.1f}")
            print(f"| configuration | recall@{args.k} | precision@{args.k} | IoU@{args.k} | MRR@{args.k} | chunks | "
                  "tokens | embedded | embed s |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for name in names:
                r, c = rows[name], costs[name]
                print(f"| {name} | {r.recall:.3f} | {r.precision:.3f} | {r.iou:.3f} | {r.mrr:.3f} | {r.chunks:,} | "
                      f"{r.tokens:,} | {c['embedded']:,} | {c['embed_s']:.0f} |")
            # Issue 15's goal, read both ways: against every other row of this run, and against
            # the strategies as shipped (plain and +ctx), which the other rows aim to beat.
            scores = {name: (rows[name].recall, rows[name].iou) for name in names}
            print("\n" + leaders_line(scores, args.k))
            reference = [name for name in names if name in groups["shipped"]]
            # The reading the halves repeat: against the shipped rows when the run has others too.
            others, against = None, "the best of the others"
            if reference and len(reference) < len(names):
                others, against = reference, f"the best of the {len(reference)} shipped rows"
                print(leaders_line(scores, args.k, others=others, against=against))
            if args.bootstrap:  # from this pass's per-question scores: no search is made again
                candidates = [name for name in names if others is None or name not in others]
                print(f"lead support against {against} ({args.bootstrap} paired resamples of the questions, seed 0):")
                for name, support in lead_support(report, args.k, candidates, others, args.bootstrap).items():
                    print(f"  {name}: leads on both in {support.share:.3f} of the draws; margin over the best: "
                          f"recall@{args.k} {support.recall_margin[0]:+.4f} to {support.recall_margin[1]:+.4f}, "
                          f"IoU@{args.k} {support.iou_margin[0]:+.4f} to {support.iou_margin[1]:+.4f} (95%)")
            if args.halves:  # from this pass's per-question scores: no search is made again
                scored_ids = [q.id for q in questions if q.id not in report.skipped]
                for label, half in (("odd", scored_ids[0::2]), ("even", scored_ids[1::2])):
                    means = report.means_over(args.k, half)
                    half_scores = {name: (means[name]["recall"], means[name]["iou"]) for name in names}
                    print(f"{label} half ({len(half)} questions): "
                          + leaders_line(half_scores, args.k, others=others, against=against))
    finally:
        index.close()


if __name__ == "__main__":
    main()
