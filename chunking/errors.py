"""The one exception a parser lets escape for bad input."""

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
