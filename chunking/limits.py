"""Per-document budget: the most one document may cost before it is refused.

Every limit has a safe default and a key in the ``[limits]`` table of
``chunkyard.toml``; a refusal is a :class:`LimitExceeded` (a
:class:`~chunking.parsers.DocumentError`) whose message names the limit, the
measured value and the key that raises it, so the document fails alone and the
user knows what to change. Pure Python: the library, the worker process and the
Dagster assets share these checks.

Invariants a caller relies on:

* ``DocumentLimits()`` are the defaults documented in the README ("Limits and
  safety"); ``DocumentLimits.model_validate(toml["limits"])`` rejects unknown keys.
* :func:`check_parsed_budget` passes exactly when the document's characters,
  blocks and pages are within the limits; :func:`check_chunk_count` when the chunk count is.
* A refusal's message (as stored with the document) says which limit refused it and
  its value then: :func:`refused_under` reads that back, so a recorded refusal can be
  retried once the user has raised that limit (:func:`would_refuse_again`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from chunking.errors import DocumentError

__all__ = ["CONFIG_TABLE", "DocumentLimits", "LimitExceeded", "TimeBudget", "check_chunk_count", "check_page_count",
           "check_parsed_budget", "check_time_budget", "current_time_budget", "time_budget",
           "limit_key", "refused_under", "would_refuse_again"]

MIB = 1024 * 1024
CONFIG_TABLE = "limits"
# Upper bounds, so a value no clock, rlimit or 64-bit config can hold is refused when the settings
# are read (naming the key) instead of failing every document later with an overflow.
MAX_SECONDS = 7 * 24 * 3600  # a week per document
MAX_MEMORY_MB = 1024 * 1024  # 1 TiB of address space
MAX_COUNT = 2**53 - 1  # sizes and counts: every integer a JSON number holds exactly


def limit_key(name: str) -> str:
    """Where a limit is set: ``limits.<name>`` in chunkyard.toml."""
    return f"{CONFIG_TABLE}.{name}"


class DocumentLimits(BaseModel):
    """The budget of one document. Defaults fit a 2-core laptop with a few GB of RAM."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_bytes: int = Field(50 * MIB, ge=1, le=MAX_COUNT, description="File size (document or sidecar), checked before reading.")
    max_chars: int = Field(5_000_000, ge=1, le=MAX_COUNT, description="Characters of extracted text.")
    max_blocks: int = Field(100_000, ge=1, le=MAX_COUNT, description="Heading-level blocks of the parse.")
    max_pages: int = Field(
        20_000, ge=1, le=MAX_COUNT, description="Pages of the parse (a PDF's, DOCX page breaks, a sidecar's page numbers); "
                                  "checked before the pages are built.")
    max_chunks: int = Field(20_000, ge=1, le=MAX_COUNT, description="Chunks one strategy may make of one document.")
    max_inflated_bytes: int = Field(
        64 * MIB, ge=1, le=MAX_COUNT, description="Bytes one zip entry (a DOCX part) may inflate to; read as a stream, "
                                    "never inflated past this.")
    max_compression_ratio: int = Field(
        200, ge=1, le=MAX_COUNT, description="A DOCX part over 1 MiB that inflates to more than this many times its compressed "
                               "size is refused before it is parsed (real parts compress 5-20:1; one paragraph "
                               "repeated ~330:1; 60 MiB of empty paragraphs, 682:1, exhaust the parse worker).")
    parse_timeout_s: int = Field(120, ge=1, le=MAX_SECONDS, description="Wall-clock seconds for parsing one document.")
    parse_memory_mb: int = Field(
        1024, ge=128, le=MAX_MEMORY_MB, description="Address space of the parsing worker process (RLIMIT_AS), in MiB; at least 128: "
                                  "the worker and its parsers' libraries need ~110 MiB to parse even a small file.")
    chunk_timeout_s: int = Field(
        300, ge=1, le=MAX_SECONDS, description="Wall-clock seconds one strategy may spend chunking one document (the semantic "
                               "strategy's sentence embeddings included); checked between model batches and "
                               "when the strategy returns.")
    embed_timeout_s: int = Field(
        300, ge=1, le=MAX_SECONDS, description="Wall-clock seconds the embeddings step may spend on one document's chunks of "
                               "one strategy; checked between model batches.")
    trust_unhashed_sidecars: bool = Field(
        False, description="Use a .blocks.jsonl sidecar that declares no document_hash (off: such a sidecar "
                           "is ignored and the document is parsed from its own bytes).")

    def as_config(self) -> dict[str, int]:
        """The limits as integers (a Dagster resource's ``dict[str, int]`` field)."""
        return {name: int(value) for name, value in self.model_dump().items()}


class LimitExceeded(DocumentError):
    """A document over one of its limits. ``limit`` is the field name of :class:`DocumentLimits`;
    the message reads "<what> [<measured>] is over the limit of <allowed> (raise limits.<limit> ...)"."""

    def __init__(self, source: str, limit: str, what: str, measured: object, allowed: object) -> None:
        self.limit, self.what, self.measured, self.allowed = limit, what, measured, allowed
        subject = f"{what} {measured}" if measured not in (None, "") else what
        super().__init__(source, f"{subject} is over the limit of {allowed} "
                                 f"(raise {limit_key(limit)} in chunkyard.toml to allow it)")

    def __reduce__(self):  # noqa: ANN204 - pickling (a parse worker sends it to its parent)
        return (LimitExceeded, (self.source, self.limit, self.what, self.measured, self.allowed))


def check_parsed_budget(doc, limits: DocumentLimits, source: str) -> None:  # noqa: ANN001 - ParsedDocument
    """Raise :class:`LimitExceeded` if the parse has more characters, blocks or pages than allowed."""
    if len(doc.text) > limits.max_chars:
        raise LimitExceeded(source, "max_chars", "extracted text of", f"{len(doc.text)} characters",
                            limits.max_chars)
    if len(doc.blocks) > limits.max_blocks:
        raise LimitExceeded(source, "max_blocks", "block count", len(doc.blocks), limits.max_blocks)
    check_page_count(len(doc.pages), limits.max_pages, source)


def check_page_count(pages: int, max_pages: int | None, source: str) -> None:
    """Raise :class:`LimitExceeded` if a parse would have more than ``max_pages`` pages (``None``: no limit).

    Called before the pages exist where their number is known first (a PDF's page
    count, a DOCX's page breaks, a sidecar's page numbers): a few bytes can claim a
    million pages.
    """
    if max_pages is not None and pages > max_pages:
        raise LimitExceeded(source, "max_pages", "page count", pages, max_pages)


def check_chunk_count(count: int, max_chunks: int, source: str) -> None:
    """Raise :class:`LimitExceeded` if one strategy made more than ``max_chunks`` chunks of one document."""
    if count > max_chunks:
        raise LimitExceeded(source, "max_chunks", "chunk count", count, max_chunks)


@dataclass(frozen=True)
class TimeBudget:
    """Wall-clock seconds one document may spend in one step, from when it started.

    Work that runs in the step's own process (chunking, embedding: the model is
    loaded there once and shared) cannot be killed from outside the way a parse
    worker is, so the long loops check the budget between units of work (model
    batches, slices of 8 batches on sentence-transformers' own path, blocks of
    distances) and stop with :class:`LimitExceeded`; the chunk step checks it
    again when a strategy returns. The overrun is one such unit plus the work
    done before the first check (tokenizing the texts, a pure-Python strategy's
    whole run): seconds, not a bound of its own.
    """

    source: str
    limit: str
    what: str
    seconds: int
    deadline: float  # on ``_clock``

    def check(self) -> None:
        if _clock() > self.deadline:
            raise LimitExceeded(self.source, self.limit, self.what, None, f"{self.seconds} s")


_clock = time.monotonic
_BUDGET: ContextVar[TimeBudget | None] = ContextVar("chunkyard_time_budget", default=None)


@contextmanager
def time_budget(source: str, limit: str, what: str, seconds: int) -> Iterator[TimeBudget]:
    """Within the block, :func:`check_time_budget` raises :class:`LimitExceeded` once ``seconds``
    have passed; ``limit`` names the :class:`DocumentLimits` field that set them."""
    budget = TimeBudget(source, limit, what, seconds, _clock() + seconds)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def current_time_budget() -> TimeBudget | None:
    """The budget of the enclosing :func:`time_budget` (read it before handing work to other
    threads: a thread pool's threads do not see the caller's context)."""
    return _BUDGET.get()


def check_time_budget() -> None:
    """Raise :class:`LimitExceeded` if the enclosing :func:`time_budget` has run out (no budget: no-op)."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.check()


# "... the limit of <value>[ unit] ... raise limits.<name> ...": the one message shape
# of LimitExceeded and of the parse worker's out-of-memory crash.
_REFUSAL = re.compile(r"the limit of (\d+)\b.*?raise " + re.escape(CONFIG_TABLE) + r"\.(\w+)")


def refused_under(error: str) -> tuple[str, int] | None:
    """(limit name, its value when it refused) from a stored refusal message; None
    when the error was not a limit's."""
    match = _REFUSAL.search(error or "")
    return (match.group(2), int(match.group(1))) if match else None


def would_refuse_again(error: str, limits: DocumentLimits) -> bool:
    """False only when ``error`` is a limit's refusal and that limit has since been
    raised (the same bytes might now pass); any other recorded failure would recur."""
    refused = refused_under(error)
    if refused is None:
        return True
    name, value = refused
    current = getattr(limits, name, None)
    return not isinstance(current, int) or current <= value
