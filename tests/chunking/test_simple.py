from __future__ import annotations

import json

import pytest

from chunking.model import Page, ParsedDocument
from chunking.strategies.simple import SPEC, SimpleConfig, chunk_simple, slice_spans
from chunking.tokenizers import CharTokenizer, TiktokenTokenizer


def test_short_document_is_one_chunk():
    doc = ParsedDocument.from_text('{"a": 1}', format="json")
    chunks = chunk_simple(doc, SimpleConfig(), TiktokenTokenizer())
    assert [(c.text, c.char_start, c.char_end) for c in chunks] == [('{"a": 1}', 0, 8)]
    assert chunks[0].token_count == len(TiktokenTokenizer().encode('{"a": 1}'))


def test_long_document_is_cut_every_max_object_length_chars():
    text = json.dumps({f"key{i}": "value " * 10 for i in range(100)})
    chunks = chunk_simple(ParsedDocument.from_text(text), SimpleConfig(max_object_length=1000), CharTokenizer())
    assert [len(c.text) for c in chunks[:-1]] == [1000] * (len(chunks) - 1)
    assert 0 < len(chunks[-1].text) <= 1000
    assert "".join(c.text for c in chunks) == text
    assert all(c.verbatim and text[c.char_start : c.char_end] == c.text for c in chunks)


def test_whitespace_only_gives_nothing():
    assert slice_spans("   \n") == []
    assert slice_spans("") == []


def test_pages_come_from_the_parsed_pages():
    pages = [Page(page_num=0, char_offset=0, text="a" * 15), Page(page_num=1, char_offset=15, text="b" * 15)]
    doc = ParsedDocument(doc_id="d", text="a" * 15 + "b" * 15, pages=pages)
    chunks = chunk_simple(doc, SimpleConfig(max_object_length=10), CharTokenizer())
    assert [(c.page_start, c.page_end) for c in chunks] == [(0, 0), (0, 1), (1, 1)]


def test_config():
    with pytest.raises(ValueError):
        SimpleConfig(max_object_length=0)
    assert SPEC.name == "simple" and SPEC.default_config().token_cap is None
