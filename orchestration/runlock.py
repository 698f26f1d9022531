"""One ingest at a time per Dagster instance: an inter-process lock in ``$DAGSTER_HOME``.

Two ``make run`` started together on a fresh checkout would both create the
instance's SQLite storage (``runs.db`` ends with two ``alembic_version`` rows)
and, on an existing instance, both process the same documents. The CLI takes
this lock *before* the instance is first opened, and holds it for the whole
run; a second CLI fails at once with one line naming the holder's pid. The
documents sensor does not request runs while the lock is held.

The lock is ``fcntl.flock`` on ``$DAGSTER_HOME/chunkyard-run.lock``: the kernel
drops it when the holder exits, however it exits (SIGKILL included), so a stale
lock file never blocks anyone. The file holds the holder's pid, for the message.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCK_FILE_NAME = "chunkyard-run.lock"
# How long run_lock retries before it reports the lock held: far longer than a
# lock_holder probe holds it, far shorter than any run.
PROBE_GRACE_S = 1.0


class RunLockHeld(RuntimeError):
    """Another process is running an ingest on this Dagster instance."""

    def __init__(self, home: Path, pid: int | None) -> None:
        self.home = home
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"another chunkyard run ({holder}) is using the Dagster instance {home}; "
            f"wait for it to finish, then run again (it processes only what is left)"
        )


def lock_path(home: str | Path) -> Path:
    return Path(home) / LOCK_FILE_NAME


@contextmanager
def run_lock(home: str | Path) -> Iterator[None]:
    """Hold the instance's run lock for the ``with`` block, or raise RunLockHeld (within ``PROBE_GRACE_S``).

    ``home`` is created if missing (the lock must exist before the instance does).
    """
    path = lock_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, home)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            # Emptied before release: a pid in the file always means a live holder wrote it.
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_holder(home: str | Path) -> int | None:
    """The pid holding the run lock (0 when the holder's pid is not written yet), or None when free.

    Probes with a shared non-blocking flock released at once. A ``run_lock`` that
    meets the probe retries for ``PROBE_GRACE_S``, so a probe never makes it fail.
    """
    path = lock_path(home)
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _acquire(fd: int, home: str | Path) -> None:
    deadline = time.monotonic() + PROBE_GRACE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RunLockHeld(Path(home), _read_pid(fd)) from None
            time.sleep(0.05)


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


# -- runs that already own documents -----------------------------------------------------
#
# The lock stops the sensor from requesting new runs while the CLI works, but runs
# it requested before the CLI started may still be queued or running. Their
# documents belong to them: the CLI leaves those documents alone (and says so)
# rather than process them a second time beside them.

PARTITION_TAG = "dagster/partition"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def documents_of_run(tags: dict[str, str], ordered: list[str]) -> set[str]:
    """The document partitions a run targets, from its tags: one partition, or a range whose
    ends are inclusive in the partition order ``ordered``; none for an unpartitioned run."""
    if PARTITION_TAG in tags:
        return {tags[PARTITION_TAG]}
    start, end = tags.get(RANGE_START_TAG), tags.get(RANGE_END_TAG)
    if start is None or end is None:
        return set()
    position = {key: i for i, key in enumerate(ordered)}
    if start not in position or end not in position:
        # A range over partitions this folder no longer lists: only its named ends are known.
        return {start, end} & set(ordered)
    return set(ordered[position[start]:position[end] + 1])


def documents_in_flight(instance, ordered: list[str]) -> dict[str, str]:
    """document -> id of a queued or running run of this instance that targets it."""
    owners: dict[str, str] = {}
    for run in _runs_in_flight(instance):
        for doc in documents_of_run(run.tags, ordered):
            owners.setdefault(doc, run.run_id)
    return owners


CLI_PROCESS_TAG = "chunkyard/cli_process"  # "<host>:<pid>" of the `chunkyard run` executing the run


def cli_process() -> str:
    """This process, as :data:`CLI_PROCESS_TAG` names it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def fail_abandoned_runs(instance) -> list[str]:
    """Mark failed the runs a `chunkyard run` of this host executed in its own process that are
    still queued or running although that process is gone (SIGKILL, a crash); their ids.

    `chunkyard run` executes its runs in its own process, so such a run will never finish,
    yet :func:`documents_in_flight` would leave its documents to it for ever. Only runs whose
    :data:`CLI_PROCESS_TAG` names this host and a pid that no longer exists are touched: a
    run of a live process, of another host (each has its own run lock, the run storage may be
    shared), a re-execution (it inherits the tags, but the daemon runs it) or any run without
    the tag (the UI's, the sensors') is left alone. A reused pid only makes a dead run wait.
    """
    host = socket.gethostname()
    abandoned = []
    for run in _runs_in_flight(instance):
        owner = run.tags.get(CLI_PROCESS_TAG, "")
        owner_host, _, pid = owner.rpartition(":")
        if owner_host != host or not pid.isdigit() or "dagster/parent_run_id" in run.tags or _alive(int(pid)):
            continue
        instance.report_run_failed(
            run, f"the chunkyard run that executed this run (process {pid}) ended before it finished; marked "
                 f"failed so that its documents are processed again")
        abandoned.append(run.run_id)
    return abandoned


def _runs_in_flight(instance) -> list:
    """The instance's runs that are queued or running."""
    from dagster import DagsterRunStatus, RunsFilter

    in_flight = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                 DagsterRunStatus.STARTED]
    return instance.get_runs(filters=RunsFilter(statuses=in_flight))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True
