"""What a ``chunkyard run`` did, from its Dagster results: check outcomes, failed documents, exit code.

Pure bookkeeping over Dagster events (no printing of traces: those stay in the
run's event log, which ``make ui`` shows). Three check outcomes are kept apart:
``passed``, ``warn`` (a WARN-severity check that did not pass: worth a look, not
a failure) and ``failed`` (an ERROR-severity check that did not pass).

Exit codes of ``chunkyard run`` (:func:`exit_code`):

* 0: every document processed in this run is fine (an unchanged folder is a no-op: 0);
* 1: at least one document failed in this run (read, parse, or an ERROR check);
* 2: a run failed for a reason that is not one bad document (a bug, a blocking
  check stopping a batch, a locked database), or the CLI itself failed;
* 130: SIGINT or SIGTERM stopped a run (:class:`RunTally` ``interrupted``): no other is started.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

EXIT_OK, EXIT_DOCUMENT_FAILED, EXIT_RUN_FAILED, EXIT_NOT_STARTED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C; SIGTERM alike (Dagster maps it to SIGINT)
PASSED, WARN, FAILED = "passed", "warn", "failed"
# What Dagster raises in a step or its executor when the process gets SIGINT or SIGTERM while
# a run executes: the run then ends as failed and ``execute_job`` returns, it does not raise.
INTERRUPTION_ERRORS = frozenset({"DagsterExecutionInterruptedError", "KeyboardInterrupt"})


def stage_of(asset: str) -> str:
    """The pipeline stage an asset is: read, parse, chunk <strategy>, embed <strategy>."""
    if asset == "raw_documents":
        return "read"
    if asset == "parsed_documents":
        return "parse"
    for prefix, stage in (("chunks_", "chunk"), ("embeddings_", "embed")):
        if asset.startswith(prefix):
            return f"{stage} {asset[len(prefix):]}"
    return asset


def bare_cause(document: str, message: str) -> str:
    """``message`` without a leading ``"<file>: "``: a parser's error names its file
    (``DocumentError``: "broken.pdf: PDF is truncated"), and the failure line names
    it once in its own column, so it must not appear twice."""
    message = (message or "").strip() or "no message"
    for name in (document, document.rsplit("/", 1)[-1]):
        if message.startswith(f"{name}: "):
            return message[len(name) + 2 :]
    return message


@dataclass(frozen=True)
class DocumentFailure:
    document: str
    stage: str
    cause: str

    def line(self) -> str:
        return f"{self.document}  [{self.stage}]  {self.cause}"


@dataclass
class RunTally:
    runs: int = 0
    failed_runs: int = 0
    failed_batches: int = 0  # runs that failed other than by one bad document (see exit codes)
    new_embeddings: int = 0
    cache_hits: int = 0
    vectors_from_chunking: int = 0  # cached by a strategy that embeds while chunking (semantic)
    # (asset.check, document) -> passed / warn / failed; a later run's outcome replaces an earlier one.
    checks: dict[tuple[str, str], str] = field(default_factory=dict)
    # document -> its failures seen in this CLI run, one per stage, in the order seen: a document
    # refused by two strategies (or chunked and then refused by a model) shows each cause.
    failures: dict[str, list[DocumentFailure]] = field(default_factory=dict)
    # One line per run-level failure that names no document (the step and the error's first line).
    run_errors: list[str] = field(default_factory=list)
    # A run stopped by SIGINT / SIGTERM: the command must start no other (see INTERRUPTION_ERRORS).
    interrupted: bool = False

    def add_run(self, result, events=None) -> None:
        """Count one run: ``events`` (its events from the instance, :func:`run_events`), else
        ``result.all_events``, which lacks what a step logs with ``context.log_event`` (the
        failed check a one-document run records before its step fails)."""
        from dagster import AssetCheckSeverity, DagsterEventType

        self.runs += 1
        if not result.success:
            self.failed_runs += 1
        # A one-partition run's check results carry no partition: they are that partition's.
        run = getattr(result, "dagster_run", None)
        single_partition = single_partition_of(run.tags) if run is not None else None
        for event in result.all_events if events is None else events:
            kind = event.event_type
            if kind == DagsterEventType.ASSET_MATERIALIZATION:
                # Each partition's event carries that document's own counts (a text embedded
                # once for a batch counts on its first document only), so they add up.
                metadata = event.event_specific_data.materialization.metadata
                for name in ("new_embeddings", "cache_hits", "vectors_from_chunking"):
                    if name in metadata:
                        setattr(self, name, getattr(self, name) + int(metadata[name].value))
            elif kind == DagsterEventType.ASSET_CHECK_EVALUATION:
                evaluation = event.event_specific_data
                document = evaluation.partition or single_partition
                # Range runs also emit an unpartitioned summary; count per-document outcomes only.
                if document is None:
                    continue
                asset = evaluation.asset_key.to_user_string()
                outcome = check_outcome(evaluation.passed, evaluation.severity == AssetCheckSeverity.WARN)
                self.checks[(f"{asset}.{evaluation.check_name}", document)] = outcome
                if outcome == FAILED:
                    self.note_failure(document, stage_of(asset), evaluation.description or "")
            elif kind == DagsterEventType.STEP_FAILURE:
                if is_interruption(event):
                    self.interrupted = True  # not the document's failure nor a bug: the step was stopped
                else:
                    self._note_step_failure(result.run_id, event)
            elif kind == DagsterEventType.RUN_FAILURE and is_interruption(event):
                self.interrupted = True  # between steps: no step failed

    def _note_step_failure(self, run_id: str, event) -> None:
        error = event.event_specific_data.error
        user = event.event_specific_data.user_failure_data  # set by dagster.Failure: our own message
        message = ((user.description if user else None) or (error.message if error else "")).strip()
        document = None
        if user is not None and "document" in user.metadata:
            document = str(user.metadata["document"].value)
        if document:
            self.note_failure(document, stage_of(event.step_key or ""), message.splitlines()[0] if message else "")
        else:
            first_line = message.splitlines()[0] if message else "no message"
            self.run_errors.append(
                f"run {run_id[:8]} step {event.step_key}: {first_line} (full trace: the run's logs in `make ui`)"
            )

    def note_failure(self, document: str, stage: str, message: str) -> None:
        """Record one failure of ``document``; a stage's first (its failed check, then its step's
        failure with the same cause in a one-document run) stands for that stage, and a parse failing
        with its read's very cause (a file refused when read is refused again by the parse) adds no
        line: one cause, said once. Strategies' failures are each their own (their checks' words
        need not name the strategy)."""
        known = self.failures.setdefault(document, [])
        cause = bare_cause(document, message)
        repeats_read = stage == "parse" and any(f.stage == "read" and f.cause == cause for f in known)
        if not repeats_read and all(f.stage != stage for f in known):
            known.append(DocumentFailure(document, stage, cause))

    def all_failures(self) -> list[DocumentFailure]:
        """Every failure, documents in order of name, each document's in the order seen."""
        return [f for document in sorted(self.failures) for f in self.failures[document]]

    def check_counts(self) -> dict[str, Counter]:
        """asset.check -> Counter of outcomes over documents."""
        counts: dict[str, Counter] = {}
        for (name, _), outcome in self.checks.items():
            counts.setdefault(name, Counter())[outcome] += 1
        return counts


def is_interruption(event) -> bool:
    """A step or run failure that is Dagster's report of SIGINT / SIGTERM, not an error of ours."""
    error = getattr(event.event_specific_data, "error", None)
    return error is not None and error.cls_name in INTERRUPTION_ERRORS


def run_events(instance, run_id: str) -> list:
    """The events of a run that :meth:`RunTally.add_run` counts, as the instance stored them."""
    from dagster import DagsterEventType

    kinds = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_CHECK_EVALUATION,
             DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE}
    return [entry.dagster_event for entry in instance.all_logs(run_id, of_type=kinds) if entry.dagster_event]


def single_partition_of(tags) -> str | None:
    """The one partition a run covers (a partition tag, or a range whose ends are equal), else None."""
    if tags.get("dagster/partition"):
        return tags["dagster/partition"]
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    return start if start is not None and start == end else None


def check_outcome(passed: bool, warn_severity: bool) -> str:
    if passed:
        return PASSED
    return WARN if warn_severity else FAILED


def exit_code(tally: RunTally, documents_failed_here: int) -> int:
    """0 / 1 / 2 as documented above; a failed batch outranks a bad document."""
    if tally.failed_batches:
        return EXIT_RUN_FAILED
    if documents_failed_here:
        return EXIT_DOCUMENT_FAILED
    return EXIT_OK
