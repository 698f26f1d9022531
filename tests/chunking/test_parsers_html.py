"""``.html`` parsing: heading chains, tables with raw thead, figures, dropped chrome."""

from __future__ import annotations

import pytest

from chunking.parsers import DocumentError, document_problems, parse_bytes

PAGE = """<!DOCTYPE html>
<html><head><title>Guide &amp; Co</title><style>p { color: red }</style>
<script>var heading = "<h1>not me</h1>";</script></head>
<body>
<nav><h2>Site menu</h2><a href="/">home</a></nav>
<div role="navigation"><h3>Sidebar</h3></div>
<p>Preamble   text
 over lines.</p>
<h1>Top <a class="headerlink" href="#top">¶</a></h1>
<p>First para<br>second line</p>
<h2>Tables</h2>
<table>
  <caption>Sizes</caption>
  <thead><tr><th rowspan="2" class="x">Name</th><th colspan="2">Dims</th></tr>
         <tr><th>W</th><th>H</th></tr></thead>
  <tbody><tr><td>box</td><td>1 &lt; 2</td><td>3</td></tr></tbody>
</table>
<table><tr><th>K</th><th>V</th></tr><tr><td>a</td><td><table><tr><td>inner</td></tr></table></td></tr></table>
<h3>Pics</h3>
<p>Look: <img src="http://example.invalid/x.png" alt="a chart"></p>
<figure><img src="y.png" alt="alt y"><figcaption>Figure 1: growth</figcaption></figure>
<h2>Code</h2>
<pre>def f():
    return 1</pre>
</body></html>"""


@pytest.fixture(scope="module")
def doc():
    return parse_bytes(PAGE.encode(), "guide.html", "guide")


def test_structured_text_and_invariants(doc):
    assert document_problems(doc) == []
    assert doc.text == "\n\n".join(b.content for b in doc.blocks)
    assert all(doc.text[b.char_start:b.char_end] == b.content for b in doc.blocks)
    assert len(doc.pages) == 1 and doc.format == "html" and doc.metadata["doc_title"] == "Guide & Co"


def test_heading_chain_and_dropped_chrome(doc):
    assert [(b.heading, b.level, b.parent_headings) for b in doc.blocks] == [
        ("", 0, []),
        ("Top", 1, []),
        ("Tables", 2, ["Top"]),
        ("Pics", 3, ["Top", "Tables"]),
        ("Code", 2, ["Top"]),
    ]
    for chrome in ("Site menu", "Sidebar", "not me", "color: red", "¶"):
        assert chrome not in doc.text
    assert doc.blocks[0].content == "Preamble text over lines."
    assert doc.blocks[1].content == "# Top\nFirst para\nsecond line"


def test_tables_keep_thead_raw_and_first_th_row_becomes_header(doc):
    lines = doc.blocks[2].content.split("\n")
    assert lines[0] == "## Tables"
    first, second = lines[1], lines[2]
    thead = '<thead><tr><th rowspan="2">Name</th><th colspan="2">Dims</th></tr><tr><th>W</th><th>H</th></tr></thead>'
    assert first.endswith(f'format="html">{thead}<tbody><tr><td>box</td><td>1 &lt; 2</td><td>3</td></tr></tbody></table>')
    assert second.endswith('format="html"><thead><tr><th>K</th><th>V</th></tr></thead>'
                           "<tbody><tr><td>a</td><td>inner</td></tr></tbody></table>")
    entries = list(doc.tables.values())
    assert [e["table_header"] for e in entries] == [thead, "<thead><tr><th>K</th><th>V</th></tr></thead>"]
    assert entries[0]["dimension"] == [3, 3] and entries[0]["caption"] == "Sizes"
    assert entries[0]["heading"] == "Tables" and entries[0]["parent_headings"] == ["Top"]
    assert all(e["blockid"] == doc.blocks[2].block_id for e in entries)


def test_images_become_figure_placeholders_and_pre_keeps_lines(doc):
    pics = doc.blocks[3].content.split("\n")
    assert pics[1] == "Look:"
    assert pics[2].startswith('<figure id="fg-') and pics[2].endswith('src="http://example.invalid/x.png">a chart</figure>')
    assert pics[3].endswith('src="y.png">Figure 1: growth</figure>')
    assert doc.blocks[4].content == "## Code\ndef f():\n    return 1"


def test_unclosed_html_is_processable():
    doc = parse_bytes(b"<html><body><h1>Unclosed <table><tr><td>cell", "u.html", "u")
    assert document_problems(doc) == []
    assert doc.blocks[0].heading == "Unclosed"
    assert "<td>cell</td>" in doc.blocks[0].content


def test_omitted_end_of_head_does_not_swallow_the_body():
    doc = parse_bytes(b"<html><head><title>T</title><meta charset=utf-8><h1>Body</h1><p>text", "h.html", "h")
    assert doc.text == "# Body\ntext" and doc.metadata["doc_title"] == "T"


def test_mathml_with_tex_becomes_an_equation_tag():
    page = (b'<p>Newton: <math><semantics><mi>F</mi><annotation encoding="application/x-tex">F = ma</annotation>'
            b'</semantics></math> holds.</p><p><math><mi>x</mi></math>gone</p>')
    doc = parse_bytes(page, "m.html", "m")
    assert doc.text == 'Newton: <equation format="latex">F = ma</equation> holds.\ngone'


def test_declared_charset_is_honoured():
    data = '<html><head><meta charset="windows-1252"></head><body><p>Café</p></body></html>'.encode("cp1252")
    doc = parse_bytes(data, "c.html", "c")
    assert doc.text == "Café" and doc.encoding == "cp1252"


def test_html_without_text_is_a_document_error():
    with pytest.raises(DocumentError, match="no text content"):
        parse_bytes(b"<html><head><script>x()</script></head><body>  </body></html>", "e.html", "e")


def test_standard_library_fallback_gives_the_same_document(monkeypatch):
    from lxml import etree

    fast = parse_bytes(PAGE.encode(), "guide.html", "guide")

    def refuse(*args, **kwargs):
        raise etree.ParserError("libxml2 gave up")

    monkeypatch.setattr(etree, "HTMLParser", refuse)
    slow = parse_bytes(PAGE.encode(), "guide.html", "guide")
    assert slow.text == fast.text and slow.blocks == fast.blocks and slow.tables == fast.tables
