"""Retrieval evaluation: an eval set, scored per strategy against the search index.

Eval set: JSONL, one object per line::

    {"id": "q1", "question": "...",
     "references": [{"doc": "html/foo.html", "excerpt": "exact text"},
                    {"doc": "a.md", "char_start": 10, "char_end": 42}]}

``doc`` is the document's partition key. An excerpt must occur verbatim in the
document's parsed text (its first occurrence is the reference); offsets index the
parsed text. A question whose reference cannot be resolved is left out of the
scores and reported with the reason; the others are scored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Mapping, Sequence

import numpy as np

from search.engine import SearchIndex
from search.metrics import QuestionScores, Span, is_relevant, mean_scores, score_question

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)
RECALL_DROP_TOLERANCE = 0.02  # "more than 2 points" of recall@5, on the 0..1 scale


class EvalSetError(ValueError):
    """The eval set file is malformed (names the line and what is wrong)."""


@dataclass(frozen=True)
class Reference:
    doc: str
    excerpt: str | None = None
    char_start: int | None = None
    char_end: int | None = None


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    references: tuple[Reference, ...]


def parse_eval_set(text: str, source: str = "eval set") -> list[Question]:
    """Questions from JSONL text; a malformed line raises EvalSetError naming it."""
    questions: list[Question] = []
    seen: set[str] = set()
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{line_no}"
        try:
            obj = json.loads(line)
            qid, question, refs = str(obj["id"]), obj["question"], obj["references"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise EvalSetError(f"{where}: expected {{id, question, references}}: {exc}") from exc
        if qid in seen:
            raise EvalSetError(f"{where}: duplicate id {qid!r}")
        seen.add(qid)
        if not isinstance(question, str) or not question.strip() or not isinstance(refs, list) or not refs:
            raise EvalSetError(f"{where}: question {qid!r} needs a question text and at least one reference")
        parsed = []
        for ref in refs:
            if not isinstance(ref, dict) or not isinstance(ref.get("doc"), str):
                raise EvalSetError(f"{where}: question {qid!r}: each reference needs a 'doc'")
            has_excerpt = isinstance(ref.get("excerpt"), str) and ref["excerpt"] != ""
            has_offsets = isinstance(ref.get("char_start"), int) and isinstance(ref.get("char_end"), int)
            if not (has_excerpt or has_offsets):
                raise EvalSetError(f"{where}: question {qid!r}: a reference needs an 'excerpt' or char_start/char_end")
            parsed.append(Reference(ref["doc"], ref.get("excerpt"), ref.get("char_start"), ref.get("char_end")))
        questions.append(Question(qid, question, tuple(parsed)))
    return questions


def load_eval_set(path: str | Path) -> list[Question]:
    path = Path(path)
    if not path.is_file():
        raise EvalSetError(f"eval set not found: {path}")
    return parse_eval_set(path.read_text(encoding="utf-8"), str(path))


def resolve_reference(ref: Reference, parsed_text: str | None) -> Span:
    """The reference as a span of the parsed text; ValueError says why it cannot be."""
    if parsed_text is None:
        raise ValueError(f"document {ref.doc!r} is not in the store (or has no parsed text)")
    if ref.excerpt is not None:
        start = parsed_text.find(ref.excerpt)
        if start < 0:
            raise ValueError(f"excerpt not found verbatim in {ref.doc!r}: {ref.excerpt[:60]!r}")
        end = start + len(ref.excerpt)
        if ref.char_start is not None and (ref.char_start, ref.char_end) != (start, end):
            # Offsets given with an excerpt must agree with its first occurrence, or one of them is wrong.
            raise ValueError(f"{ref.doc!r}: offsets {ref.char_start}..{ref.char_end} do not hold the excerpt")
        return (ref.doc, start, end)
    if not 0 <= ref.char_start < ref.char_end <= len(parsed_text):
        raise ValueError(f"offsets {ref.char_start}..{ref.char_end} outside {ref.doc!r} ({len(parsed_text)} chars)")
    return (ref.doc, ref.char_start, ref.char_end)


@dataclass(frozen=True)
class StrategyRow:
    """One strategy's mean scores at one k."""

    strategy: str
    k: int
    questions: int
    recall: float
    precision: float
    iou: float
    mrr: float
    ndcg: float
    chunks: int
    tokens: int


@dataclass
class EvalReport:
    rows: list[StrategyRow]
    skipped: dict[str, str] = field(default_factory=dict)  # question id -> why it was not scored
    mode: str = "vector"
    # (strategy, k) -> question id -> that question's scores, in the eval set's order
    per_question: dict[tuple[str, int], dict[str, QuestionScores]] = field(default_factory=dict)

    def at(self, k: int) -> dict[str, StrategyRow]:
        return {r.strategy: r for r in self.rows if r.k == k}

    def means_over(self, k: int, question_ids: Collection[str]) -> dict[str, dict[str, float]]:
        """strategy -> the mean scores at ``k`` over these scored questions only (a subset of
        the eval set, e.g. half of it), from the searches already made: nothing is searched again."""
        wanted = set(question_ids)
        return {strategy: mean_scores([s for qid, s in scores.items() if qid in wanted])
                for (strategy, at_k), scores in self.per_question.items() if at_k == k}


def evaluate(
    index: SearchIndex,
    questions: Sequence[Question],
    *,
    ks: Sequence[int] = DEFAULT_KS,
    mode: str = "vector",
    strategies: Sequence[str] | None = None,
    skip_covered: float | None = None,
    keyword_weight: float = 1.0,
    within: str | None = None,
    within_depth: int = 10,
    within_rank: str = "fine",
) -> EvalReport:
    """Score every strategy of the index on the questions at each k.

    ``skip_covered``: overlap-aware top k; ``within`` / ``within_depth`` / ``within_rank``:
    coarse-to-fine search (``SearchIndex.search``): each strategy's row then scores exactly
    the hits search returns for it inside the coarse strategy's top hits. The report's
    ``mode`` names these options (``mode_label``), so its history is never compared with
    plain top k."""
    index.refresh()  # once: every question is scored against the same chunk set
    names = list(strategies) if strategies is not None else index.strategies(refresh=False)
    resolved: dict[str, list[Span]] = {}
    skipped: dict[str, str] = {}
    for q in questions:
        try:
            resolved[q.id] = [resolve_reference(r, index.parsed_text(r.doc)) for r in q.references]
        except ValueError as exc:
            skipped[q.id] = str(exc)
    scored = [q for q in questions if q.id in resolved]
    depth = max(ks)
    vectors: list[np.ndarray | None] = [None] * len(scored)
    if mode != "keyword" and scored:
        vectors = list(np.asarray(index.embed([q.question for q in scored]), dtype=np.float32))
    rows: list[StrategyRow] = []
    per_question: dict[tuple[str, int], dict[str, QuestionScores]] = {}
    for name in names:
        spans = index.chunk_spans(name)
        chunks, tokens = index.cost(name)
        per_k: dict[int, list[QuestionScores]] = {k: [] for k in ks}
        for q, vector in zip(scored, vectors):
            hits = index.search(q.question, mode=mode, k=depth, strategy=name, query_vector=vector, refresh=False,
                                skip_covered=skip_covered, keyword_weight=keyword_weight, within=within,
                                within_depth=within_depth, within_rank=within_rank)
            ranked = [(h.doc_id, h.char_start, h.char_end) for h in hits]
            refs = resolved[q.id]
            available = sum(1 for span in spans if is_relevant(span, refs))
            for k in ks:
                per_k[k].append(score_question(ranked, refs, k, available))
        for k in ks:
            means = mean_scores(per_k[k])
            rows.append(StrategyRow(name, k, len(per_k[k]), chunks=chunks, tokens=tokens, **means))
            per_question[(name, k)] = {q.id: s for q, s in zip(scored, per_k[k])}
    return EvalReport(rows=rows, skipped=skipped, mode=mode_label(mode, skip_covered, keyword_weight, within,
                                                                  within_depth, within_rank),
                      per_question=per_question)


def mode_label(mode: str, skip_covered: float | None = None, keyword_weight: float = 1.0,
               within: str | None = None, within_depth: int = 10, within_rank: str = "fine") -> str:
    """The search mode as recorded in the history: ``vector``, ``vector,skip_covered=0.5``,
    ``hybrid,keyword_weight=0.5``, ``hybrid,within=semantic@10``, ``hybrid,within=semantic@10/rrf``:
    results of different options are never compared."""
    label = mode if skip_covered is None else f"{mode},skip_covered={skip_covered:g}"
    if mode == "hybrid" and keyword_weight != 1.0:
        label += f",keyword_weight={keyword_weight:g}"
    if within is not None:
        label += f",within={within}@{within_depth}" + ("" if within_rank == "fine" else f"/{within_rank}")
    return label


def recall_drops(
    previous: dict[str, float], current: dict[str, float], tolerance: float = RECALL_DROP_TOLERANCE
) -> dict[str, tuple[float, float]]:
    """Strategies whose recall fell by more than ``tolerance`` since the previous value: name -> (before, now).
    A strategy without a previous value cannot have fallen."""
    return {
        name: (previous[name], now)
        for name, now in current.items()
        if name in previous and previous[name] - now > tolerance + 1e-12
    }


def markdown_table(report: EvalReport, ks: Sequence[int] = (5,)) -> str:
    """Per strategy and k: recall, precision, IoU, MRR, nDCG, chunks, tokens (Markdown)."""
    lines = [
        "| strategy | k | recall | precision | IoU | MRR | nDCG | chunks | tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k in ks:
        for r in sorted(report.at(k).values(), key=lambda r: r.strategy):
            lines.append(
                f"| {r.strategy} | {k} | {r.recall:.3f} | {r.precision:.3f} | {r.iou:.3f} | {r.mrr:.3f} | "
                f"{r.ndcg:.3f} | {r.chunks} | {r.tokens} |"
            )
    return "\n".join(lines)


@dataclass(frozen=True)
class Leaders:
    """Who leads on recall and on IoU at one k, and which rows lead on both at once."""

    best_recall: tuple[str, float]  # the best recall among the rows compared against (the first name on a tie)
    best_iou: tuple[str, float]
    on_both: list[str]  # rows at or above the best of the others on recall and IoU at once
    # Every row compared against that has the best recall (IoU) exactly, in the scores' order: a tie
    # is said, not hidden behind the first name.
    best_recall_names: tuple[str, ...] = ()
    best_iou_names: tuple[str, ...] = ()


def leaders(scores: Mapping[str, tuple[float, float]], others: Collection[str] | None = None) -> Leaders:
    """Rows at or above the best of the others on recall and IoU at once (issue 15's goal).

    ``scores``: name -> (recall, IoU), unrounded: two rows that print alike at three decimals
    may still differ. ``others``: the rows each one is compared against (default: every row),
    never itself; a row with nothing to compare against leads on nothing. ``best_recall`` /
    ``best_iou`` are the best of ``others`` (the first name on a tie).
    """
    pool = [name for name in scores if others is None or name in others]
    if not pool:
        raise ValueError("no rows to compare against")
    best_recall = max(pool, key=lambda name: scores[name][0])
    best_iou = max(pool, key=lambda name: scores[name][1])
    on_both = []
    for name, (recall, iou) in scores.items():
        rivals = [o for o in pool if o != name]
        if rivals and all(recall >= scores[o][0] and iou >= scores[o][1] for o in rivals):
            on_both.append(name)
    recall_names = tuple(name for name in pool if scores[name][0] == scores[best_recall][0])
    iou_names = tuple(name for name in pool if scores[name][1] == scores[best_iou][1])
    return Leaders((best_recall, scores[best_recall][0]), (best_iou, scores[best_iou][1]), on_both,
                   recall_names, iou_names)


def leaders_line(scores: Mapping[str, tuple[float, float]], k: int, others: Collection[str] | None = None,
                 against: str = "the best of the others", digits: int = 4) -> str:
    """``leaders`` in one sentence, with the figures it compared; ``against`` names ``others``."""
    found = leaders(scores, others)
    recall, iou = found.best_recall[1], found.best_iou[1]
    recall_names, iou_names = ", ".join(found.best_recall_names), ", ".join(found.best_iou_names)
    bests = f"best recall@{k}: {recall_names} {recall:.{digits}f}; best IoU@{k}: {iou_names} {iou:.{digits}f}"
    if not found.on_both:
        return f"no row is at or above {against} on recall@{k} and IoU@{k} at once ({bests})"
    rows = ", ".join(f"{n} ({scores[n][0]:.{digits}f} / {scores[n][1]:.{digits}f})" for n in found.on_both)
    return f"at or above {against} on recall@{k} and IoU@{k} at once: {rows} ({bests})"


@dataclass(frozen=True)
class LeadSupport:
    """How often a row leads on both counts when the scored questions are drawn again.

    ``share``: the fraction of resamples in which the row is at or above the best of the
    others on recall and IoU at once (``leaders`` on that resample). ``recall_margin`` /
    ``iou_margin``: the 2.5th and 97.5th percentiles of (the row's mean - the best of the
    others' mean) over the resamples; above 0 at both ends is a lead the questions' choice
    does not undo.
    """

    share: float
    recall_margin: tuple[float, float]
    iou_margin: tuple[float, float]


def lead_support(report: EvalReport, k: int, rows: Collection[str], others: Collection[str] | None = None,
                 resamples: int = 2000, seed: int = 0) -> dict[str, LeadSupport]:
    """``LeadSupport`` of each of ``rows`` against ``others`` (default: every other strategy):
    a paired bootstrap over the scored questions (each resample draws as many questions as were
    scored, with replacement, the same draw for every strategy), from the per-question scores
    already made: nothing is searched again. ``seed`` makes it repeatable."""
    per_strategy = {strategy: scores for (strategy, at_k), scores in report.per_question.items() if at_k == k}
    ids = list(next(iter(per_strategy.values())))
    recall = {name: np.array([scores[q].recall for q in ids]) for name, scores in per_strategy.items()}
    iou = {name: np.array([scores[q].iou for q in ids]) for name, scores in per_strategy.items()}
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(resamples, len(ids)))
    mean_recall = {name: values[draws].mean(axis=1) for name, values in recall.items()}
    mean_iou = {name: values[draws].mean(axis=1) for name, values in iou.items()}
    out = {}
    for name in rows:
        rivals = [o for o in per_strategy if o != name and (others is None or o in others)]
        if not rivals:
            raise ValueError(f"{name}: no rows to compare against")
        recall_margin = mean_recall[name] - np.max([mean_recall[o] for o in rivals], axis=0)
        iou_margin = mean_iou[name] - np.max([mean_iou[o] for o in rivals], axis=0)
        out[name] = LeadSupport(
            share=float(np.mean((recall_margin >= 0) & (iou_margin >= 0))),
            recall_margin=tuple(float(x) for x in np.percentile(recall_margin, [2.5, 97.5])),
            iou_margin=tuple(float(x) for x in np.percentile(iou_margin, [2.5, 97.5])),
        )
    return out


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# -- history in the store (DDL: resources/schema.py, table retrieval_eval) -------------

HISTORY_TABLE = "retrieval_eval"
HISTORY_COLUMNS = (
    "run_id", "evaluated_at", "eval_set", "eval_set_sha256", "mode", "model_id", "strategy", "k", "questions",
    "recall", "precision", "iou", "mrr", "ndcg", "chunks", "tokens",
)


def previous_recall(store, *, eval_set_sha256: str, mode: str, model_id: str, k: int = 5) -> dict[str, float]:
    """strategy -> recall@k of the latest recorded evaluation of this eval set, mode and model.

    The eval set is its content (sha256), not its path: ``./eval/x.jsonl`` and its absolute
    path are one set, and a set edited in place is another (its questions changed)."""
    with store.connect(read_only=True) as con:
        if not con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [HISTORY_TABLE]
        ).fetchone()[0]:
            return {}
        return dict(con.execute(
            f"""SELECT strategy, arg_max(recall, evaluated_at) FROM {HISTORY_TABLE}
                WHERE eval_set_sha256 = ? AND mode = ? AND model_id = ? AND k = ? GROUP BY strategy""",
            [eval_set_sha256, mode, model_id, k],
        ).fetchall())


def record_report(
    store, report: EvalReport, *, run_id: str, eval_set: str, eval_set_sha256: str, model_id: str, evaluated_at
) -> None:
    """Append one evaluation's rows to the history, in one transaction (re-run whole if a
    concurrent lake writer wins the commit: ``ChunkStore.write_transaction``)."""
    def write(con) -> None:
        con.execute(f"DELETE FROM {HISTORY_TABLE} WHERE run_id = ?", [run_id])
        placeholders = ", ".join("?" for _ in HISTORY_COLUMNS)
        for r in report.rows:
            con.execute(
                f"INSERT INTO {HISTORY_TABLE} ({', '.join(HISTORY_COLUMNS)}) VALUES ({placeholders})",
                [run_id, evaluated_at, eval_set, eval_set_sha256, report.mode, model_id, r.strategy, r.k,
                 r.questions, r.recall, r.precision, r.iou, r.mrr, r.ndcg, r.chunks, r.tokens],
            )

    store.write_transaction(write)
