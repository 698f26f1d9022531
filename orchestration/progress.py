"""Progress of a ``chunkyard run``: a bar per run and per step on a terminal, plain lines otherwise.

The model (:class:`RunProgress`) is pure: it is fed what the Dagster event log
says (a step started, a step finished, a document of a step is done) and
answers "documents done / total, rate, ETA". Work is counted in document-steps
(a batch of 25 documents through 14 steps is 350 units), so the overall figure
moves inside a run, and a step that records its documents one by one moves its
own bar too. :class:`EventLogWatcher` polls the persistent instance's event log
of the run being executed (``execute_job`` blocks the main thread) and feeds the
model; :func:`render_tty` / :func:`render_plain` turn it into text.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

BAR_WIDTH = 24


@dataclass
class StepProgress:
    name: str
    documents: int
    done_documents: set[str] = field(default_factory=set)
    finished: bool = False
    outcome: str = ""  # "done", "FAILED" or "skipped" once finished

    @property
    def done(self) -> int:
        """Documents this step has finished (all of them once the step is over)."""
        return self.documents if self.finished else min(len(self.done_documents), self.documents)


@dataclass
class RunProgress:
    """Documents done across every run of one ``chunkyard run``; invariant: done <= total."""

    total_documents: int
    steps_per_run: int
    started: float
    runs_total: int = 0
    run_index: int = 0  # 1-based index of the current run, 0 before the first
    batch_documents: int = 0
    finished_units: int = 0  # document-steps of the runs already over
    steps: dict[str, StepProgress] = field(default_factory=dict)
    current_step: str | None = None
    # The document a failed batch's re-run takes alone: its batch already counted it, so the
    # re-run adds no document to the total and none done.
    retrying: str | None = None

    def start_run(self, index: int, runs_total: int, documents: int, retrying: str | None = None) -> None:
        self.run_index, self.runs_total, self.batch_documents = index, runs_total, documents
        self.retrying = retrying
        self.steps = {}
        self.current_step = None

    @property
    def run_label(self) -> str:
        if self.retrying is not None:
            return f"run {self.run_index}/{self.runs_total} re-run of {self.retrying} alone"
        return f"run {self.run_index}/{self.runs_total}"

    def step_started(self, step: str) -> None:
        self.steps.setdefault(step, StepProgress(step, self.batch_documents))
        self.current_step = step

    def document_done(self, step: str, document: str) -> None:
        self.steps.setdefault(step, StepProgress(step, self.batch_documents)).done_documents.add(document)

    def step_finished(self, step: str, outcome: str = "done") -> None:
        progress = self.steps.setdefault(step, StepProgress(step, self.batch_documents))
        progress.finished, progress.outcome = True, outcome

    def end_run(self) -> None:
        # Steps a failed run skipped count as done: the run is over for its documents.
        if self.retrying is None:
            self.finished_units += self.batch_documents * self.steps_per_run
        self.retrying = None
        self.steps = {}
        self.current_step = None

    @property
    def units_total(self) -> int:
        return self.total_documents * self.steps_per_run

    @property
    def units_done(self) -> int:
        in_run = 0 if self.retrying is not None else sum(s.done for s in self.steps.values())
        return min(self.finished_units + in_run, self.units_total)

    @property
    def documents_done(self) -> float:
        return self.units_done / self.steps_per_run if self.steps_per_run else 0.0

    def rate(self, now: float) -> float | None:
        """Documents per second so far, None before any progress."""
        elapsed = now - self.started
        return self.documents_done / elapsed if elapsed > 0 and self.documents_done > 0 else None

    def eta(self, now: float) -> float | None:
        rate = self.rate(now)
        return (self.total_documents - self.documents_done) / rate if rate else None


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


def format_rate(rate: float | None) -> str:
    """Documents per second, or seconds per document when below one (slow runs stay readable)."""
    if not rate:
        return "- doc/s"
    return f"{rate:.1f} doc/s" if rate >= 1 else f"{1 / rate:.1f} s/doc"


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = int(round(max(0.0, min(1.0, fraction)) * width))
    return "#" * filled + "-" * (width - filled)


def overall_line(progress: RunProgress, now: float) -> str:
    """``documents  12.4/40 [####----] 0.8 doc/s ETA 00:34`` (figures only, no bar, when plain)."""
    total = progress.total_documents or 1
    return (
        f"documents {progress.documents_done:5.1f}/{progress.total_documents} "
        f"[{bar(progress.documents_done / total)}] {format_rate(progress.rate(now))}  "
        f"elapsed {format_seconds(now - progress.started)}  ETA {format_seconds(progress.eta(now))}"
    )


def step_line(progress: RunProgress) -> str:
    step = progress.steps.get(progress.current_step or "")
    if step is None:
        return f"{progress.run_label}: starting"
    done = sum(1 for s in progress.steps.values() if s.finished)
    return (
        f"{progress.run_label} step {done}/{progress.steps_per_run} "
        f"{step.name:<28} [{bar(step.done / (step.documents or 1), 12)}] {step.done}/{step.documents}"
    )


def render_tty(progress: RunProgress, now: float) -> str:
    """Two lines, redrawn in place: the whole ingest, then the current run's step."""
    return f"\r\x1b[2K{overall_line(progress, now)}\n\x1b[2K{step_line(progress)}\x1b[1A\r"


def render_plain(progress: RunProgress, step: StepProgress, now: float) -> str:
    """One line per finished step, for logs and pipes: no bars redrawn, no control characters."""
    return (
        f"  {progress.run_label} {step.name}: {step.outcome} "
        f"({step.documents} document{'s' if step.documents != 1 else ''}); overall {progress.documents_done:.1f}/{progress.total_documents} documents, "
        f"{format_rate(progress.rate(now))}, elapsed {format_seconds(now - progress.started)}, "
        f"ETA {format_seconds(progress.eta(now))}"
    )


class ProgressPrinter:
    """Prints a :class:`RunProgress`: redrawn bars on a TTY, a line per finished step elsewhere."""

    def __init__(self, progress: RunProgress, out: TextIO, tty: bool, clock: Callable[[], float] = time.monotonic):
        self.progress, self.out, self.tty, self.clock = progress, out, tty, clock
        self._lock = threading.Lock()
        self._drawn = False

    def step_finished(self, step: str, outcome: str) -> None:
        with self._lock:
            self.progress.step_finished(step, outcome)
            if not self.tty:
                self.out.write(render_plain(self.progress, self.progress.steps[step], self.clock()) + "\n")
                self.out.flush()

    def redraw(self) -> None:
        if not self.tty:
            return
        with self._lock:
            self.out.write(render_tty(self.progress, self.clock()))
            self.out.flush()
            self._drawn = True

    def clear(self) -> None:
        """Erase the bars so ordinary lines print cleanly (TTY only)."""
        if self.tty and self._drawn:
            with self._lock:
                self.out.write("\r\x1b[2K\n\x1b[2K\x1b[1A\r")
                self.out.flush()
                self._drawn = False


class EventLogWatcher:
    """Follows one run's event log in a thread and feeds a :class:`ProgressPrinter`.

    The run is found by a tag the CLI puts on it (``execute_job`` only returns
    its id at the end). Events are read with a cursor, so each is seen once.
    """

    def __init__(self, instance, tag: tuple[str, str], printer: ProgressPrinter, interval: float = 0.5):
        self.instance, self.tag, self.printer, self.interval = instance, tag, printer, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chunkyard-progress", daemon=True)
        self._cursor: str | None = None
        self._run_id: str | None = None

    def __enter__(self) -> "EventLogWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()  # whatever arrived after the last tick
        self.printer.clear()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # progress is decoration: never let it break a run
                pass
            self.printer.redraw()

    def poll(self) -> None:
        from dagster import DagsterEventType, RunsFilter

        if self._run_id is None:
            records = self.instance.get_run_records(RunsFilter(tags={self.tag[0]: self.tag[1]}), limit=1)
            if not records:
                return
            self._run_id = records[0].dagster_run.run_id
        while True:
            connection = self.instance.get_records_for_run(self._run_id, cursor=self._cursor, limit=500)
            self._cursor = connection.cursor
            for record in connection.records:
                event = record.event_log_entry.dagster_event
                if event is not None:
                    apply_event(self.printer, event, DagsterEventType)
            if not connection.has_more:
                return


def apply_event(printer: ProgressPrinter, event, event_types) -> None:
    """Feed one Dagster event to the printer's progress (unknown kinds are ignored)."""
    kind, step = event.event_type, event.step_key
    if step is None:
        return
    if kind == event_types.STEP_START:
        printer.progress.step_started(step)
    elif kind in (event_types.ASSET_MATERIALIZATION, event_types.ASSET_CHECK_EVALUATION):
        partition = event.partition or getattr(event.event_specific_data, "partition", None)
        if partition:
            printer.progress.document_done(step, partition)
    elif kind == event_types.STEP_SUCCESS:
        printer.step_finished(step, "done")
    elif kind == event_types.STEP_FAILURE:
        printer.step_finished(step, "FAILED")
    elif kind == event_types.STEP_SKIPPED:
        printer.step_finished(step, "skipped")
