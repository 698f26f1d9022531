"""Asset-check logic as plain functions (unit-testable without Dagster), and the
one place that turns their outcomes into Dagster check events.

Checks run per partition. In a run of one partition key they are ordinary
``AssetCheckResult``s, so blocking checks gate downstream steps natively. In a
partition-range run (batched backfills, ``make run``; a range of one document too) an ``AssetCheckResult``
cannot name a partition, so each partition's outcome is logged as its own
``AssetCheckEvaluation`` naming the partition and the materialization it checked
(this run's, read back from the instance), and the step's result is an
unpartitioned summary (failing if any partition failed, naming them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    DataVersion,
    MaterializeResult,
)
# Not exported at the top level in 1.13; it is what ties a check result to the
# materialization it checked (the UI shows a result only if it ties to the latest).
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from assets.partitions import documents_partitions

ERROR = AssetCheckSeverity.ERROR
WARN = AssetCheckSeverity.WARN


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    passed: bool
    severity: AssetCheckSeverity = ERROR
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckDef:
    name: str
    description: str
    blocking: bool = False


def check_specs(asset_key: AssetKey, defs: Sequence[CheckDef]) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            d.name, asset=asset_key, description=d.description, blocking=d.blocking,
            partitions_def=documents_partitions,
        )
        for d in defs
    ]


def emit_partition_results(
    context: AssetExecutionContext,
    asset_key: AssetKey,
    defs: Sequence[CheckDef],
    outcomes_by_partition: dict[str, list[CheckOutcome]],
    metadata_by_partition: dict[str, dict[str, Any]],
    shared_metadata: dict[str, Any] | None = None,
    data_version: DataVersion | None = None,
) -> Iterator[object]:
    """The step's materialization and check results, each partition described by its own numbers.

    Invariant: every partition of the step gets one materialization whose metadata is
    ``shared_metadata`` (true of every partition, e.g. the config hash) overlaid with
    that partition's own ``metadata_by_partition`` entry, never a batch total.
    """
    for partition_key in context.partition_keys:
        own = metadata_by_partition.get(partition_key)
        if own:
            # Partition-scoped metadata: Dagster merges it into that partition's event only.
            context.add_asset_metadata(own, asset_key=asset_key, partition_key=partition_key)
    yield MaterializeResult(asset_key=asset_key, metadata=shared_metadata or {}, data_version=data_version)
    yield from emit_check_results(context, asset_key, defs, outcomes_by_partition)


def record_failed_partition(context: AssetExecutionContext, asset_key: AssetKey, outcome: CheckOutcome) -> None:
    """Before a single-partition step fails: record the failed check on the partition, with
    its cause, so the check shows Failed and why (not "Execution failed, no metadata").

    It targets the partition's latest materialization (an earlier good one, kept), so the
    UI counts it as current.
    """
    (partition_key,) = context.partition_keys
    context.log_event(
        AssetCheckEvaluation(
            asset_key=asset_key, check_name=outcome.name, passed=outcome.passed, partition=partition_key,
            severity=outcome.severity, description=outcome.description or None, metadata=outcome.metadata,
            target_materialization_data=latest_materializations(context, asset_key, [partition_key]).get(partition_key),
        )
    )


def latest_materializations(
    context: AssetExecutionContext, asset_key: AssetKey, partition_keys: Sequence[str]
) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """The latest stored materialization of each of ``partition_keys`` (absent: never materialized)."""
    from dagster._core.storage.event_log.base import AssetRecordsFilter

    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=list(partition_keys)), limit=len(partition_keys)
    ).records
    latest: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    for record in records:  # newest first
        if record.partition_key is not None and record.partition_key not in latest:
            latest[record.partition_key] = AssetCheckEvaluationTargetMaterializationData(
                run_id=record.run_id, storage_id=record.storage_id, timestamp=record.timestamp
            )
    return latest


def emit_check_results(
    context: AssetExecutionContext,
    asset_key: AssetKey,
    defs: Sequence[CheckDef],
    outcomes_by_partition: dict[str, list[CheckOutcome]],
) -> Iterator[AssetCheckResult]:
    """Yield one result per declared check for the step (see the module docstring).

    Call after the step's materialization: in a range run each partition's evaluation
    names the materialization it checked (this run's), which is what makes the UI show
    it as that partition's current result rather than Missing.
    """
    # A run of one partition key. A range of one (the CLI's batch of one document) is not: Dagster
    # stores its AssetCheckResult with no partition, which the UI shows as Skipped.
    single = context.has_partition_key
    targets = {} if single else latest_materializations(context, asset_key, list(outcomes_by_partition))
    for d in defs:
        per_partition = {
            pk: next((o for o in outcomes if o.name == d.name), None)
            for pk, outcomes in outcomes_by_partition.items()
        }
        evaluated = {pk: o for pk, o in per_partition.items() if o is not None}
        if single:
            outcome = next(iter(evaluated.values()), None)
            if outcome is None:
                outcome = CheckOutcome(d.name, True, description="nothing to check: no stored data for this partition")
            yield AssetCheckResult(
                check_name=d.name, asset_key=asset_key, passed=outcome.passed, severity=outcome.severity,
                description=outcome.description or None, metadata=outcome.metadata,
            )
            continue
        for pk, outcome in evaluated.items():
            context.log_event(
                AssetCheckEvaluation(
                    asset_key=asset_key, check_name=d.name, passed=outcome.passed, partition=pk,
                    severity=outcome.severity, description=outcome.description or None,
                    metadata=outcome.metadata, target_materialization_data=targets.get(pk),
                )
            )
        failed = sorted(pk for pk, o in evaluated.items() if not o.passed)
        severity = ERROR if any(evaluated[pk].severity == ERROR for pk in failed) else WARN
        yield AssetCheckResult(
            check_name=d.name, asset_key=asset_key, passed=not failed, severity=severity,
            description=(f"failed for {len(failed)} of {len(evaluated)} documents: " + ", ".join(failed[:20]))
            if failed else f"passed for all {len(evaluated)} documents",
            metadata={"documents_checked": len(evaluated), "documents_failed": len(failed),
                      "failed_documents": failed[:100]},
        )


# -- chunk checks -------------------------------------------------------------------


def check_token_cap(name: str, token_counts: Sequence[int], exempt: Sequence[bool], cap: int | None) -> CheckOutcome:
    """Every chunk within the strategy's hard cap, except chunks the strategy marks exempt (figures)."""
    if cap is None:
        return CheckOutcome(name, True, description="strategy has no hard token cap")
    over = [i for i, (n, ex) in enumerate(zip(token_counts, exempt)) if n > cap and not ex]
    return CheckOutcome(
        name, not over, ERROR,
        f"{len(over)} chunk(s) exceed the {cap}-token cap" if over else f"all chunks within {cap} tokens",
        {"cap": cap, "max_tokens": max(token_counts, default=0), "over_cap_chunks": over[:50]},
    )


def check_no_empty_chunks(name: str, texts: Sequence[str]) -> CheckOutcome:
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    return CheckOutcome(
        name, not empty, ERROR,
        f"{len(empty)} empty chunk(s)" if empty else f"{len(texts)} chunks, none empty",
        {"empty_chunks": empty[:50]},
    )


_NON_SPACE = re.compile(r"\S")


def uncovered_characters(text: str, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs of ``text`` holding non-whitespace characters that no span covers."""
    covered = sorted(spans)
    gaps: list[tuple[int, int]] = []
    cursor = 0
    for start, end in covered + [(len(text), len(text))]:
        if start > cursor and _NON_SPACE.search(text, cursor, start):
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    return gaps


def check_coverage(name: str, text: str, spans: Sequence[tuple[int, int]]) -> CheckOutcome:
    """No text lost: every non-whitespace character of the parsed text lies in some chunk's span."""
    gaps = uncovered_characters(text, spans)
    lost = sum(len(_NON_SPACE.findall(text[s:e])) for s, e in gaps)
    return CheckOutcome(
        name, not gaps, ERROR,
        f"{lost} non-whitespace character(s) in {len(gaps)} run(s) are in no chunk" if gaps
        else "every non-whitespace character is in a chunk",
        {"lost_characters": lost, "first_gaps": [list(g) for g in gaps[:10]],
         "first_gap_text": text[gaps[0][0]:gaps[0][1]][:200] if gaps else ""},
    )


_MARKUP_TAG = re.compile(r"<(/?)(table|figure)\b[^>]*?(/?)>")


def cut_tags(text: str) -> set[str]:
    """Names of ``<table>``/``<figure>`` elements left unbalanced (cut) in ``text``."""
    depth: dict[str, int] = {}
    cut: set[str] = set()
    for match in _MARKUP_TAG.finditer(text):
        closing, name, self_closing = match.group(1), match.group(2), match.group(3)
        if self_closing:
            continue
        if closing:
            if depth.get(name, 0) == 0:
                cut.add(name)  # a close whose open is in an earlier chunk
            else:
                depth[name] -= 1
        else:
            depth[name] = depth.get(name, 0) + 1
    return cut | {name for name, d in depth.items() if d > 0}


def check_markup(name: str, texts: Sequence[str], fragments: Sequence[bool], atomic: Sequence[str]) -> CheckOutcome:
    """No ``<table>``/``<figure>`` cut by a chunk boundary (ERROR for tags the strategy keeps whole)."""
    broken = {i: cut_tags(t) for i, t in enumerate(texts) if not fragments[i]}
    broken = {i: tags for i, tags in broken.items() if tags}
    promised = sorted({i for i, tags in broken.items() if tags & set(atomic)})
    severity = ERROR if promised else WARN
    return CheckOutcome(
        name, not broken, severity,
        f"{len(broken)} chunk(s) cut through <table>/<figure> markup"
        + (f", {len(promised)} of them in tags this strategy keeps whole" if promised else "")
        if broken else "no <table>/<figure> markup cut",
        {"cut_chunks": sorted(broken)[:50], "atomic_tags": list(atomic)},
    )


# -- embedding checks ---------------------------------------------------------------


def check_embeddings(name: str, n_chunks: int, vectors: Sequence[np.ndarray], dimension: int) -> CheckOutcome:
    """One vector per chunk, of the model's dimension, all finite."""
    problems = []
    if len(vectors) != n_chunks:
        problems.append(f"{len(vectors)} vectors for {n_chunks} chunks")
    wrong_dim = [i for i, v in enumerate(vectors) if v.shape != (dimension,)]
    if wrong_dim:
        problems.append(f"{len(wrong_dim)} vector(s) not of dimension {dimension}")
    non_finite = [i for i, v in enumerate(vectors) if not np.isfinite(v).all()]
    if non_finite:
        problems.append(f"{len(non_finite)} vector(s) with NaN/inf")
    return CheckOutcome(
        name, not problems, ERROR, "; ".join(problems) or f"{n_chunks} finite {dimension}-d vectors",
        {"chunks": n_chunks, "vectors": len(vectors), "dimension": dimension},
    )


def check_model_max_sequence(name: str, model_token_counts: Sequence[int], max_seq_length: int) -> CheckOutcome:
    """WARN: chunks longer than the model reads are silently truncated when embedded."""
    over = [i for i, n in enumerate(model_token_counts) if n > max_seq_length]
    share = len(over) / len(model_token_counts) if model_token_counts else 0.0
    return CheckOutcome(
        name, not over, WARN,
        f"{len(over)} of {len(model_token_counts)} chunk(s) exceed the model's {max_seq_length}-token "
        "max sequence; only their first part is embedded" if over else "every chunk fits the model's max sequence",
        {"max_seq_length": max_seq_length, "truncated_chunks": len(over),
         "truncated_share": round(share, 4), "longest": max(model_token_counts, default=0),
         "first_truncated": over[:50]},
    )
