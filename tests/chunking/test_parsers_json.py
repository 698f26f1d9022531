"""``.json`` parsing: validated, kept as text on one page."""

from __future__ import annotations

import pytest

from chunking.parsers import DocumentError, document_problems, parse_bytes


def test_json_is_kept_as_text_on_one_page():
    raw = '{\r\n  "term": "<p>An HTML body</p>",\r\n  "n": [1, 2]\r\n}\r\n'
    doc = parse_bytes(raw.encode(), "g.json", "g")
    assert document_problems(doc) == []
    assert doc.text == raw.replace("\r\n", "\n") and doc.format == "json"
    assert len(doc.pages) == 1 and doc.tables == {}
    (block,) = doc.blocks
    assert (block.char_start, block.char_end, block.level) == (0, len(doc.text), 0)
    assert block.content.split("\n")[1] == '  "term": "<p>An HTML body</p>",'


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b'{"a": [1, 2, ', "invalid JSON: Expecting value at line 1 column 14"),
        # Perhaps valid, but beyond what Python's decoder can validate: the refusal names that limit.
        (b"[" * 100000 + b"]" * 100000, "JSON nested too deeply to validate: over about "),
        (b"", "file is empty"),
        (b'{"a": NaN}', "invalid JSON: NaN is not a JSON value"),  # Python's decoder takes it; JSON does not
        (b'[1, -Infinity]', "invalid JSON: -Infinity is not a JSON value"),
    ],
)
def test_broken_json_raises_document_error(data, cause):
    with pytest.raises(DocumentError, match=cause.replace("[", r"\[")):
        parse_bytes(data, "broken.json", "b")


def test_a_number_of_more_digits_than_python_converts_is_valid_json():
    # JSON sets no bound on digits; converting 5000 of them would hit Python's int limit (4300).
    raw = '{"big": ' + "9" * 5000 + ', "x": 1.' + "5" * 5000 + '}'
    doc = parse_bytes(raw.encode(), "big.json", "big")
    assert doc.text == raw and document_problems(doc) == []


@pytest.mark.parametrize("raw", ["null", "[]", "{}", '""', '"   "', '[null, "", [], {}]', '{" ": null}',
                                 "[" * 500 + "]" * 500])
def test_json_that_holds_no_value_has_no_extractable_text(raw):
    # Its text ("null", "[]") would otherwise be chunked and embedded as if it said something.
    with pytest.raises(DocumentError, match="no extractable text in this json file: it holds only null"):
        parse_bytes(raw.encode(), "empty.json", "e")


@pytest.mark.parametrize("raw", ["0", "false", '{"key": null}', '[null, "x"]', '[[[], {}], [0.5]]'])
def test_json_holding_any_value_is_kept(raw):
    assert parse_bytes(raw.encode(), "v.json", "v").text == raw
