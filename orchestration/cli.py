"""``chunkyard``: ingest a folder through Dagster, and look at what is stored.

Verbs (``chunkyard VERB --help`` for each): ``run`` ingests, ``status`` shows what
is stored per folder and strategy and which documents failed (it runs nothing),
``show`` writes the chunk viewer page of a document, ``sql`` runs read-only SQL
against the database, ``strategies`` lists every strategy's config fields.
``python -m orchestration.cli VERB`` is the same command.

``run`` goes through the persistent Dagster instance (``$DAGSTER_HOME``, default
``.dagster/``), so ``make ui`` shows the same history. Documents are processed
in partition-range runs of up to ``--batch`` documents (a run costs seconds of
overhead; one run per document would dominate). A document that fails inside a
batch is then re-run alone, so Dagster records the failure on its own partition.
Only what is new, changed, missing or stale is run; ``--force`` runs everything
(and, thanks to the embedding cache, still embeds nothing that is unchanged).
The terminal gets progress and one line per failed document; full traces stay
in the run's event log.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import quote

from orchestration.run_report import (
    EXIT_INTERRUPTED, EXIT_NOT_STARTED, EXIT_RUN_FAILED, FAILED, PASSED, WARN, DocumentFailure, RunTally, exit_code,
    run_events,
)
from orchestration.status import MAX_CELL  # light: dataclasses and run_report only

REPO_ROOT = Path(__file__).resolve().parents[1]
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
BATCH_TAG = "chunkyard/cli_batch"  # finds the run being executed, for progress
# The event log keeps everything (traces included, shown by `make ui`); the terminal
# gets progress and one line per failed document from this CLI instead.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
UI_BASE = "http://127.0.0.1:3000"  # where `make ui` serves (the Makefile's PORT)


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped a run: no other run is started (exit code 130, the message says
    what is left). Dagster reports the signal as a failed run, not as an exception."""


class InterruptWatch:
    """Whether SIGINT or SIGTERM arrived since the watch began, even where Dagster swallowed it.

    While a run executes, Dagster's handler replaces ours: in a step the signal becomes a failed
    run (``RunTally.interrupted`` sees that), but one that lands after the last step and before
    ``execute_job`` returns only sets a flag Dagster then clears. The interpreter still writes
    every handled signal's number to the wakeup fd, whichever handler runs: that is read here.
    """

    def __enter__(self) -> "InterruptWatch":
        import socket

        self._seen = False
        self._reader = None
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach the main thread only (and only it may set the wakeup fd)
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)
        self._previous = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        return self

    def seen(self) -> bool:
        if self._reader is None:
            return False
        try:
            while data := self._reader.recv(512):
                self._seen |= bool({signal.SIGINT, signal.SIGTERM} & set(data))
        except BlockingIOError:
            pass
        return self._seen

    def __exit__(self, *exc) -> None:
        if self._reader is None:
            return
        signal.set_wakeup_fd(self._previous)
        self._reader.close()
        self._writer.close()


def ensure_dagster_home() -> Path:
    """Use $DAGSTER_HOME, default ``.dagster/`` with a copy of the project's ``dagster-instance.yaml``."""
    home = Path(os.environ.get("DAGSTER_HOME") or REPO_ROOT / ".dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        shutil.copyfile(REPO_ROOT / "dagster-instance.yaml", config)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def quiet_libraries() -> None:
    """No library progress bars or info chatter between our own lines."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    # The strategies' own notes (e.g. P falling back to R for a block with no anchor line)
    # are about how a document was chunked, not failures: they would interleave with the
    # progress lines. Failures reach the terminal through the run's events instead.
    import logging

    logging.getLogger("chunking").setLevel(logging.ERROR)


def run_batch_size(batch: int | None) -> int:
    """Documents per run: ``--batch``, else the backfill range size every document asset is
    defined with (``CHUNKYARD_DOCUMENTS_PER_RUN``, else 25), so `run` and a UI backfill agree."""
    if batch is not None:
        return batch
    from assets.partitions import DOCUMENTS_PER_RUN_ENV, documents_per_run

    return documents_per_run(os.environ.get(DOCUMENTS_PER_RUN_ENV))


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return number


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


def lineage_url(base: str, group_names: Iterable[str]) -> str:
    """The UI's global asset lineage with every asset group open.

    Dagster 1.13's UI opens every group collapsed and keeps which are open per browser
    (localStorage), with no server-side default; its lineage page reads the open groups
    from the ``expanded`` query parameter first (ui-core AssetGraphExplorer.tsx,
    ``useQueryAndLocalStoragePersistedState``), as ``global@global:<group>`` ids
    (asset-graph/Utils.tsx ``groupIdForNode``, with the per-code-location flag off, its
    default). So a link carrying them opens expanded in any browser, a fresh one too.
    """
    expanded = ",".join(f"global@global:{name}" for name in sorted(set(group_names)))
    return f"{base.rstrip('/')}/asset-groups?expanded={quote(expanded, safe='@:,')}"


def asset_group_names(defs) -> list[str]:
    """Every asset group of the definitions, sorted."""
    return sorted({group for a in defs.assets for group in getattr(a, "group_names_by_key", {}).values()})


# --- run ---------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    if args.docs:
        os.environ["CHUNKYARD_DOCS"] = args.docs
    quiet_libraries()
    from orchestration.runlock import run_lock

    # One ingest per instance, taken before the instance is first opened (two first-time
    # runs would both create it), and held until every batch is done.
    with run_lock(ensure_dagster_home()), InterruptWatch() as watch:
        return ingest(args, watch)


def ingest(args: argparse.Namespace, watch: InterruptWatch) -> int:
    # Imported after the environment is set: the definitions read it at import.
    from dagster import DagsterInstance, execute_job, reconstructable

    from assets.costs import INGEST_TAG
    from assets.partitions import DOCUMENTS_PARTITIONS_NAME
    from orchestration import definitions
    from resources.ownership import claim_instance_and_outputs, ownership_conflict, side_output_dirs
    from orchestration.progress import EventLogWatcher, ProgressPrinter, RunProgress
    from orchestration.reconcile import diff_folder
    from orchestration.runlock import CLI_PROCESS_TAG, cli_process, documents_in_flight, fail_abandoned_runs
    from orchestration.schedules import chunk_refresh, plan_from_refresh, recorded_failures
    from orchestration.settings import DEFAULT_CONFIG_FILE
    from resources.documents import current_fingerprint
    from resources.store import SourceRootConflict

    started = time.monotonic()
    batch_size = run_batch_size(args.batch)
    resources = definitions.defs.resources
    folder, store_resource = resources["documents"], resources["store"]
    # One database (or lake) per instance and per folder of side outputs (resources.ownership).
    home, outputs = Path(os.environ["DAGSTER_HOME"]), side_output_dirs(store_resource.path, store_resource.sidecar_path())
    lake = store_resource.lake_config()
    if conflict := ownership_conflict(home, store_resource.path, outputs, lake):
        raise SourceRootConflict(conflict)  # before the database is created or opened
    store = store_resource.store()
    store.initialize()
    store.claim_source_root(folder.root_path)  # raises SourceRootConflict before anything is written
    claim_instance_and_outputs(home, store_resource.path, outputs, lake)
    store.forget_strategy_failures(list(definitions.project.config_hashes))
    if args.prune:
        pruned = store.prune_strategies(list(definitions.project.config_hashes))
        if pruned:
            print("chunkyard: removed the rows of strategies no longer configured: "
                  + ", ".join(f"{name} ({n} chunks)" for name, n in sorted(pruned.items())), flush=True)
    instance = DagsterInstance.get()

    sources = folder.scan()
    # A file gone since the listing is not in the folder; one that cannot be read fails alone.
    current = {doc_id: sha for doc_id, sha in
               ((doc_id, current_fingerprint(source)) for doc_id, source in sources.items()) if sha is not None}
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

    if args.force:
        selected = set(current)
    else:
        graph_order = definitions.project.graph_order
        materialized = {key: set(instance.get_materialized_partitions(key)) for key in graph_order}
        limits = folder.document_limits()
        chunks = chunk_refresh(store, definitions.project.config_hashes, limits, definitions.project.embed_versions)
        # A document whose recorded failure is for these very bytes (and, a strategy's, this
        # configuration) would only fail again: an unchanged folder is a no-op (exit 0); a raised
        # limit or --force retries it.
        selected = set(changes.to_process) | set(
            plan_from_refresh(ordered, materialized, graph_order, chunks, recorded_failures(store, current, limits)))

    # A run an earlier `chunkyard run` of this host left queued or running died with it
    # (killed, crashed): marked failed, so its documents are not left to it for ever.
    abandoned = fail_abandoned_runs(instance)
    if abandoned:
        print(f"chunkyard: {len(abandoned)} run(s) of an earlier chunkyard run that ended without finishing "
              f"them marked failed: {', '.join(r[:8] for r in abandoned[:10])}"
              + (" ..." if len(abandoned) > 10 else ""), flush=True)
    # Runs the UI's sensors started before this run took the lock own their documents.
    owned = {doc: run_id for doc, run_id in documents_in_flight(instance, ordered).items() if doc in selected}
    if owned:
        selected -= set(owned)
        print(f"chunkyard: {len(owned)} document(s) left to run(s) already queued or in progress: "
              + ", ".join(f"{doc} ({run_id[:8]})" for doc, run_id in sorted(owned.items())[:10])
              + (" ..." if len(owned) > 10 else ""), flush=True)

    if not os.environ.get("CHUNKYARD_CONFIG") and not Path(DEFAULT_CONFIG_FILE).is_file():
        # Run from another directory: said, as the defaults chunk and embed differently.
        print(f"chunkyard: no {DEFAULT_CONFIG_FILE} in {Path.cwd()} and no CHUNKYARD_CONFIG: the library defaults",
              flush=True)
    job = reconstructable(definitions.ingest_job)
    ingest_id = uuid.uuid4().hex  # tags every run of this command: its stage costs read back as one ingest
    tally = RunTally()
    batches = contiguous_batches(ordered, selected, batch_size)
    print(f"chunkyard: {len(current)} documents in {folder.root_path}: {len(changes.new)} new, "
          f"{len(changes.changed)} changed, {len(changes.deleted)} deleted; "
          f"{len(selected)} to process in {len(batches)} run(s)", flush=True)

    tty = sys.stdout.isatty() if args.progress == "auto" else args.progress == "bar"
    progress = RunProgress(len(selected), len(definitions.project.graph_order), time.monotonic())
    printer = ProgressPrinter(progress, sys.stdout, tty=tty)

    def execute(tags: dict[str, str], index: int, documents: int, retrying: str | None = None):
        token = uuid.uuid4().hex
        progress.start_run(index, len(batches), documents, retrying)
        watcher = nullcontext() if args.progress == "none" else EventLogWatcher(instance, (BATCH_TAG, token), printer)
        with watcher:
            result = execute_job(job, instance=instance, tags={**tags, BATCH_TAG: token, INGEST_TAG: ingest_id,
                                                               CLI_PROCESS_TAG: cli_process()},
                                 run_config=QUIET, raise_on_error=False)
        tally.add_run(result, run_events(instance, result.run_id))
        stop_if_interrupted(result.run_id)
        return result

    def stop_if_interrupted(run_id: str) -> None:
        if tally.interrupted or watch.seen():
            raise RunInterrupted(
                f"run {run_id[:8]} was stopped by SIGINT or SIGTERM; no other run was started. Steps that had "
                f"finished are stored; a step that was stopped stored nothing (a step writes its documents in "
                f"one transaction). The next `chunkyard run` processes what is left.")

    for index, batch in enumerate(batches, start=1):
        result = execute({RANGE_START: batch[0], RANGE_END: batch[-1]}, index, len(batch))
        progress.end_run()
        errored = [d for d in batch if (store.document(d) or {}).get("status") == "error"]
        if batch_failed(result.success, batch, set(errored) | set(tally.failures)):
            tally.failed_batches += 1
        print(f"  run {result.run_id[:8]}: {len(batch)} document(s) {batch[0]} .. {batch[-1]}: "
              f"{'ok' if result.success else 'FAILED'}", flush=True)
        for doc_id in (errored if len(batch) > 1 else []):
            # Re-run alone so the failure lands on this document's own partition.
            single = execute({"dagster/partition": doc_id}, index, 1, retrying=doc_id)
            progress.end_run()
            print(f"  run {single.run_id[:8]}: {doc_id} alone: {'ok' if single.success else 'failed'}", flush=True)

    if batches or changes.deleted:
        # The store changed: strategy_stats describes the store, so refresh it now, under this
        # run's lock, rather than leave the UI showing the previous state until the automation
        # sensor runs (when `make ui` is not running, it never does).
        stats_run = refresh_strategy_stats(instance, {INGEST_TAG: ingest_id, CLI_PROCESS_TAG: cli_process()}, tally)
        stop_if_interrupted(stats_run)

    failed_here = documents_failed_in_run(store, selected, tally)
    print_summary(store, tally, failed_here, time.monotonic() - started)
    print_costs(store, ingest_id)
    print(f"in the UI (make ui), the lineage with every group open: "
          f"{lineage_url(UI_BASE, asset_group_names(definitions.defs))}")
    return exit_code(tally, len({f.document for f in failed_here}))


STATS_ASSET = "strategy_stats"


def refresh_strategy_stats(instance, tags: dict[str, str], tally: RunTally) -> str:
    """Materialize ``strategy_stats`` in one run of its own, on the configured executor
    (its failure is a run error, exit code 2); returns the run's id."""
    from dagster import execute_job, reconstructable

    from orchestration import definitions

    result = execute_job(reconstructable(definitions.stats_job), instance=instance, tags=tags,
                         run_config=QUIET, raise_on_error=False)
    tally.add_run(result, run_events(instance, result.run_id))
    if not result.success:
        tally.failed_batches += 1  # not a document's failure: exit code 2
    print(f"  run {result.run_id[:8]}: {STATS_ASSET}: {'ok' if result.success else 'FAILED'}", flush=True)
    return result.run_id


def print_costs(store, ingest_id: str) -> None:
    """This run's seconds per document per stage (from stage_costs; `chunkyard status --costs` compares runs)."""
    from orchestration.status import format_costs, ingest_costs

    with store.connect(read_only=True) as con:
        summaries = ingest_costs(con, ingest_id)
    if summaries:
        print("cost per stage (seconds; store = writing the store, model = the embedding model's share):")
        print("\n".join("  " + line for line in format_costs(summaries).splitlines()))


def batch_failed(success: bool, batch: list[str], failed_documents: set[str]) -> bool:
    """A run failed for a reason other than one bad document (exit code 2).

    A bad document fails its own one-partition run by design (so Dagster records
    the failure on its partition): that is the document's failure (exit code 1).
    A multi-document batch never fails for one bad document, so its failure is a bug
    or a blocking check.
    """
    return not success and not (len(batch) == 1 and batch[0] in failed_documents)


def documents_failed_in_run(store, processed: set[str], tally: RunTally) -> list[DocumentFailure]:
    """Every failure of a document of this run, documents in order of name: from their checks and
    step failures, or stored as an error."""
    for doc_id in sorted(processed - set(tally.failures)):
        row = store.document(doc_id) or {}
        if row.get("status") == "error":
            tally.note_failure(doc_id, "parse", row.get("error") or "")
    return tally.all_failures()


def print_summary(store, tally: RunTally, failed_here: list[DocumentFailure], elapsed: float) -> None:
    summary = store.summary()
    docs = summary["documents"]
    print("\n== chunkyard summary ==")
    print(f"documents: {sum(docs.values())} ({', '.join(f'{n} {s}' for s, n in sorted(docs.items())) or 'none'})")
    print("chunks per strategy:")
    for strategy, n in sorted(summary["chunks"].items()):
        print(f"  {strategy:<18} {n:>7} chunks  {summary['embeddings'].get(strategy, 0):>7} embeddings")
    print(f"runs: {tally.runs} ({tally.failed_runs} failed)")
    print(f"new embeddings: {tally.new_embeddings} (cache hits: {tally.cache_hits}; "
          f"vectors from chunking: {tally.vectors_from_chunking}; cache size: {summary['embedding_cache']})")
    counts = tally.check_counts()
    if counts:
        print("checks (per document; warn = a WARN check that did not pass, failed = an ERROR check):")
        width = max(map(len, counts))
        for name in sorted(counts):
            c = counts[name]
            print(f"  {name:<{width}} {c[PASSED]:>5} passed {c[WARN]:>5} warn {c[FAILED]:>5} failed")
    failed_documents = {f.document for f in failed_here}
    if failed_here:
        print(f"documents that failed in this run ({len(failed_documents)}; "
              f"one line per failed stage):")
        for failure in failed_here:
            print(f"  {failure.line()}")
    earlier = sorted({doc_id for doc_id, _ in summary["errors"] if doc_id not in failed_documents})
    if earlier:
        print(f"documents that failed before and did not change: {len(earlier)}, not retried "
              f"(chunkyard status lists them; run --force retries)")
    for line in tally.run_errors:
        print(f"run error: {line}")
    print(f"elapsed: {elapsed:.1f} s")
    print(store.location())


# --- status, show, sql, strategies -------------------------------------------------


def open_store(db: str | None):
    """The store named by ``--db``, else the settings (``chunkyard.toml``, ``CHUNKYARD_DB``); must exist."""
    from orchestration.settings import load_settings
    from resources.store import ChunkStore

    settings = load_settings()
    path = Path(db or settings.db_path)
    # --db names a DuckDB file; without it, the settings' store (the file, or the [store] lake).
    store = ChunkStore(path, lake=None if db else settings.store.lake())
    if not store.exists():
        where = store.lake.describe() if store.lake is not None else f"database at {path.resolve()}"
        raise CliError(f"no {where} yet: run `chunkyard run --docs FOLDER` first (or pass --db)")
    return store


def cmd_status(args: argparse.Namespace) -> int:
    from orchestration.settings import load_settings
    from orchestration.status import cost_comparison, document_rows, format_documents, format_status, stored_status

    store = open_store(args.db)
    with store.connect(read_only=True) as con:
        if args.costs:
            print(cost_comparison(con, previous=max(1, args.runs)))
            return 0
        if args.documents:
            print(format_documents(document_rows(con), store.location()))
            return 0
        folders = stored_status(con)
    configured = None if args.db else load_settings().configured_names()  # --db: another database's
    print(format_status(folders, store.location(), configured))
    return 0


def resolve_document(store, name: str) -> str:
    """A stored doc_id from ``name``: the id itself, or a unique stored source path / file name."""
    with store.connect(read_only=True) as con:
        rows = con.execute("SELECT doc_id, coalesce(source_path, doc_id) FROM documents ORDER BY doc_id").fetchall()
    ids = {doc_id for doc_id, _ in rows}
    if name in ids:
        return name
    wanted = Path(name).name
    matches = sorted({doc_id for doc_id, path in rows if path == name or Path(path).name == wanted
                      or name.endswith("/" + path)})
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise CliError(f"{name!r} matches several documents: {', '.join(matches)}; give the document id")
    known = ", ".join(sorted(ids)[:10]) + (" ..." if len(ids) > 10 else "")
    raise CliError(f"no stored document {name!r}; stored: {known or 'none'} (chunkyard status --documents lists them)")


def cmd_show(args: argparse.Namespace) -> int:
    from orchestration.viewer import write_viewer

    store = open_store(args.db)
    doc_id = resolve_document(store, args.document)
    strategies = [s.strip() for s in args.strategy.split(",") if s.strip()] if args.strategy else None
    try:
        path = write_viewer(store, doc_id, strategies, args.output)
    except LookupError as exc:
        raise CliError(str(exc)) from None
    print(f"{doc_id}: viewer written to {path.resolve()}")
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    import duckdb

    from orchestration.status import run_sql

    query = sys.stdin.read() if args.query in (None, "-") else args.query
    store = open_store(args.db)
    with store.query_connection() as con:
        try:
            print(run_sql(con, query, args.max_rows, None if args.full else MAX_CELL))
        except duckdb.Error as exc:
            raise CliError(f"sql: {exc}") from None
    return 0


def strategy_fields() -> list[tuple[str, str, str, str, str]]:
    """(strategy, field, type, default, description) for every registered strategy's config."""
    from chunking.strategies import COMMON_NAMES, all_strategies

    rows = []
    for spec in all_strategies():
        for name, info in spec.config_model.model_fields.items():
            annotation = info.annotation
            kind = annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")
            default = spec.default_config().__dict__.get(name, info.default)
            rows.append((spec.name, name, kind, repr(default), info.description or ""))
        for common, rule in COMMON_NAMES.get(spec.name, {}).items():
            rows.append((spec.name, common, "int", "-", f"common name for {rule['field']}"
                         + "".join(f" (sets {k}={v!r})" for k, v in rule.get("also", {}).items())))
    return rows


def strategies_markdown(rows: list[tuple[str, str, str, str, str]]) -> str:
    """The README's table of strategy config fields (between its ``strategies-table`` markers)."""
    from orchestration.status import cell

    lines = ["| strategy | field | type | default | meaning |", "|---|---|---|---|---|"]
    for strategy, name, kind, default, meaning in rows:
        values = [strategy, f"`{name}`", kind, f"`{cell(default)}`", meaning]
        lines.append("| " + " | ".join(v.replace("|", "\\|") for v in values) + " |")
    return "\n".join(lines)


def cmd_strategies(args: argparse.Namespace) -> int:
    from orchestration.status import format_table

    rows = strategy_fields()
    if args.markdown:
        print(strategies_markdown(rows))
    else:
        print(format_table(["strategy", "field", "type", "default", "meaning"], rows, max_cell=None))
    return 0


# --- the command line ----------------------------------------------------------------

EXIT_CODES = """exit codes: 0 = every document processed in this run is fine (an unchanged folder
is a no-op and exits 0); 1 = at least one document failed in this run (read,
parse or an ERROR check; one line each above the summary); 2 = a run failed for
another reason (a bug, a blocking check stopping a batch) or the command failed;
3 = nothing was started: another chunkyard run holds this Dagster instance, the
database belongs to another documents folder, or the instance or the database's folder
is another database's (the message says which); 130 = stopped
by SIGINT (Ctrl-C) or SIGTERM: no further run is started, and what a stopped step had
not finished is not stored."""


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--docs", help="documents folder (default: settings docs_root, examples/docs)")
    p.add_argument("--force", action="store_true", help="re-run every document, not only what changed")
    p.add_argument("--prune", action="store_true",
                   help="remove the stored chunks and vectors of strategies the configuration no longer has")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="documents per run (default: CHUNKYARD_DOCUMENTS_PER_RUN, else 25: the backfill range size)")
    p.add_argument("--progress", choices=["auto", "bar", "plain", "none"], default="auto",
                   help="bars redrawn in place (bar), a line per finished step (plain), or none; "
                        "auto = bar on a terminal, plain otherwise")


def add_db_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="DuckDB file (default: settings db_path, data/chunkyard.duckdb, or $CHUNKYARD_DB)")


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    view = p.add_mutually_exclusive_group()
    view.add_argument("--costs", action="store_true",
                      help="seconds per document per stage of the latest run, against the runs before it")
    p.add_argument("--runs", type=int, default=5, help="with --costs: how many earlier runs to compare with (default 5)")
    view.add_argument("--documents", action="store_true",
                      help="one line per stored document: its id, status, current chunks, chunks not current")
    add_db_argument(p)


def add_show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("document", help="document id (as `chunkyard status` lists it), its path or its file name")
    p.add_argument("--strategy", help="comma-separated strategies to show side by side (default: every stored one)")
    p.add_argument("-o", "--output", help="HTML file to write (default: <db dir>/viewer/<document>.html)")
    add_db_argument(p)


def add_sql_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", nargs="?", help="SQL to run read-only; '-' or nothing reads it from stdin")
    p.add_argument("--max-rows", type=int, default=100, help="rows printed at most (default 100)")
    p.add_argument("--full", action="store_true", help=f"print every cell whole (default: cut at {MAX_CELL} characters)")
    add_db_argument(p)


def add_strategies_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--markdown", action="store_true", help="print a Markdown table (the README's)")


@dataclass(frozen=True)
class Verb:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    epilog: str | None = None


# One entry per verb: adding a subcommand is adding a line here (or calling add_verb).
VERBS: dict[str, Verb] = {
    "run": Verb("ingest a folder of documents through Dagster", add_run_arguments, cmd_run, EXIT_CODES),
    "status": Verb("what is stored per folder and strategy, and failed documents (runs nothing)",
                   add_status_arguments, cmd_status),
    "show": Verb("write a document's chunk viewer (HTML, strategies side by side)", add_show_arguments, cmd_show),
    "sql": Verb("run SQL against the database, read-only, and print a table", add_sql_arguments, cmd_sql),
    "strategies": Verb("list every strategy's config fields", add_strategies_arguments, cmd_strategies),
}


def add_verb(name: str, verb: Verb) -> None:
    VERBS[name] = verb


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkyard", description="chunkyard: ingest a folder of documents through Dagster into chunks and "
        "embeddings in DuckDB, and look at what is stored. `chunkyard VERB --help` for each verb.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB")
    for name, verb in VERBS.items():
        p = sub.add_parser(name, help=verb.help, description=verb.help, epilog=verb.epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        verb.add_arguments(p)
        p.set_defaults(handler=verb.handler)
    from orchestration import cli_search  # search, ground, eval

    cli_search.add_commands(sub)
    for name in cli_search.COMMANDS:
        sub.choices[name].set_defaults(handler=cli_search.dispatch)
    return parser


def main(argv: list[str] | None = None) -> int:
    from orchestration.errors import SettingsError
    from orchestration.runlock import RunLockHeld
    from resources.store import SourceRootConflict, StoreLockedError, redact_passwords

    args = build_parser().parse_args(argv)
    quiet_libraries()  # every verb: search/ground/eval load the model too
    if threading.current_thread() is threading.main_thread():
        # SIGTERM as Ctrl-C from the start (exit 130 with a message), not only once Dagster has
        # mapped it so on leaving its first run: before that it ended the process silently.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return args.handler(args)
    except (CliError, SettingsError) as exc:
        print(f"chunkyard {args.command}: {exc}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except (RunLockHeld, SourceRootConflict, StoreLockedError) as exc:
        # Another run owns the instance, or the database belongs to another folder: nothing was done.
        print(f"chunkyard {args.command}: {exc}", file=sys.stderr)
        return EXIT_NOT_STARTED
    except BrokenPipeError:  # `chunkyard sql ... | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt as exc:
        print(f"chunkyard {args.command}: interrupted" + (f": {exc}" if str(exc) else ""), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # an internal error: one line and exit 2, never a silent 0
        # An error may quote the lake's catalog string (a connection failure does): its password is not shown.
        print(f"chunkyard {args.command}: internal error: {type(exc).__name__}: {redact_passwords(str(exc))}",
              file=sys.stderr)
        if os.environ.get("CHUNKYARD_DEBUG"):
            raise
        return EXIT_RUN_FAILED


if __name__ == "__main__":
    sys.exit(main())
