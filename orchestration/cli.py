"""``python -m orchestration.cli run``: ingest a folder through Dagster, in batches.

Every run goes through the persistent Dagster instance (``$DAGSTER_HOME``,
default ``.dagster/``), so ``make ui`` shows the same history. Documents are
processed in partition-range runs of up to ``--batch`` documents (a run costs
seconds of overhead; one run per document would dominate). A document that
fails inside a batch is then re-run alone, so Dagster records the failure on
its own partition with the message that names the file and the cause.

Only what is new, changed, missing or stale is run; ``--force`` runs everything
(and, thanks to the embedding cache, still embeds nothing that is unchanged).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
# The event log keeps everything; the terminal gets warnings and errors only.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def ensure_dagster_home() -> Path:
    """Use $DAGSTER_HOME, default ``.dagster/`` with the project's ``dagster.yaml``."""
    home = Path(os.environ.get("DAGSTER_HOME") or REPO_ROOT / ".dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        shutil.copyfile(REPO_ROOT / "dagster.yaml", config)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def contiguous_batches(ordered_keys: list[str], selected: set[str], batch_size: int) -> list[list[str]]:
    """Split the selected keys into runs of consecutive partitions, at most ``batch_size`` each.

    A partition-range run covers every key between its ends, so a batch may only
    hold keys that are adjacent in the partition order.
    """
    batches: list[list[str]] = []
    current: list[str] = []
    for key in ordered_keys:
        if key in selected and len(current) < batch_size:
            current.append(key)
            continue
        if current:
            batches.append(current)
        current = [key] if key in selected else []
    if current:
        batches.append(current)
    return batches


@dataclass
class RunTally:
    runs: int = 0
    failed_runs: int = 0
    failed_batches: int = 0  # batch runs that failed (a bug or a blocking check), not lone bad documents
    new_embeddings: int = 0
    cache_hits: int = 0
    # (asset.check, document) -> passed; a later run's outcome replaces an earlier one.
    checks: dict[tuple[str, str], bool] = field(default_factory=dict)

    def add_run(self, result) -> None:
        from dagster import DagsterEventType

        self.runs += 1
        if not result.success:
            self.failed_runs += 1
        counted_steps: set[str] = set()
        for event in result.all_events:
            if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                # A range run repeats the step's metadata on every partition's event.
                if event.step_key in counted_steps:
                    continue
                counted_steps.add(event.step_key)
                metadata = event.event_specific_data.materialization.metadata
                for name, attr in (("new_embeddings", "new_embeddings"), ("cache_hits", "cache_hits")):
                    if name in metadata:
                        setattr(self, attr, getattr(self, attr) + int(metadata[name].value))
            elif event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                evaluation = event.event_specific_data
                # Range runs also emit an unpartitioned summary; count per-document outcomes only.
                if evaluation.partition is None:
                    continue
                name = f"{evaluation.asset_key.to_user_string()}.{evaluation.check_name}"
                self.checks[(name, evaluation.partition)] = evaluation.passed


def run(docs: str | None, force: bool, batch_size: int) -> int:
    if docs:
        os.environ["CHUNKYARD_DOCS"] = docs
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    ensure_dagster_home()
    # Imported after the environment is set: the definitions read it at import.
    from dagster import DagsterInstance, execute_job, reconstructable

    from assets.partitions import DOCUMENTS_PARTITIONS_NAME
    from orchestration import definitions
    from orchestration.reconcile import diff_folder
    from orchestration.schedules import plan_refresh, stale_chunk_docs
    from resources.documents import sha256_file

    started = time.monotonic()
    resources = definitions.defs.resources
    folder, store_resource = resources["documents"], resources["store"]
    store = store_resource.store()
    store.initialize()
    instance = DagsterInstance.get()

    sources = folder.scan()
    current = {doc_id: sha256_file(source.path) for doc_id, source in sources.items()}
    changes = diff_folder(current, store.document_hashes(folder.root_path))

    existing = set(instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME))
    for doc_id in changes.deleted:
        store.delete_document(doc_id)
        if doc_id in existing:
            instance.delete_dynamic_partition(DOCUMENTS_PARTITIONS_NAME, doc_id)
    to_add = [d for d in sorted(current) if d not in existing]
    if to_add:
        instance.add_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME, to_add)
    ordered = [k for k in instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS_NAME) if k in current]

    if force:
        selected = set(current)
    else:
        graph_order = definitions.project.graph_order
        materialized = {key: set(instance.get_materialized_partitions(key)) for key in graph_order}
        stale = stale_chunk_docs(store, definitions.project.config_hashes)
        selected = set(changes.to_process) | set(plan_refresh(ordered, materialized, graph_order, stale))

    job = reconstructable(definitions.ingest_job)
    tally = RunTally()
    batches = contiguous_batches(ordered, selected, batch_size)
    print(f"chunkyard: {len(current)} documents in {folder.root_path}: {len(changes.new)} new, "
          f"{len(changes.changed)} changed, {len(changes.deleted)} deleted; "
          f"{len(selected)} to process in {len(batches)} run(s)", flush=True)
    for batch in batches:
        tags = {RANGE_START: batch[0], RANGE_END: batch[-1]}
        result = execute_job(job, instance=instance, tags=tags, run_config=QUIET, raise_on_error=False)
        tally.add_run(result)
        if not result.success:
            tally.failed_batches += 1
        print(f"  run {result.run_id[:8]}: {len(batch)} document(s) {batch[0]} .. {batch[-1]}: "
              f"{'ok' if result.success else 'FAILED'}", flush=True)
        failed_alone = [d for d in batch if len(batch) > 1 and (store.document(d) or {}).get("status") == "error"]
        for doc_id in failed_alone:
            # Re-run alone so the failure lands on this document's own partition.
            single = execute_job(
                job, instance=instance, tags={"dagster/partition": doc_id}, run_config=QUIET, raise_on_error=False
            )
            tally.add_run(single)
            print(f"  run {single.run_id[:8]}: {doc_id} alone: {'ok' if single.success else 'failed'}", flush=True)

    print_summary(store, tally, time.monotonic() - started, store_resource.path)
    # Bad documents are expected and reported; a failed batch is not.
    return 1 if tally.failed_batches else 0


def print_summary(store, tally: RunTally, elapsed: float, db_path: str) -> None:
    summary = store.summary()
    docs = summary["documents"]
    print("\n== chunkyard summary ==")
    print(f"documents: {sum(docs.values())} ({', '.join(f'{n} {s}' for s, n in sorted(docs.items())) or 'none'})")
    print("chunks per strategy:")
    for strategy, n in sorted(summary["chunks"].items()):
        print(f"  {strategy:<18} {n:>7} chunks  {summary['embeddings'].get(strategy, 0):>7} embeddings")
    print(f"runs: {tally.runs} ({tally.failed_runs} failed)")
    print(f"new embeddings: {tally.new_embeddings} (cache hits: {tally.cache_hits}; "
          f"cache size: {summary['embedding_cache']})")
    if tally.checks:
        print("checks (per document):")
        outcomes = Counter((name, passed) for (name, _), passed in tally.checks.items())
        for name in sorted({name for name, _ in tally.checks}):
            print(f"  {name:<55} {outcomes[(name, True)]:>5} passed {outcomes[(name, False)]:>5} failed")
    if summary["errors"]:
        print("documents that failed:")
        for doc_id, error in summary["errors"]:
            print(f"  {doc_id}: {error}")
    print(f"elapsed: {elapsed:.1f} s")
    print(f"database: {Path(db_path).resolve()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chunkyard", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="ingest a folder of documents through Dagster")
    run_p.add_argument("--docs", help="documents folder (default: settings docs_root, examples/docs)")
    run_p.add_argument("--force", action="store_true", help="re-run every document, not only what changed")
    run_p.add_argument("--batch", type=int, default=25, help="documents per run (default 25)")
    from orchestration import cli_search  # search, ground, eval

    cli_search.add_commands(sub)
    args = parser.parse_args(argv)
    if args.command in cli_search.COMMANDS:
        return cli_search.dispatch(args)
    if args.command == "run":
        return run(args.docs, args.force, max(1, args.batch))
    return 2


if __name__ == "__main__":
    sys.exit(main())
