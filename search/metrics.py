"""Retrieval metrics over characters, as pure functions (no database, no Dagster).

A span is ``(doc_id, char_start, char_end)``: a half-open range of characters of
one document's parsed text. Retrieved chunks and references are both spans.

Character metrics treat spans as *sets of characters* (per document):

    R = characters covered by the retrieved chunks (their union)
    T = characters covered by the references (their union)
    recall    = |R ∩ T| / |T|
    precision = |R ∩ T| / |R|
    IoU       = |R ∩ T| / |R ∪ T|

so a character two overlapping chunks both hold counts once (what overlap costs
shows in the chunk count and tokens embedded, not here), and characters of
another document never meet a reference. Empty R gives precision 0; empty T is
rejected (a question without a reference cannot be scored).

Rank metrics use binary relevance: a retrieved chunk is relevant when it shares at
least one character with a reference. MRR is 1/rank of the first relevant chunk
within the top k (0 if none); nDCG@k divides DCG by the ideal DCG of
``min(k, relevant_available)`` relevant chunks in front (or of the relevant hits
retrieved, when there are more of those), so it never exceeds 1.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

Span = tuple[str, int, int]


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint, non-adjacent-merged intervals covering exactly the same characters."""
    merged: list[list[int]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def _by_doc(spans: Iterable[Span]) -> dict[str, list[tuple[int, int]]]:
    grouped: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for doc_id, start, end in spans:
        grouped[doc_id].append((start, end))
    return {doc: merge_intervals(iv) for doc, iv in grouped.items()}


def covered_length(spans: Iterable[Span]) -> int:
    """Number of distinct characters the spans cover."""
    return sum(e - s for iv in _by_doc(spans).values() for s, e in iv)


def _intersection_length(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> int:
    """Characters in both of two merged interval lists (two-pointer sweep)."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def overlap_length(first: Iterable[Span], second: Iterable[Span]) -> int:
    """Distinct characters covered by both span sets (same document only)."""
    a, b = _by_doc(first), _by_doc(second)
    return sum(_intersection_length(a[doc], b[doc]) for doc in a.keys() & b.keys())


@dataclass(frozen=True)
class CharScores:
    recall: float
    precision: float
    iou: float


def char_scores(retrieved: Sequence[Span], references: Sequence[Span]) -> CharScores:
    """Recall, precision and IoU of the retrieved characters against the references'."""
    relevant = covered_length(references)
    if relevant == 0:
        raise ValueError("a question needs at least one non-empty reference span")
    got = covered_length(retrieved)
    both = overlap_length(retrieved, references)
    union = got + relevant - both
    return CharScores(
        recall=both / relevant,
        precision=both / got if got else 0.0,
        iou=both / union,
    )


def is_relevant(chunk: Span, references: Sequence[Span]) -> bool:
    """A chunk is relevant when it shares at least one character with a reference."""
    doc_id, start, end = chunk
    return any(r_doc == doc_id and min(end, r_end) > max(start, r_start) for r_doc, r_start, r_end in references)


def reciprocal_rank(retrieved: Sequence[Span], references: Sequence[Span]) -> float:
    for rank, chunk in enumerate(retrieved, start=1):
        if is_relevant(chunk, references):
            return 1.0 / rank
    return 0.0


def ndcg(retrieved: Sequence[Span], references: Sequence[Span], relevant_available: int) -> float:
    """Binary-relevance nDCG of ``retrieved`` (already cut at k), in [0, 1]; the ideal ranks
    ``min(len(retrieved), relevant_available)`` relevant chunks first, or as many as were
    retrieved relevant if that is more (hits within chunks, ``search --within``, can
    retrieve several relevant spans of one relevant chunk): no ranking beats the ideal."""
    relevant_ranks = [rank for rank, c in enumerate(retrieved, start=1) if is_relevant(c, references)]
    dcg = sum(1.0 / math.log2(rank + 1) for rank in relevant_ranks)
    ideal_n = min(len(retrieved), max(relevant_available, len(relevant_ranks)))
    idcg = sum(1.0 / math.log2(rank + 1) for rank in range(1, ideal_n + 1))
    return dcg / idcg if idcg else 0.0


@dataclass(frozen=True)
class QuestionScores:
    k: int
    recall: float
    precision: float
    iou: float
    mrr: float
    ndcg: float


def score_question(
    ranked: Sequence[Span], references: Sequence[Span], k: int, relevant_available: int
) -> QuestionScores:
    """Every metric of one question at cut-off ``k`` (``ranked`` best first, may be longer than k)."""
    top = list(ranked[:k])
    chars = char_scores(top, references)
    return QuestionScores(
        k=k, recall=chars.recall, precision=chars.precision, iou=chars.iou,
        mrr=reciprocal_rank(top, references), ndcg=ndcg(top, references, relevant_available),
    )


def mean_scores(scores: Sequence[QuestionScores]) -> dict[str, float]:
    """Macro average over questions (each question weighs the same)."""
    if not scores:
        return {"recall": 0.0, "precision": 0.0, "iou": 0.0, "mrr": 0.0, "ndcg": 0.0}
    n = len(scores)
    return {
        name: sum(getattr(s, name) for s in scores) / n for name in ("recall", "precision", "iou", "mrr", "ndcg")
    }
