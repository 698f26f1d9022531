"""Whole-pipeline cost: seconds per document per stage, measured inside the assets.

Each document asset times its own work per document and, at the end of its step,
appends one ``stage_costs`` row per document (DDL in resources/schema.py) and puts
the same figure in that partition's metadata as ``seconds`` (the UI plots it).

Invariants:
- ``seconds`` is wall time spent on that document in that stage, store writes included
  (``store_seconds`` is the part spent writing its rows);
- work a step does once for the whole batch (the embedding model's call) is shared out
  among the documents it served, so the documents' seconds of one step add up to the
  step's measured work;
- rows are only appended (a retried step replaces its own rows), never updated, so an
  earlier run stays comparable with the latest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Mapping

INGEST_TAG = "chunkyard/ingest"  # set by `chunkyard run` on every run it starts: its runs form one ingest
STAGES = ("read", "parse", "chunk", "embed")  # in pipeline order


@dataclass(frozen=True)
class StageCost:
    """What one document cost in one stage of one step."""

    doc_id: str
    stage: str  # one of STAGES
    strategy: str  # '' for read and parse
    seconds: float
    store_seconds: float = 0.0
    model_seconds: float | None = None  # embed only
    new_embeddings: int | None = None  # embed only
    cache_hits: int | None = None  # embed only

    def metadata(self) -> dict[str, float | int]:
        """The partition's metadata entries (rounded to what a person reads)."""
        entries: dict[str, float | int] = {"seconds": round(self.seconds, 4),
                                           "store_seconds": round(self.store_seconds, 4)}
        if self.model_seconds is not None:
            entries["model_seconds"] = round(self.model_seconds, 4)
        return entries


def stage_label(stage: str, strategy: str) -> str:
    """``parse``, ``chunk recursive``, ``embed token``: how tables and the CLI name a stage."""
    return f"{stage} {strategy}" if strategy else stage


class Stopwatch:
    """Accumulates wall seconds per key: ``with watch.timing(doc_id): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, key: str, seconds: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def timing(self, key: str) -> "_Lap":
        return _Lap(self, key)

    def get(self, key: str) -> float:
        return self.seconds.get(key, 0.0)


class _Lap:
    def __init__(self, watch: Stopwatch, key: str) -> None:
        self.watch, self.key = watch, key

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.watch.add(self.key, time.perf_counter() - self.start)


def share_out(seconds: float, weights: Mapping[str, float]) -> dict[str, float]:
    """Split ``seconds`` among the keys in proportion to their weights (equally when all are 0).

    Invariant: the shares add up to ``seconds`` (for a non-empty ``weights``).
    """
    if not weights:
        return {}
    total = sum(weights.values())
    if total <= 0:
        return {key: seconds / len(weights) for key in weights}
    return {key: seconds * weight / total for key, weight in weights.items()}


def ingest_id_of(context) -> str:
    """The ingest a run belongs to: the CLI's tag, else the run itself (sensor, schedule, UI)."""
    return context.run.tags.get(INGEST_TAG) or context.run.run_id


def record_stage_costs(chunk_store, run_id: str, ingest_id: str, costs: Iterable[StageCost]) -> None:
    """Append this step's rows, in one transaction (a retried step's earlier rows are replaced)."""
    rows = [
        (ingest_id, run_id, c.doc_id, c.stage, c.strategy, float(c.seconds), float(c.store_seconds),
         c.model_seconds, c.new_embeddings, c.cache_hits)
        for c in costs
    ]
    if not rows:
        return
    chunk_store.record_stage_costs(rows, recorded_at=datetime.now(timezone.utc).replace(tzinfo=None))
