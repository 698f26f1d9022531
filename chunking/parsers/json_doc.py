"""``.json``: validated, then kept as text on one page (for the ``simple`` strategy).

The invariant a caller relies on: ``doc.text`` is the decoded file (newlines
normalised, control characters removed: JSON forbids raw ones in strings anyway),
one page, and one level-0 block spanning it whose content is the non-blank lines.
Invalid JSON raises :class:`DocumentError` with the decoder's line and column.
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
        json.loads(raw, parse_int=_unconverted, parse_float=_unconverted, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise DocumentError(source, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except _NotJson as exc:
        raise DocumentError(source, f"invalid JSON: {exc} is not a JSON value (Python's decoder accepts it)") from None
    except RecursionError:
        # Valid JSON perhaps, but Python's decoder recurses once per level of nesting.
        raise DocumentError(source, f"JSON nested too deeply to validate: over about {sys.getrecursionlimit()} "
                                    f"levels (Python's recursion limit, not a chunkyard setting)") from None
    text = normalise_text(raw)
    outline = Outline()
    outline.para(text)
    drafts = outline.result()
    finished = finish_blocks(doc_id, drafts)
    blocks = [make_block(i, d, c, b, 0, len(text), 0, 0) for i, (d, c, b) in enumerate(finished)]
    return ParsedDocument(doc_id=doc_id, source_name=source, format="json", text=text,
                          pages=[Page(page_num=0, char_offset=0, text=text)], blocks=blocks,
                          encoding=encoding, sha256=sha256)


def _unconverted(number: str) -> None:
    return None


class _NotJson(ValueError):
    pass


def _not_json(constant: str) -> None:
    raise _NotJson(constant)  # NaN, Infinity, -Infinity
