"""``.pdf`` parsing (pypdfium2): exact page offsets, headings from the outline or
from font styles, and specific errors for broken files. The PDFs are written here."""

from __future__ import annotations

import pytest

from chunking.parsers import DocumentError, document_problems, parse_bytes

pytest.importorskip("pypdfium2")

# (font, size, text[, indent]) lines per page; F1 = Helvetica, F2 = Helvetica-Bold, F3 = Courier.
PAGES = [
    [("F2", 20, "Intro"), ("F1", 12, "The first body line of the intro, the longest line on this page,"),
     ("F1", 12, "wraps onto a second line."), ("F1", 12, "A new paragraph follows."),
     ("F3", 12, "def f():"), ("F3", 12, "return 1", 4 * 7.2), ("F1", 12, "- a list item"),
     ("F2", 14, "Details"), ("F1", 12, "Details body text that runs over the")],
    [("F1", 12, "page break in mid sentence."), ("F2", 14, "More"), ("F1", 12, "Closing words here.")],
    [],  # an image-only page: no text layer
]


def make_pdf(pages: list[list[tuple[str, int, str]]], bookmarks: list[tuple[str, int]] | None = None) -> bytes:
    """A minimal valid PDF with standard Type1 fonts and an optional flat outline."""
    objects: dict[int, bytes] = {}
    page_ids = [10 + 2 * i for i in range(len(pages))]
    objects[3] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    objects[4] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold >>"
    objects[6] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>"
    for page_id, lines in zip(page_ids, pages):
        ops, y = [], 740
        for font, size, text, *indent in lines:
            # An indent is in points, as a PDF producer positions an indented code line.
            ops.append(f"BT /{font} {size} Tf {72 + (indent[0] if indent else 0)} {y} Td ({text}) Tj ET")
            y -= size + 3
        stream = "\n".join(ops).encode()
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
        objects[page_id] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                            b"/Resources << /Font << /F1 3 0 R /F2 4 0 R /F3 6 0 R >> >> >>" % (page_id + 1))
    kids = " ".join(f"{p} 0 R" for p in page_ids).encode()
    objects[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages))
    catalog = b"<< /Type /Catalog /Pages 2 0 R"
    if bookmarks:
        item_ids = [100 + i for i in range(len(bookmarks))]
        objects[5] = b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>" % (item_ids[0], item_ids[-1], len(item_ids))
        for n, ((title, page), item_id) in enumerate(zip(bookmarks, item_ids)):
            links = b""
            if n:
                links += b" /Prev %d 0 R" % item_ids[n - 1]
            if n + 1 < len(item_ids):
                links += b" /Next %d 0 R" % item_ids[n + 1]
            objects[item_id] = (b"<< /Title (%s) /Parent 5 0 R /Dest [%d 0 R /XYZ 0 792 0]%s >>"
                                % (title.encode(), page_ids[page], links))
        catalog += b" /Outlines 5 0 R"
    objects[1] = catalog + b" >>"
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number] if number in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def test_pages_have_exact_offsets_and_breaks_stay_mid_sentence():
    doc = parse_bytes(make_pdf(PAGES), "r.pdf", "r")
    assert document_problems(doc) == []
    assert [p.page_num for p in doc.pages] == [0, 1, 2]
    assert doc.pages[0].text.endswith("Details body text that runs over the\n")
    assert doc.pages[1].text.startswith("page break in mid sentence.\n\n## More")
    assert doc.pages[2].text == "" and doc.pages[2].char_offset == len(doc.text)
    assert doc.text == "\n\n".join(b.content for b in doc.blocks)


def test_headings_from_font_styles_without_outline():
    doc = parse_bytes(make_pdf(PAGES), "r.pdf", "r")
    assert [(b.heading, b.level, b.parent_headings) for b in doc.blocks] == [
        ("Intro", 1, []), ("Details", 2, ["Intro"]), ("More", 2, ["Intro"])]
    assert doc.blocks[0].content.split("\n") == [
        "# Intro",
        "The first body line of the intro, the longest line on this page, wraps onto a second line.",
        "A new paragraph follows.",  # the line before it ended short of the right edge
        "def f():", "    return 1",  # code lines stay lines; indentation rebuilt on Courier's 7.2 pt grid
        "- a list item",
    ]
    assert [b.positions[0]["page"] for b in doc.blocks] == [0, 0, 1]
    assert doc.blocks[1].positions[0]["page_end"] == 1  # "Details" runs onto page 1


def test_outline_decides_which_lines_are_headings():
    doc = parse_bytes(make_pdf(PAGES, bookmarks=[("Intro", 0), ("More", 1)]), "r.pdf", "r")
    assert doc.metadata["bookmarks"] == 2
    # "Details" is styled like a heading but not in the outline: body text.
    assert [(b.heading, b.level) for b in doc.blocks] == [("Intro", 1), ("More", 2)]
    assert "\nDetails\n" in doc.blocks[0].content


@pytest.mark.parametrize(
    ("mutate", "cause"),
    [
        (lambda pdf: pdf[: len(pdf) // 2], "PDF is truncated"),
        (lambda pdf: bytes(range(256)) * 8, "not a PDF: no %PDF- header"),
        (lambda pdf: b"%PDF-1.4\n" + b"\x00garbage" * 50 + b"\n%%EOF\n", "PDF is corrupt"),
        (lambda pdf: make_pdf([[], []]), r"no extractable text in this PDF \(2 pages"),
    ],
)
def test_broken_pdfs_raise_specific_document_errors(mutate, cause):
    with pytest.raises(DocumentError, match=cause) as info:
        parse_bytes(mutate(make_pdf(PAGES)), "bad.pdf", "bad")
    assert str(info.value).startswith("bad.pdf: ")


def _pdf_with_to_unicode(text: bytes, mapped: bytes) -> bytes:
    """One Helvetica line ``text`` whose font's ToUnicode CMap maps the code ``A`` to the
    UTF-16BE hex ``mapped`` (a surrogate pair: a character beyond the BMP, as an emoji font
    or a math alphabet gives)."""
    cmap = (b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
            b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
            b"/CMapName /Adobe-Identity-UCS def /CMapType 2 def\n"
            b"1 begincodespacerange <00> <FF> endcodespacerange\n"
            b"1 beginbfchar <41> <" + mapped + b"> endbfchar\n"
            b"endcmap CMapName currentdict /CMap defineresource pop end end\n")
    content = b"BT /F1 24 Tf 72 700 Td (" + text + b") Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(cmap), cmap),
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_a_character_beyond_the_bmp_is_one_character_not_two_surrogate_halves():
    # PDFium counts such a character as two (its UTF-16 halves), so the text is read char by
    # char; each half became a lone surrogate, which no UTF-8 can hold: the whole PDF failed
    # as "unparseable pdf: UnicodeEncodeError" over one emoji.
    doc = parse_bytes(_pdf_with_to_unicode(b"Hello A world", b"D83DDE00"), "emoji.pdf", "emoji")
    assert doc.text == "Hello \U0001F600 world"
    doc.text.encode("utf-8")
