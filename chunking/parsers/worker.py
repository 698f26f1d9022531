"""Parse one document in a worker process with a memory and a time limit.

A hostile file can make a parser allocate gigabytes or run for minutes before any
character count could be checked. :func:`parse_in_worker` runs
:func:`chunking.parsers.parse_document` in a child process whose address space
is capped (``RLIMIT_AS`` = ``limits.parse_memory_mb``) and which the parent kills
at ``limits.parse_timeout_s``; the caller's process never holds more than the
finished, budget-checked document.

Invariants a caller relies on:

* The result is exactly what ``parse_document(path, doc_id, limits=limits)``
  returns in-process, or a :class:`DocumentError` (a
  :class:`~chunking.limits.LimitExceeded` naming ``parse_memory_mb`` or
  ``parse_timeout_s`` when the worker ran out of either); nothing else escapes
  for bad input.
* No worker outlives the call: it is joined, or killed then joined.

Workers are forked from a ``forkserver`` process that has imported only the
parsers, so the address-space limit measures the parse, not whatever the caller
has loaded (torch, Dagster), and each start costs a fork, not an interpreter.
As with any forkserver/spawn start, a script that calls this at import time must
guard its top level with ``if __name__ == "__main__":`` (the worker imports it).
"""

from __future__ import annotations

import multiprocessing
import resource
from pathlib import Path
from typing import Callable

from chunking.limits import DocumentLimits, LimitExceeded, limit_key
from chunking.model import ParsedDocument
from chunking.parsers.errors import DocumentError

__all__ = ["parse_in_worker"]

ParseFunction = Callable[..., ParsedDocument]

MIB = 1024 * 1024
# Below the worker's own address space plus this, a cap leaves no room to read even a tiny file:
# the limit is refused as too small (its own message), not blamed on the document.
WORKER_HEADROOM_MB = 16

_PRELOAD = ["chunking.parsers", "chunking.parsers.text", "chunking.parsers.html", "chunking.parsers.docx",
            "chunking.parsers.pdf", "chunking.parsers.json_doc", "chunking.sidecar"]
_context = None


def _worker_context():  # noqa: ANN202 - a multiprocessing context
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)
        _context = context
    return _context


def _parse_child(parse: ParseFunction, path: str, doc_id: str, limits: DocumentLimits, conn) -> None:  # noqa: ANN001
    """Runs in the worker: cap the address space, parse, send back one tagged result on ``conn``."""
    cap = limits.parse_memory_mb * MIB
    used = address_space_bytes()
    if used is not None and cap < used + WORKER_HEADROOM_MB * MIB:
        conn.send(("too_small", used))
        conn.close()
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        message = ("ok", parse(path, doc_id, limits=limits))
    except DocumentError as exc:
        message = ("error", exc)
    except MemoryError:
        message = ("memory", None)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which names the file
        message = ("crash", f"{type(exc).__name__}: {exc}")
    try:
        conn.send(message)
    except MemoryError:
        conn.send(("memory", None))
    finally:
        conn.close()


def parse_in_worker(path: str | Path, doc_id: str, limits: DocumentLimits | None = None, *,
                    parse: ParseFunction | None = None) -> ParsedDocument:
    """``parse(path, doc_id, limits=limits)`` in a memory- and time-limited worker.

    ``parse`` defaults to :func:`chunking.parsers.parse_document`; another must be a
    module-level function (the worker imports it by name)."""
    from chunking.parsers import parse_document

    parse = parse or parse_document
    limits = limits or DocumentLimits()
    source = Path(path).name
    context = _worker_context()
    receiver, sender = context.Pipe(duplex=False)
    worker = context.Process(target=_parse_child, args=(parse, str(path), doc_id, limits, sender), daemon=True)
    worker.start()
    sender.close()  # the child holds the only writer: its exit is our EOF
    try:
        if not receiver.poll(limits.parse_timeout_s):
            raise LimitExceeded(source, "parse_timeout_s", "parse time", None, f"{limits.parse_timeout_s} s")
        try:
            kind, payload = receiver.recv()
        except (EOFError, OSError):
            worker.join(5)
            kind, payload = "died", worker.exitcode
    finally:
        if worker.is_alive():
            worker.kill()
        worker.join()
        receiver.close()
    if kind == "ok":
        return payload
    if kind == "error":
        raise payload
    if kind == "too_small":
        # A LimitExceeded, so a run with the limit raised retries the document (limits.refused_under).
        raise LimitExceeded(source, "parse_memory_mb", "the parse worker's own address space, before it reads any file,",
                            f"{-(-payload // MIB)} MiB (+{WORKER_HEADROOM_MB} MiB to parse in)",
                            f"{limits.parse_memory_mb} MiB")
    if kind == "memory":
        raise LimitExceeded(source, "parse_memory_mb", "parse memory use", None, f"{limits.parse_memory_mb} MiB")
    if kind == "died" and payload is not None and payload < 0:
        # A C library that cannot allocate under the cap may abort or crash instead
        # of raising MemoryError: say so, without claiming it was certainly memory.
        raise DocumentError(source, f"the parse worker was killed by signal {-payload}; if it needs more memory than "
                                    f"the limit of {limits.parse_memory_mb} MiB, raise "
                                    f"{limit_key('parse_memory_mb')} in chunkyard.toml")
    raise DocumentError(source, f"the parse worker failed: {payload}")


def address_space_bytes() -> int | None:
    """This process's address space (``VmSize``, what ``RLIMIT_AS`` caps), or None where /proc has none."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None
