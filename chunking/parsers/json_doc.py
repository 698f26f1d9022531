"""``.json``: validated, then kept as text on one page (for the ``simple`` strategy).

The invariant a caller relies on: ``doc.text`` is the decoded file (newlines
normalised, control characters removed: JSON forbids raw ones in strings anyway),
one page, and one level-0 block spanning it whose content is the non-blank lines.
Invalid JSON raises :class:`DocumentError` with the decoder's line and column; so does
JSON that holds no value at all (only ``null``, blank strings, ``[]``, ``{}``): no extractable text.
"""

from __future__ import annotations

import json
import sys

from chunking.model import Page, ParsedDocument
from chunking.parsers.build import Outline, finish_blocks, make_block
from chunking.parsers.encoding import decode_text
from chunking.parsers.errors import DocumentError
from chunking.parsers.text import normalise_text


def parse_json(data: bytes, source: str, doc_id: str, sha256: str) -> ParsedDocument:
    raw, encoding = decode_text(data, source)
    try:
        # Numbers are validated by the grammar, not converted: JSON allows any number of
        # digits, and converting one of more than 4300 would hit Python's int limit.
        value = json.loads(raw, parse_int=_unconverted, parse_float=_unconverted, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise DocumentError(source, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except _NotJson as exc:
        raise DocumentError(source, f"invalid JSON: {exc} is not a JSON value (Python's decoder accepts it)") from None
    except RecursionError:
        # Valid JSON perhaps, but Python's decoder recurses once per level of nesting.
        raise DocumentError(source, f"JSON nested too deeply to validate: over about {sys.getrecursionlimit()} "
                                    f"levels (Python's recursion limit, not a chunkyard setting)") from None
    if not _holds_a_value(value):
        # Its text ("null", "[]", "{}") would be chunked and embedded as if it said something.
        raise DocumentError(source, "no extractable text in this json file: it holds only null, blank strings "
                                    "and empty arrays or objects")
    text = normalise_text(raw)
    outline = Outline()
    outline.para(text)
    drafts = outline.result()
    finished = finish_blocks(doc_id, drafts)
    blocks = [make_block(i, d, c, b, 0, len(text), 0, 0) for i, (d, c, b) in enumerate(finished)]
    return ParsedDocument(doc_id=doc_id, source_name=source, format="json", text=text,
                          pages=[Page(page_num=0, char_offset=0, text=text)], blocks=blocks,
                          encoding=encoding, sha256=sha256)


class _Number:
    """A number the decoder validated and left unconverted (see ``parse_json``)."""


_NUMBER = _Number()


def _unconverted(number: str) -> _Number:
    return _NUMBER


def _holds_a_value(value: object) -> bool:
    """True when ``value`` holds a number, a boolean or a string that is not blank (object
    keys included) anywhere; walked with a stack, as a document nested as deep as the decoder
    allows would exceed the recursion limit here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if any(key.strip() for key in item):
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if item.strip():
                return True
        elif item is not None:
            return True  # a number, true or false
    return False


class _NotJson(ValueError):
    pass


def _not_json(constant: str) -> None:
    raise _NotJson(constant)  # NaN, Infinity, -Infinity
