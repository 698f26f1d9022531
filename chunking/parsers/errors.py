"""The one exception a parser lets escape for bad input (defined in :mod:`chunking.errors`,
so :mod:`chunking.limits` can subclass it without importing the parsers)."""

from chunking.errors import DocumentError

__all__ = ["DocumentError"]
