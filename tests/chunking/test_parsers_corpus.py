"""Parsers over ../shared/corpus (real documents nobody here wrote): everything
parses soundly, the same page converted HTML -> DOCX -> PDF keeps its headings and
tables, and offsets and sidecars round-trip."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from chunking.parsers import SUPPORTED_EXTENSIONS, document_problems, parse_document
from chunking.sidecar import read_blocks_jsonl, read_tables_json, write_sidecars

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus is not checked out beside the repo")

REAL = sorted(p for p in CORPUS.glob("*/*") if p.parent.name != "hostile" and p.suffix.lower() in SUPPORTED_EXTENSIONS) \
    if CORPUS.is_dir() else []
CONVERTED = sorted(p.stem for p in (CORPUS / "pdf").glob("*.pdf")) if CORPUS.is_dir() else []
# pandoc carried the Sphinx sidebar (role="navigation", which the HTML parser drops
# as page chrome) into the DOCX, and LibreOffice into the PDF.
SIDEBAR_HEADINGS = {"Table of Contents", "This Page", "Navigation"}


@lru_cache(maxsize=None)
def parsed(path: Path):
    return parse_document(path, f"{path.parent.name}/{path.name}")


def headings(doc, max_level: int = 3) -> list[tuple[int, str]]:
    return [(b.level, b.heading) for b in doc.blocks if 1 <= b.level <= max_level]


@pytest.mark.parametrize("path", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_real_document_parses_soundly(path: Path):
    doc = parsed(path)
    assert document_problems(doc) == []
    assert doc.blocks and doc.text.strip()
    assert doc.format == path.parent.name


@pytest.mark.parametrize("stem", CONVERTED)
def test_docx_and_pdf_keep_the_html_heading_sequence(stem: str):
    html = headings(parsed(CORPUS / "html" / f"{stem}.html"))
    docx = headings(parsed(CORPUS / "docx" / f"{stem}.docx"))
    pdf = headings(parsed(CORPUS / "pdf" / f"{stem}.pdf"))
    assert len(html) > 5
    assert pdf == docx
    assert [h for h in docx if h[1] not in SIDEBAR_HEADINGS] == html


@pytest.mark.parametrize("stem", CONVERTED)
def test_table_counts_agree_between_html_and_docx(stem: str):
    html, docx = parsed(CORPUS / "html" / f"{stem}.html"), parsed(CORPUS / "docx" / f"{stem}.docx")
    assert len(docx.tables) == len(html.tables)
    assert [t["dimension"][0] for t in docx.tables.values()] == [t["dimension"][0] for t in html.tables.values()]
    # Every table has a header row in both: pandoc writes <thead> rows as tblHeader.
    assert all("table_header" in t for t in docx.tables.values())


@pytest.mark.parametrize("stem", CONVERTED)
def test_pdf_pages_hold_exactly_the_words_pdfium_reads_on_that_page(stem: str):
    pdfium = pytest.importorskip("pypdfium2")
    path = CORPUS / "pdf" / f"{stem}.pdf"
    doc = parsed(path)
    pdf = pdfium.PdfDocument(path.read_bytes())
    try:
        assert len(doc.pages) == len(pdf)
        for page, number in zip(doc.pages, range(len(pdf))):
            assert doc.text[page.char_offset:page.char_offset + len(page.text)] == page.text
            raw = pdf[number].get_textpage().get_text_range()
            ours = [w for w in re.split(r"[\s¶]+", _without_heading_markers(doc, page)) if w]
            raw = raw.replace("\ufffe", "-").replace("\x02", "-")  # PDFium's unmapped hyphens
            theirs = [w for w in re.split(r"[\s¶\x00-\x1f]+", raw) if w]
            assert Counter(ours) == Counter(theirs), f"page {number}"
    finally:
        pdf.close()


def _without_heading_markers(doc, page) -> str:
    """The page text with the ``#`` markers that open heading blocks removed."""
    starts = {b.char_start - page.char_offset for b in doc.blocks if b.heading}
    out, pos = [], 0
    for line in page.text.split("\n"):
        out.append(re.sub(r"^#{1,6} ", "", line) if pos in starts else line)
        pos += len(line) + 1
    return "\n".join(out)


@pytest.mark.parametrize("path", REAL[::3], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sidecars_round_trip(tmp_path: Path, path: Path):
    doc = parsed(path)
    blocks_path, tables_path = write_sidecars(doc, tmp_path)
    assert read_blocks_jsonl(blocks_path) == doc.blocks
    assert read_tables_json(tables_path) == doc.tables


def test_markdown_pipe_tables_and_encodings_of_the_text_folder():
    itertools_md = parsed(CORPUS / "md" / "library_itertools.md")
    json_tables = [t for t in itertools_md.tables.values() if t["format"] == "json"]
    assert len(json_tables) == 3 and json_tables[0]["table_header"].startswith('[["Iterator", "Arguments"')
    assert all(parsed(p).encoding == "utf-8" for p in (CORPUS / "txt").glob("*.txt"))
    mpl = parsed(CORPUS / "txt" / "MPL-2.0.txt")
    assert headings(mpl, 2)[:2] == [(1, "Mozilla Public License Version 2.0"), (2, "1. Definitions")]
