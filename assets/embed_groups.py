"""The embeddings step's model calls: documents grouped for throughput, each within its time budget.

One model call per document costs the idle tail of the workers once per call (the last
batches of a call run while a worker waits) and sorts fewer texts by length: on
../shared/corpus (36 documents, 1,285 recursive chunk texts of 400 tokens) embedding
document by document took 1.02-1.17x the time of one call for all (4 interleaved rounds,
median 1.10), grouped as here 0.99x and 1.08x (2 rounds; the host's noise is of that
order; a throwaway script, session 19: ``bench/bench_embedding_scaling.py --calls set`` against
``--calls step`` measures the same question). So small documents share a call, up to
``GROUP_TEXTS`` texts, and a document with that many texts of its own gets a call to itself.

Invariants a caller relies on (:func:`embed_in_groups`):

* Each text (by key) is embedded at most once, in the call of the first document that
  needs it; every document that is not refused ends with a vector for each of its texts.
* A call runs under its time budget (``budget``). A group's call over it is not a refusal:
  each of its documents is embedded again alone, under a budget of its own, so a refusal
  is only ever one document's (the wasted work is at most one budget).
* A refused document gets no vectors from this step; a later document that needed the
  same text is not held back by it (the text is embedded again in that document's call).
* Model seconds (for every document, refused ones included): a document alone gets its
  call's measured seconds; a group's are shared among its documents by the characters each
  asked to embed; a group's call over the budget is charged to the documents then refused
  alone, never to the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TypeVar

import numpy as np

from assets.costs import share_out
from chunking.limits import LimitExceeded

Row = TypeVar("Row")

# Texts per shared call: a few dozen batches, so the workers' idle tail is a few per cent
# of the call (measured above), while a refusal re-runs at most this many texts.
GROUP_TEXTS = 256


def plan_calls(sizes: Mapping[str, int]) -> list[list[str]]:
    """The documents of ``sizes`` (doc -> texts it asks the model for, in step order) grouped into
    model calls: a document with ``GROUP_TEXTS`` texts or more alone, the others in order until a
    group reaches ``GROUP_TEXTS``. Every document is in exactly one call."""
    planned: list[list[str]] = []
    group: list[str] = []
    texts = 0
    for doc, count in sizes.items():
        if count >= GROUP_TEXTS:
            planned.append([doc])  # enough to keep the workers busy alone: its seconds are its own
            continue
        group.append(doc)
        texts += count
        if texts >= GROUP_TEXTS:
            planned.append(group)
            group, texts = [], 0
    if group:
        planned.append(group)
    return planned


def embed_in_groups(
    needs: Mapping[str, Mapping[str, Row]],
    known: set[str],
    embed: Callable[[list[Row]], np.ndarray],
    budget: Callable[[str], AbstractContextManager],
    text_of: Callable[[Row], str],
) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, str]]:
    """Embed what each document of ``needs`` (doc_id -> {key: row}, in step order) lacks.

    ``known`` are keys that already have vectors (the cache); ``embed(rows)`` runs the
    model; ``budget(label)`` is the time budget a call runs under (``label``: a doc_id, or
    the documents of a group); ``text_of(row)`` is what a row asks the model to read.
    Returns ``(vectors by key, model seconds by doc_id (refused ones too), refusal message by doc_id)``.
    """
    vectors: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    refused: dict[str, str] = {}
    claimed = set(known)

    def charge(elapsed: float, docs: Sequence[str], own: dict[str, dict[str, Row]]) -> None:
        """Add ``elapsed`` model seconds to ``docs``, shared by the characters each asked for."""
        weights = {d: sum(len(text_of(r)) for r in own[d].values()) for d in docs}
        for doc, share in share_out(elapsed, weights).items():
            seconds[doc] = seconds.get(doc, 0.0) + share

    def run(docs: Sequence[str], own: dict[str, dict[str, Row]]) -> None:
        """One call for ``docs``; a group over its budget falls back to one call per document."""
        rows = {key: row for doc in docs for key, row in own[doc].items()}
        label = docs[0] if len(docs) == 1 else f"documents {', '.join(docs)}"
        started = time.perf_counter()
        try:
            with budget(label):
                fresh = embed(list(rows.values())) if rows else np.zeros((0, 0), dtype=np.float32)
        except LimitExceeded as exc:
            elapsed = time.perf_counter() - started
            if len(docs) == 1:
                refused[docs[0]] = str(exc)
                charge(elapsed, docs, own)  # its own time until the refusal: nobody else's
                return
            for doc in docs:
                run([doc], own)
            # The group's call was spent on the documents that are over the budget alone too
            # (on all of the group's when none is: the machine was slow for that call).
            charge(elapsed, [d for d in docs if d in refused] or docs, own)
            return
        vectors.update(zip(rows, fresh))
        charge(time.perf_counter() - started, docs, own)

    own: dict[str, dict[str, Row]] = {}  # doc -> the texts it is the first to need
    for doc, rows in needs.items():
        own[doc] = {key: row for key, row in rows.items() if key not in claimed}
        claimed.update(own[doc])
    for docs in plan_calls({doc: len(rows) for doc, rows in own.items()}):
        run(docs, own)
    # A text claimed by a document that was then refused: embedded for the next one that needs it.
    for doc, rows in needs.items():
        if doc in refused:
            continue
        lacking = {key: row for key, row in rows.items() if key not in vectors and key not in known}
        if lacking:
            own[doc] = lacking
            run([doc], own)
    return vectors, seconds, refused
