"""The exceptions the library raises for bad input: a document a parser cannot read, a document or
strategy name the chunkers cannot take."""

from __future__ import annotations


class DocumentError(ValueError):
    """A document that cannot be parsed. The message names the file and the cause.

    ``cause`` is the bare reason ("PDF is truncated"), ``source`` the file name, so a
    caller can log or store them separately; ``str(err)`` is ``"<source>: <cause>"``.
    """

    def __init__(self, source: str, cause: str) -> None:
        self.source = source
        self.cause = cause
        super().__init__(f"{source}: {cause}" if source else cause)

    def __reduce__(self):  # noqa: ANN204 - pickling (a parse worker sends it to its parent)
        return (DocumentError, (self.source, self.cause))


class InvalidDocumentError(ValueError):
    """A ``ParsedDocument`` given to ``chunk_document`` that breaks the invariants of
    :mod:`chunking.model` (its chunks' offsets, pages and blocks would be wrong); ``problems``
    lists each one."""

    def __init__(self, doc_id: str, problems: list[str]) -> None:
        self.doc_id = doc_id
        self.problems = problems
        super().__init__(f"document {doc_id!r} cannot be chunked: {'; '.join(problems)}")

    def __reduce__(self):  # noqa: ANN204 - pickling (a worker process sends it to its parent)
        return (InvalidDocumentError, (self.doc_id, self.problems))


class UnknownStrategyError(KeyError, ValueError):
    """A strategy name that is not registered. A ``KeyError`` as before, and a ``ValueError`` like
    every other bad argument of the chunking entry points (one ``except ValueError`` takes them all)."""

    def __str__(self) -> str:  # KeyError's own would quote the message
        return str(self.args[0]) if self.args else ""
