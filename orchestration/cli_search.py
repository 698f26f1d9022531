"""``chunkyard search | ground | eval``: the search commands, hooked into orchestration/cli.py.

    chunkyard search "query" [--strategy S] [-k 5] [--mode vector|keyword|hybrid]
                             [--doc ID ...] [--folder F] [--skip-covered F]
                             [--within COARSE [--within-depth N] [--within-rank fine|rrf|product]] [--json]
    chunkyard ground "claim" [--threshold T] [--strategy S] [-k 3] [--json]
    chunkyard eval [--eval-set eval/examples.jsonl] [--mode vector] [--skip-covered F]
                   [--within COARSE [--within-depth N] [--within-rank R]] [--json]

``search`` and ``ground`` only read the database. ``eval`` materializes the
``retrieval_eval`` asset through the persistent Dagster instance (so the UI shows
it, its history and its check) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Sequence

COMMANDS = ("search", "ground", "eval")
TEXT_KS = (1, 3, 5, 10)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    search = subparsers.add_parser("search", help="search the stored chunks (vector, keyword or hybrid)")
    search.add_argument("query")
    search.add_argument("--strategy", help="one strategy (default: every strategy, top k each)")
    search.add_argument("-k", type=int, default=5, help="hits per strategy (default 5)")
    search.add_argument("--mode", choices=("vector", "keyword", "hybrid"), default="hybrid")
    search.add_argument("--doc", action="append", dest="docs", help="only this document (repeatable)")
    search.add_argument("--folder", help="only documents under this folder of the documents root")
    search.add_argument("--context", type=int, default=160, help="characters of context shown each side")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.add_argument("--skip-covered", type=float, metavar="F",
                        help="skip a hit when at least this fraction of its characters is in better hits of its "
                             "document (settings search_skip_covered; 0 = off)")
    add_within_arguments(search)

    ground = subparsers.add_parser("ground", help="is a claim supported by the documents? (per strategy)")
    ground.add_argument("claim")
    ground.add_argument("--threshold", type=float,
                        help="cosine similarity for 'grounded' (settings grounding_threshold; default: the embedding "
                             "model's measured threshold, 0.6 for all-MiniLM-L6-v2, else the seed's 0.7)")
    ground.add_argument("--strategy")
    ground.add_argument("-k", type=int, default=3, help="evidence chunks per strategy (default 3)")
    ground.add_argument("--json", action="store_true")

    evaluate = subparsers.add_parser("eval", help="score every strategy on the eval set (asset retrieval_eval)")
    evaluate.add_argument("--eval-set", help="JSONL eval set (settings eval_set: eval/examples.jsonl)")
    evaluate.add_argument("--mode", choices=("vector", "keyword", "hybrid"), help="search mode (settings: vector)")
    evaluate.add_argument("--json", action="store_true")
    evaluate.add_argument("--skip-covered", type=float, metavar="F",
                          help="overlap-aware top k, as for search (settings search_skip_covered; 0 = off)")
    add_within_arguments(evaluate)


def add_within_arguments(parser: argparse.ArgumentParser) -> None:
    from search.engine import WITHIN_RANKS

    parser.add_argument("--within", metavar="COARSE",
                        help="coarse-to-fine: return each strategy's chunks found inside the top hits of this "
                             "strategy (settings search_within; 'off' = plain search)")
    parser.add_argument("--within-depth", type=int, metavar="N",
                        help="how many top coarse hits the fine chunks are taken from (settings "
                             "search_within_depth: 10)")
    parser.add_argument("--within-rank", choices=WITHIN_RANKS,
                        help="order of the fine chunks: their own score, or fused with their coarse hit's rank "
                             "(rrf) or score (product) (settings search_within_rank: fine)")


def dispatch(args: argparse.Namespace) -> int:
    from search.engine import SearchError
    from search.evaluation import EvalSetError

    try:
        if args.command == "search":
            return _search(args)
        if args.command == "ground":
            return _ground(args)
        if args.command == "eval":
            return _eval(args)
    except (SearchError, EvalSetError) as exc:
        print(f"chunkyard {args.command}: {exc}", file=sys.stderr)
        return 2
    return 2


def _settings():
    from orchestration.settings import load_settings

    return load_settings()


def _with_skip_covered(settings, value: float | None):
    """The settings with ``--skip-covered`` applied: a fraction in (0, 1], or 0 for off."""
    from search.engine import SearchError

    if value is None:
        return settings
    if not 0 <= value <= 1:
        raise SearchError(f"--skip-covered must be 0 (off) or a fraction in (0, 1], not {value:g}")
    return settings.model_copy(update={"search_skip_covered": value or None})


def _with_within(settings, args):
    """The settings with ``--within`` (``off`` clears it), ``--within-depth`` and ``--within-rank`` applied,
    validated as the file's keys are (an unknown coarse strategy names ``search_within``)."""
    from pydantic import ValidationError

    from search.engine import SearchError

    updates = {}
    if args.within is not None:
        updates["search_within"] = None if args.within == "off" else args.within
    if args.within_depth is not None:
        updates["search_within_depth"] = args.within_depth
    if args.within_rank is not None:
        updates["search_within_rank"] = args.within_rank
    if not updates:
        return settings
    try:
        return type(settings).model_validate({**settings.model_dump(), **updates})
    except ValidationError as exc:
        raise SearchError("; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}"
                                    for e in exc.errors())) from None


def _search(args) -> int:
    from search.engine import open_index

    settings = _with_within(_with_skip_covered(_settings(), args.skip_covered), args)
    index = open_index(settings)
    index.context_chars = max(0, args.context)
    hits = index.search(args.query, mode=args.mode, k=args.k, strategy=args.strategy,
                        doc_ids=args.docs, folder=args.folder, **settings.search_options())
    if args.json:
        print(json.dumps([h.to_json() for h in hits], ensure_ascii=False, indent=2))
        return 0
    if not hits:
        print("no hits" + _why_no_keyword_hits(index, args))
    color = sys.stdout.isatty()
    for hit in hits:
        print(format_hit(hit, color=color))
    return 0


def _why_no_keyword_hits(index, args) -> str:
    """A keyword search of stop words and punctuation only cannot match anything: said, with the way out."""
    if args.mode != "keyword" or index.keyword_terms(args.query):
        return ""
    return (": every word of the query is an English stop word or punctuation, which keyword search "
            "leaves out (--mode vector or hybrid searches by meaning)")


def format_hit(hit, *, color: bool = False) -> str:
    """Two lines: where the hit is, then the chunk inside its context, the chunk marked."""
    heading = " > ".join(hit.heading_path)
    pages = f"p.{hit.page_start + 1}" + (f"-{hit.page_end + 1}" if hit.page_end != hit.page_start else "")
    found = f" in {hit.within} #{hit.parent_rank}" if hit.within else ""
    where = (f"[{hit.strategy} #{hit.rank}{found}] {hit.score:.4f}  {hit.doc_id}  {pages}  "
             f"chars {hit.char_start}-{hit.char_end}" + (f"  § {heading}" if heading else ""))
    open_mark, close_mark = ("\033[1;7m", "\033[0m") if color else ("»", "«")
    body = f"{_squash(hit.context_before)}{open_mark}{_shorten(_squash(hit.text))}{close_mark}{_squash(hit.context_after)}"
    return f"{where}\n    …{body}…\n"


def _shorten(text: str, most: int = 600) -> str:
    """A long chunk shows its head and tail (the JSON has it whole)."""
    return text if len(text) <= most else f"{text[:most // 2]} [...] {text[-most // 2:]}"


def _squash(text: str) -> str:
    # Terminal display only: one line per hit; the JSON keeps the text as stored.
    return re.sub(r"\s+", " ", text)


def _ground(args) -> int:
    from search.engine import ground, grounding_threshold_for, open_index

    settings = _settings()
    index = open_index(settings)
    threshold = args.threshold if args.threshold is not None else settings.grounding_threshold
    if threshold is None:  # the model's own (search.engine.grounding_threshold_for)
        threshold = grounding_threshold_for(index.model_id)
    results = ground(index, args.claim, threshold=threshold, k=args.k, strategy=args.strategy)
    if args.json:
        print(json.dumps({"claim": args.claim, "threshold": threshold,
                          "strategies": [g.to_json() for g in results]}, ensure_ascii=False, indent=2))
        return 0
    print(f"claim: {args.claim}\nthreshold: {threshold}")
    for g in results:
        verdict = "GROUNDED" if g.grounded else "unsupported"
        print(f"\n{g.strategy:<16} {verdict:<12} best {g.score:.4f}")
        for hit in g.evidence:
            print(f"    {hit.score:.4f}  {hit.doc_id} chars {hit.char_start}-{hit.char_end}: "
                  f"{_squash(hit.text)[:120]}")
    return 0


def _eval(args) -> int:
    from dagster import AssetKey, DagsterEventType, DagsterInstance, materialize

    from orchestration.cli import QUIET, ensure_dagster_home
    from orchestration.definitions import build_project
    from resources.store import ChunkStore
    from search.engine import SearchError
    from search.evaluation import leaders, leaders_line, load_eval_set, mode_label

    settings = _with_within(_with_skip_covered(_settings(), args.skip_covered), args)
    updates = {k: v for k, v in (("eval_set", args.eval_set), ("eval_mode", args.mode)) if v}
    settings = settings.model_copy(update=updates)
    # What the asset would fail on, said plainly before a run is made of it.
    load_eval_set(settings.eval_set)  # EvalSetError: not found, or which line is malformed
    if settings.store.lake() is None and not Path(settings.db_path).is_file():
        raise SearchError(f"no chunkyard database at {settings.db_path}: run `chunkyard run` first")
    ensure_dagster_home()
    defs = build_project(settings).defs
    result = materialize(
        [defs.get_assets_def(AssetKey("retrieval_eval"))], instance=DagsterInstance.get(),
        resources=defs.resources, raise_on_error=False, run_config=QUIET,
    )
    if not result.success:
        for event in result.all_events:
            if event.event_type == DagsterEventType.STEP_FAILURE:
                print(f"chunkyard eval: {step_failure_message(event.event_specific_data)}", file=sys.stderr)
        return 1
    rows = history_rows(ChunkStore(settings.db_path, lake=settings.store.lake()), result.run_id)
    label = mode_label(settings.eval_mode, **settings.search_options())
    checks = [e.event_specific_data for e in result.all_events
              if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION]
    skipped = skipped_questions(result)
    at5 = {r["strategy"]: (r["recall"], r["iou"]) for r in rows if r["k"] == 5}
    if args.json:
        found = leaders(at5) if at5 else None  # None: no question could be scored
        print(json.dumps({"run_id": result.run_id, "eval_set": settings.eval_set, "mode": label,
                          "rows": rows, "skipped": skipped,
                          "leaders@5": found and {"best_recall": found.best_recall, "best_iou": found.best_iou,
                                                  "best_recall_names": found.best_recall_names,
                                                  "best_iou_names": found.best_iou_names,
                                                  "on_both": found.on_both},
                          "checks": [{"name": c.check_name, "passed": c.passed,
                                      "description": c.description} for c in checks]}, ensure_ascii=False, indent=2))
        return 0
    print(f"eval set: {settings.eval_set}   mode: {label}   run: {result.run_id[:8]}")
    print(format_table(rows))
    if at5:
        print(leaders_line(at5, 5))
    if skipped:
        print(f"{len(skipped)} question(s) not scored:")
        for qid, reason in skipped.items():
            print(f"    {qid}: {reason}")
    for c in checks:
        print(f"check {c.check_name}: {'passed' if c.passed else 'WARN'}: {c.description}")
    return 0


def skipped_questions(result) -> dict[str, str]:
    """question id -> why it was not scored, from the run's ``retrieval_eval`` materialization."""
    for event in result.get_asset_materialization_events():
        skipped = event.materialization.metadata.get("skipped")
        if skipped is not None:
            return dict(skipped.value)
    return {}


def step_failure_message(failure) -> str:
    """What made a step fail, without Dagster's wrappers: a ``Failure``'s description, else the innermost
    cause's message (``SearchError: no chunkyard database ...`` without the wrapping step error)."""
    described = getattr(failure.user_failure_data, "description", None) if failure.user_failure_data else None
    if described:
        return described.strip()
    error = failure.error
    while error.cause is not None:
        error = error.cause
    message = error.message.strip()
    # "SearchError: text" -> "text": the class is not news to the user, its message is.
    prefix = f"{error.cls_name}: "
    return message[len(prefix):] if message.startswith(prefix) else message


def history_rows(store, run_id: str) -> list[dict]:
    with store.connect(read_only=True) as con:
        cur = con.execute(
            "SELECT strategy, k, questions, recall, precision, iou, mrr, ndcg, chunks, tokens "
            "FROM retrieval_eval WHERE run_id = ? ORDER BY k, strategy", [run_id])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


def format_table(rows: Sequence[dict]) -> str:
    header = f"{'strategy':<18}{'k':>3}{'recall':>9}{'prec':>8}{'IoU':>8}{'MRR':>8}{'nDCG':>8}{'chunks':>8}{'tokens':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['strategy']:<18}{r['k']:>3}{r['recall']:>9.3f}{r['precision']:>8.3f}{r['iou']:>8.3f}"
                     f"{r['mrr']:>8.3f}{r['ndcg']:>8.3f}{r['chunks']:>8}{r['tokens']:>9}")
    return "\n".join(lines)
