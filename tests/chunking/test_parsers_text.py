"""``.txt`` / ``.md`` parsing: headings, blocks, pipe tables, code fences, encodings."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from chunking.parsers import DocumentError, SUPPORTED_EXTENSIONS, document_problems, parse_bytes, parse_document

MD = """Intro line one
wrapped onto line two.

# Guide

Some text.

## Install
Run it:

```python
# not a heading
print("x")
```

Setext Title
============

Sub Part
--------

| Name | Value |
|------|------:|
| a    | 1     |
| b \\| c | 2 |

### Deep
Last words.
"""


def parse_md(text: str = MD, name: str = "guide.md", doc_id: str = "docs/guide.md"):
    return parse_bytes(text.encode("utf-8"), name, doc_id)


def test_markdown_heading_blocks_levels_and_parents():
    doc = parse_md()
    assert document_problems(doc) == []
    assert [(b.heading, b.level, b.parent_headings) for b in doc.blocks] == [
        ("", 0, []),
        ("Guide", 1, []),
        ("Install", 2, ["Guide"]),
        ("Setext Title", 1, []),
        ("Sub Part", 2, ["Setext Title"]),
        ("Deep", 3, ["Setext Title", "Sub Part"]),
    ]


def test_text_is_the_source_and_blocks_span_heading_sections():
    doc = parse_md()
    assert doc.text == MD and doc.format == "md" and doc.encoding == "utf-8"
    assert len(doc.pages) == 1 and doc.pages[0].text == MD
    spans = [doc.text[b.char_start:b.char_end] for b in doc.blocks]
    assert "".join(spans) == MD  # contiguous, in order, covering
    assert spans[1].startswith("# Guide\n") and spans[2].startswith("## Install\n")
    assert spans[3].startswith("Setext Title\n====")
    assert doc.sha256 == hashlib.sha256(MD.encode()).hexdigest()


def test_content_is_sidecar_form_with_heading_line_joined_paragraphs_and_whole_fence():
    doc = parse_md()
    assert doc.blocks[0].content == "Intro line one wrapped onto line two."
    assert doc.blocks[2].content == '## Install\nRun it:\n```python\n# not a heading\nprint("x")\n```'
    assert doc.blocks[5].content == "### Deep\nLast words."


def test_pipe_table_becomes_json_tag_with_header_in_tables_sidecar():
    doc = parse_md()
    block = doc.blocks[4]
    lines = block.content.split("\n")
    assert lines[0] == "## Sub Part"
    tag = lines[1]
    assert tag.startswith('<table id="tb-') and tag.endswith("</table>") and ' format="json">' in tag
    table_id = tag.split('id="')[1].split('"')[0]
    entry = doc.tables[table_id]
    rows = [["Name", "Value"], ["a", "1"], ["b | c", "2"]]
    assert json.loads(entry["content"]) == rows
    assert entry["table_header"] == '[["Name", "Value"]]'
    assert entry["dimension"] == [3, 2] and entry["format"] == "json"
    assert entry["blockid"] == block.block_id and entry["heading"] == "Sub Part"
    assert entry["parent_headings"] == ["Setext Title"]


def test_raw_html_table_in_markdown_becomes_html_tag():
    md = "# T\n\n<table>\n<thead>\n<tr><th rowspan=\"2\">A</th><th>B</th></tr>\n</thead>\n<tbody><tr><td>1</td><td>2</td></tr></tbody>\n</table>\n"
    doc = parse_md(md)
    tag = doc.blocks[0].content.split("\n")[1]
    assert tag.endswith('format="html"><thead><tr><th rowspan="2">A</th><th>B</th></tr></thead>'
                       "<tbody><tr><td>1</td><td>2</td></tr></tbody></table>")
    (entry,) = doc.tables.values()
    assert entry["table_header"] == '<thead><tr><th rowspan="2">A</th><th>B</th></tr></thead>'


def test_block_ids_are_md5_of_the_format_and_stable_across_reparses():
    first, second = parse_md(), parse_md()
    assert [b.block_id for b in first.blocks] == [b.block_id for b in second.blocks]
    b = first.blocks[1]
    assert b.block_id == hashlib.md5(f"docs/guide.md:1:{b.heading}:{b.content}".encode()).hexdigest()
    assert parse_md(doc_id="other").blocks[1].block_id != b.block_id


def test_positions_carry_page_and_char_span():
    doc = parse_md()
    for b in doc.blocks:
        assert b.positions == [{"type": "absolute", "page": 0, "page_end": 0,
                                "char_start": b.char_start, "char_end": b.char_end}]


def test_plain_text_setext_headings_and_comment_blocks():
    txt = "License\n=======\n\n1. Definitions\n--------------\nSome words.\n\n# comment one\n# comment two\n\n===== box =====\n"
    doc = parse_bytes(txt.encode(), "LICENSE.txt", "l")
    assert doc.format == "txt"
    assert [(b.heading, b.level) for b in doc.blocks] == [("License", 1), ("1. Definitions", 2)]
    assert "# comment one" in doc.blocks[1].content


def test_crlf_normalised_and_cjk_lines_join_without_space():
    doc = parse_bytes("第一行\r\n第二行\r\n".encode("utf-8"), "zh.txt", "z")
    assert doc.text == "第一行\n第二行\n"
    assert doc.blocks[0].content == "第一行第二行"


@pytest.mark.parametrize(
    ("encoded", "encoding_prefix"),
    [
        ("Grüße aus Köln — naïve café.\n".encode("utf-8-sig"), "utf-8"),
        ("Grüße aus Köln.\n".encode("utf-16"), "utf-16"),
        ("Café au lait. Naïve résumé.\n".encode("cp1252"), "cp1252"),
    ],
)
def test_encodings_with_bom_or_latin1(encoded, encoding_prefix):
    doc = parse_bytes(encoded, "x.txt", "x")
    assert doc.encoding.startswith(encoding_prefix)
    assert doc.text.startswith(("Grüße", "Café"))


@pytest.mark.parametrize(
    ("text", "encoding", "expected"),
    [
        ("Ein kurzer Satz über Öl.", "latin-1", "cp1252"),  # not two Big5 characters
        ("Zażółć gęślą jaźń.", "cp1250", "cp1250"),  # Central European stays itself
        ("Привет мир. Это русский текст для проверки кодировки.\n" * 5, "cp1251", "cp1251"),
        ("これは日本語", "shift_jis", "cp932"),  # short, but really Japanese
    ],
)
def test_short_legacy_texts_get_their_own_code_page(text, encoding, expected):
    doc = parse_bytes(text.encode(encoding), "s.txt", "s")
    assert (doc.text, doc.encoding) == (text, expected)


def test_shift_jis_and_gb18030_are_detected():
    ja = ("これは日本語のテキストです。文字コードを正しく判定できるか確かめます。\n" * 12)
    zh = ("这是一个中文文本，用于测试字符编码的检测是否正确。我们需要足够多的文字。\n" * 12)
    doc_ja = parse_bytes(ja.encode("shift_jis"), "ja.txt", "ja")
    doc_zh = parse_bytes(zh.encode("gb18030"), "zh.txt", "zh")
    assert doc_ja.text == ja and doc_ja.encoding in ("cp932", "shift_jis")
    assert doc_zh.text == zh and doc_zh.encoding.lower().replace("-", "") in ("gb18030", "gbk", "gb2312")


def test_utf8_with_a_damaged_byte_is_still_utf8():
    data = bytearray(("Grüße aus Köln. " * 30).encode())
    data[50] = 0xFF  # breaks one two-byte sequence
    doc = parse_bytes(bytes(data), "d.txt", "d")
    assert doc.encoding == "utf-8" and doc.text.count("\ufffd") == 1 and doc.text.count("Köln") == 29


def test_nul_bytes_are_removed_and_text_kept():
    doc = parse_bytes(b"text with \x00 nul\x00 bytes.", "n.txt", "n")
    assert doc.text == "text with  nul bytes."


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"", "file is empty"),
        (b"  \n\t\n", "no text"),
        (bytes(range(256)) * 40, "not text"),
    ],
)
def test_bad_text_input_raises_document_error(data, cause):
    with pytest.raises(DocumentError, match=cause) as info:
        parse_bytes(data, "bad.txt", "bad")
    assert str(info.value).startswith("bad.txt: ")


def test_size_limit_and_unsupported_extension(tmp_path: Path):
    big = tmp_path / "big.txt"
    big.write_text("x" * 2000)
    with pytest.raises(DocumentError, match=r"file size 2000 bytes is over the limit of 1000 bytes \(raise limits.max_bytes"):
        parse_document(big, "big", max_bytes=1000)
    assert parse_document(big, "big").text == "x" * 2000
    with pytest.raises(DocumentError, match="unsupported file type '.xyz'"):
        parse_bytes(b"hello", "a.xyz", "a")
    assert {".txt", ".md", ".html", ".docx", ".pdf", ".json"} <= SUPPORTED_EXTENSIONS
    with pytest.raises(DocumentError, match="no such file"):
        parse_document(tmp_path / "missing.txt", "m")
    (tmp_path / "dir.txt").mkdir()
    with pytest.raises(DocumentError, match="not a regular file"):
        parse_document(tmp_path / "dir.txt", "d")


def test_pandoc_div_wrappers_are_not_text():
    doc = parse_md('# T\n\n<div class="doctest"\nsynopsis="two lines">\n\n\\>\\>\\> x\n\n</div>\n')
    assert doc.blocks[0].content == "# T\n>>> x"  # and CommonMark escapes are undone


def test_yaml_front_matter_is_not_a_heading():
    doc = parse_md("---\ntitle: x\n---\n\n# Real\nbody\n")
    assert [b.heading for b in doc.blocks] == ["Real"] and doc.blocks[0].content == "# Real\nbody"


def test_markdown_thematic_break_is_a_boundary_not_text():
    doc = parse_md("# T\n\nabove\n\n* * *\n\nbelow\n")
    assert doc.blocks[0].content == "# T\nabove\nbelow"


def test_markdown_escapes_are_undone_outside_code_spans():
    doc = parse_md("# A \\*star\\*\n\nlist\\[0\\] and `code\\[x\\]`\n")
    assert doc.blocks[0].content == "# A *star*\nlist[0] and `code\\[x\\]`"


def test_document_problems_reports_broken_invariants():
    from chunking.model import Block, Page, ParsedDocument

    doc = ParsedDocument(
        doc_id="d", text="abcdef",
        pages=[Page(page_num=0, char_offset=0, text="abc"), Page(page_num=1, char_offset=4, text="def")],
        blocks=[Block(index=0, content="x", char_start=0, char_end=4, block_id="nope"),
                Block(index=1, heading="H", level=2, content="# H", char_start=3, char_end=6)],
    )
    problems = document_problems(doc)
    assert "page 1 starts at 4, expected 3" in problems
    assert "block 0 id is not md5(doc_id:index:heading:content)" in problems
    assert "block 1 span 3:6 is out of order or range" in problems
    assert "block 1 content does not start with its heading line" in problems
