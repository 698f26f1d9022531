"""``.docx`` parsing: outline levels through ``basedOn``, tables, page breaks, and
refusal of broken containers and of parts past the inflation budget (zip bombs)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from chunking.parsers import DocumentError, document_problems, parse_bytes

W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'

STYLES = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:styles {W}>
  <w:style w:type="paragraph" w:styleId="Normal"><w:name w:val="Normal"/></w:style>
  <w:style w:type="paragraph" w:styleId="Heading1"><w:name w:val="heading 1"/><w:basedOn w:val="Normal"/>
    <w:pPr><w:outlineLvl w:val="0"/></w:pPr></w:style>
  <w:style w:type="paragraph" w:styleId="Heading2"><w:name w:val="heading 2"/><w:basedOn w:val="Normal"/>
    <w:pPr><w:outlineLvl w:val="1"/></w:pPr></w:style>
  <w:style w:type="paragraph" w:styleId="Fancy"><w:name w:val="Fancy Section"/><w:basedOn w:val="Heading2"/></w:style>
  <w:style w:type="paragraph" w:styleId="Fancier"><w:name w:val="Fancier"/><w:basedOn w:val="Fancy"/></w:style>
  <w:style w:type="paragraph" w:styleId="Loop1"><w:name w:val="Loop 1"/><w:basedOn w:val="Loop2"/></w:style>
  <w:style w:type="paragraph" w:styleId="Loop2"><w:name w:val="Loop 2"/><w:basedOn w:val="Loop1"/></w:style>
  <w:style w:type="paragraph" w:styleId="NamedOnly"><w:name w:val="Heading 3"/></w:style>
  <w:style w:type="paragraph" w:styleId="Title"><w:name w:val="Title"/></w:style>
</w:styles>"""


def para(text: str, style: str | None = None, extra_ppr: str = "", runs: str | None = None) -> str:
    style_xml = '<w:pStyle w:val="%s"/>' % style if style else ""
    run_xml = runs if runs is not None else '<w:r><w:t xml:space="preserve">%s</w:t></w:r>' % text
    return f"<w:p><w:pPr>{style_xml}{extra_ppr}</w:pPr>{run_xml}</w:p>"


def cell(text: str, tcpr: str = "") -> str:
    return f"<w:tc><w:tcPr>{tcpr}</w:tcPr>{para(text)}</w:tc>"


TABLE = ("<w:tbl><w:tr><w:trPr><w:tblHeader/></w:trPr>" + cell("Name") + cell("Value") + "</w:tr>"
         "<w:tr>" + cell("a") + cell("1") + "</w:tr>"
         "<w:tr>" + cell("wide", '<w:gridSpan w:val="2"/>') + "</w:tr></w:tbl>")

BODY = "".join([
    para("Report title", "Title"),
    para("Intro before any heading."),
    para("Chapter", "Heading1", runs='<w:r><w:t>Chap</w:t></w:r><w:hyperlink><w:r><w:t>ter</w:t></w:r></w:hyperlink>'),
    para("Body one."),
    para("Inherited", "Fancier"),
    TABLE,
    para("", runs='<w:r><w:t>Before break</w:t><w:br w:type="page"/><w:t>after break</w:t></w:r>'),
    para("Direct outline", None, '<w:outlineLvl w:val="2"/>'),
    para("Cycle is body text", "Loop1"),
    para("Named heading", "NamedOnly"),
    para("New page", "Heading1", '<w:pageBreakBefore/>'),
    para("Line\ttab", runs='<w:r><w:t>Line</w:t><w:tab/><w:t>tab</w:t><w:br/><w:t>soft</w:t></w:r>'),
])


def docx_bytes(body: str = BODY, styles: str | None = STYLES, extra: dict[str, bytes] | None = None,
               document_xml: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", document_xml or f'<?xml version="1.0"?><w:document {W}><w:body>{body}</w:body></w:document>')
        if styles:
            z.writestr("word/styles.xml", styles)
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def doc():
    return parse_bytes(docx_bytes(), "report.docx", "report")


def test_heading_levels_follow_based_on_and_outline_levels(doc):
    assert document_problems(doc) == []
    assert [(b.heading, b.level, b.parent_headings) for b in doc.blocks] == [
        ("", 0, []),
        ("Chapter", 1, []),
        ("Inherited", 2, ["Chapter"]),        # Fancier -> Fancy -> Heading2 (outlineLvl 1)
        ("Direct outline", 3, ["Chapter", "Inherited"]),  # the paragraph's own outlineLvl 2
        ("Named heading", 3, ["Chapter", "Inherited"]),   # no outline level anywhere, named "Heading 3"
        ("New page", 1, []),
    ]
    assert doc.metadata["doc_title"] == "Report title"
    assert doc.blocks[0].content == "Report title\nIntro before any heading."
    assert "Cycle is body text" in doc.blocks[3].content


def test_tables_with_header_rows_and_spans(doc):
    lines = doc.blocks[2].content.split("\n")
    assert lines[0] == "## Inherited"
    rows = [["Name", "Value"], ["a", "1"], ["wide", ""]]
    assert lines[1].endswith(f'format="json">{json.dumps(rows, separators=(",", ":"))}</table>')
    (entry,) = doc.tables.values()
    assert entry["table_header"] == '[["Name", "Value"]]' and entry["dimension"] == [3, 2]
    assert entry["heading"] == "Inherited" and entry["blockid"] == doc.blocks[2].block_id


def test_explicit_page_breaks_become_pages(doc):
    assert [p.page_num for p in doc.pages] == [0, 1, 2]
    assert doc.pages[0].text.endswith("Before break\n")
    assert doc.pages[1].text.startswith("after break\n")
    assert doc.pages[2].text.startswith("# New page\n")
    assert doc.pages[2].text.endswith("Line\ttab\nsoft")  # a line break inside a paragraph is a new line
    assert doc.blocks[-1].positions[0]["page"] == 2
    assert "".join(p.text for p in doc.pages) == doc.text


def test_code_paragraph_keeps_its_lines_and_indentation():
    runs = ('<w:r><w:t xml:space="preserve">def f():</w:t><w:br/><w:t xml:space="preserve">    return  1</w:t></w:r>')
    doc = parse_bytes(docx_bytes(para("", "SourceCode", runs=runs)), "c.docx", "c")
    assert doc.text == "def f():\n    return  1"


def test_alternate_content_is_read_once_and_tracked_deletions_not_at_all():
    mc = 'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'
    box = "<w:txbxContent>" + para("boxed text") + "</w:txbxContent>"
    runs = (f'<w:r><w:t>Before </w:t><mc:AlternateContent {mc}><mc:Choice Requires="wps">{box}</mc:Choice>'
            f"<mc:Fallback>{box}</mc:Fallback></mc:AlternateContent><w:t>after</w:t></w:r>")
    tracked = '<w:del><w:r><w:delText>gone</w:delText></w:r></w:del><w:moveFrom><w:r><w:t>moved</w:t></w:r></w:moveFrom>'
    doc = parse_bytes(docx_bytes(para("", runs=runs) + para("", runs=tracked + "<w:r><w:t>kept</w:t></w:r>")), "m.docx", "m")
    assert doc.text.count("boxed text") == 1
    assert "gone" not in doc.text and "moved" not in doc.text and doc.text.endswith("kept")


NUMBERING = f"""<w:numbering {W}>
  <w:abstractNum w:abstractNumId="7">
    <w:lvl w:ilvl="0"><w:start w:val="3"/><w:numFmt w:val="decimal"/><w:lvlText w:val="%1."/></w:lvl>
    <w:lvl w:ilvl="1"><w:numFmt w:val="lowerLetter"/><w:lvlText w:val="%1.%2)"/></w:lvl>
    <w:lvl w:ilvl="2"><w:numFmt w:val="bullet"/><w:lvlText w:val=""/></w:lvl>
  </w:abstractNum>
  <w:num w:numId="5"><w:abstractNumId w:val="7"/></w:num>
</w:numbering>"""


def list_item(text: str, ilvl: int, num_id: int = 5) -> str:
    return para(text, extra_ppr=f'<w:numPr><w:ilvl w:val="{ilvl}"/><w:numId w:val="{num_id}"/></w:numPr>')


def test_list_items_get_their_numbering_labels():
    body = "".join([list_item("three", 0), list_item("sub a", 1), list_item("sub b", 1), list_item("dot", 2),
                    list_item("four", 0), list_item("sub again", 1), list_item("plain", 0, num_id=0)])
    doc = parse_bytes(docx_bytes(body, extra={"word/numbering.xml": NUMBERING}), "l.docx", "l")
    assert doc.text.split("\n") == ["3. three", "3.a) sub a", "3.b) sub b", "• dot", "4. four", "4.a) sub again", "plain"]


def test_omml_equation_text_is_kept_inline():
    m = 'xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math"'
    runs = f'<w:r><w:t xml:space="preserve">Energy </w:t></w:r><m:oMath {m}><m:r><m:t>E=mc</m:t></m:r></m:oMath>'
    assert parse_bytes(docx_bytes(para("", runs=runs)), "e.docx", "e").text == "Energy E=mc"


def test_without_styles_part_builtin_heading_ids_still_count():
    body = para("Top", "Heading1") + para("text") + para("Sub", "Heading2") + para("more", "Unknown")
    doc = parse_bytes(docx_bytes(body, styles=None), "n.docx", "n")
    assert [(b.heading, b.level) for b in doc.blocks] == [("Top", 1), ("Sub", 2)]
    assert doc.blocks[1].content == "## Sub\nmore"


def test_entities_are_not_expanded():
    bomb = ('<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">]>'
            f'<w:document {W}><w:body>{para("x", runs="<w:r><w:t>start &b; end</w:t></w:r>")}</w:body></w:document>')
    doc = parse_bytes(docx_bytes(document_xml=bomb), "e.docx", "e")
    assert "aaaaaaaaaa" not in doc.text
    assert doc.text.startswith("start") and doc.text.endswith("end")


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"PK\x03\x04not really a zip", "not a DOCX container (a corrupt or truncated zip archive)"),
        (bytes(range(256)) * 16, "not a DOCX container (not a zip archive)"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, "legacy OLE2 .doc"),
        (b"", "file is empty"),
    ],
)
def test_not_a_docx_container(data, cause):
    with pytest.raises(DocumentError, match=cause.replace("(", r"\(").replace(")", r"\)")):
        parse_bytes(data, "x.docx", "x")


def test_zip_without_document_part():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(DocumentError, match="no word/document.xml part"):
        parse_bytes(buffer.getvalue(), "x.docx", "x")


def test_malformed_xml_part():
    with pytest.raises(DocumentError, match="word/document.xml is not well-formed XML"):
        parse_bytes(docx_bytes(document_xml="<w:document><unclosed>"), "x.docx", "x")


def test_xml_nested_past_the_parsers_safety_limit_is_refused_naming_it():
    deep = "<w:sdt><w:sdtContent>" * 200 + para("deep") + "</w:sdtContent></w:sdt>" * 200
    document = f'<?xml version="1.0"?><w:document {W}><w:body>{deep}</w:body></w:document>'
    with pytest.raises(DocumentError) as refused:
        parse_bytes(docx_bytes(document_xml=document), "deep.docx", "d")
    message = str(refused.value)
    assert "word/document.xml is over the XML parser's safety limits" in message
    assert "256 levels of nesting" in message and "corrupt" not in message


def test_an_element_name_past_the_parsers_name_limit_is_refused_naming_it():
    name = "w:" + "x" * 60_000  # libxml2 says "Name too long", without naming XML_PARSE_HUGE
    document = f'<?xml version="1.0"?><w:document {W}><w:body><{name}/>{para("x")}</w:body></w:document>'
    with pytest.raises(DocumentError, match="over the XML parser's safety limits"):
        parse_bytes(docx_bytes(document_xml=document), "name.docx", "n")


def test_a_zip_bomb_part_is_refused_naming_the_limit_it_is_over_and_parses_once_raised():
    from chunking.limits import DocumentLimits, LimitExceeded, refused_under, would_refuse_again

    # 3 MB of spaces deflates about 1000:1: over limits.max_compression_ratio (200), refused before
    # lxml sees it, naming the limit to raise (a README audit found a fixed 200:1 no setting could raise).
    padding = " " * (3 * 1024 * 1024)
    document = f'<?xml version="1.0"?><w:document {W}><w:body>{para("x")}{padding}</w:body></w:document>'
    data = docx_bytes(document_xml=document)
    with pytest.raises(LimitExceeded, match=r"bomb.docx: DOCX part word/document.xml \(\d+ bytes\) inflates \d+ times "
                                            r"its compressed size, which is over the limit of 200 \(raise "
                                            r"limits.max_compression_ratio in chunkyard.toml") as refused:
        parse_bytes(data, "bomb.docx", "b")
    assert refused_under(str(refused.value)) == ("max_compression_ratio", 200)
    raised = DocumentLimits(max_compression_ratio=5000)
    assert not would_refuse_again(str(refused.value), raised)  # a run with it raised tries again
    assert parse_bytes(data, "bomb.docx", "b", limits=raised).text.strip() == "x"
    # Past the inflation budget, refused naming that limit whatever the ratio allows.
    with pytest.raises(LimitExceeded, match=r"bomb.docx: DOCX part word/document.xml inflated to .* over the limit "
                                            r"of 1048576 bytes \(raise limits.max_inflated_bytes"):
        parse_bytes(data, "bomb.docx", "b", limits=DocumentLimits(max_compression_ratio=5000, max_inflated_bytes=1 << 20))
