"""Parser throughput per format, and the PDF library comparison (pypdfium2 vs pypdf).

Run: ``.venv/bin/python bench/bench_parsers.py [CORPUS_DIR] [--repeat N]``
(default corpus: ../shared/corpus beside the repo; exits quietly when absent).

Table 1: pages/s, docs/s and MB/s of ``chunking.parsers.parse_document`` per
format folder (a "page" is a page of the parsed document: PDF pages, DOCX explicit
page breaks + 1, one per text/HTML/JSON file).

Table 2: the PDF library decision. For each library, seconds per page for plain
text extraction and text quality measured against the DOCX each PDF was made from
(LibreOffice converted the corpus DOCX to PDF, so the DOCX paragraphs are ground
truth): word-multiset F1 over ``\\w+`` tokens, and the share of reference lines
whose leading indentation survives (code blocks). The ratio column is each
library's time over pypdfium2's, measured in the same run.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chunking.parsers import SUPPORTED_EXTENSIONS, DocumentError, parse_document  # noqa: E402

DEFAULT_CORPUS = ROOT / ".." / "shared" / "corpus"
_WORD = re.compile(r"\w+")


def bench_formats(corpus: Path, repeat: int) -> list[tuple[str, int, int, float, float]]:
    rows = []
    for folder in sorted(p for p in corpus.iterdir() if p.is_dir() and p.name != "hostile"):
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in SUPPORTED_EXTENSIONS)
        if not files:
            continue
        size = sum(p.stat().st_size for p in files)
        pages = 0
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            pages = 0
            for path in files:
                try:
                    pages += len(parse_document(path, path.name).pages)
                except DocumentError as err:
                    print(f"  ! {err}", file=sys.stderr)
            best = min(best, time.perf_counter() - start)
        rows.append((folder.name, len(files), pages, best, size / 1e6))
    return rows


def docx_reference(path: Path) -> str:
    """The DOCX's paragraphs (tables included) straight from document.xml."""
    from lxml import etree

    w = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
    with zipfile.ZipFile(path) as z:
        root = etree.fromstring(z.read("word/document.xml"), etree.XMLParser(resolve_entities=False))
    lines = []
    for p in root.iter(f"{w}p"):
        text = "".join((t.text or "") if t.tag == f"{w}t" else ("\n" if t.tag == f"{w}br" else "\t")
                       for t in p.iter(f"{w}t", f"{w}br", f"{w}tab"))
        lines.extend(text.split("\n"))
    return "\n".join(lines)


def word_f1(candidate: str, reference: str) -> float:
    cand, ref = Counter(_WORD.findall(candidate.lower())), Counter(_WORD.findall(reference.lower()))
    overlap = sum((cand & ref).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / sum(cand.values()), overlap / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


def indentation_kept(candidate: str, reference: str) -> float:
    """Share of the reference's indented lines (code) found with their indentation."""
    indented = [line.rstrip() for line in reference.split("\n") if re.match(r"^ {2,}\S", line)]
    if not indented:
        return 1.0
    have = {line.rstrip() for line in candidate.split("\n")}
    return sum(line in have for line in indented) / len(indented)


def extract_pypdfium2(data: bytes) -> list[str]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:
        return [pdf[i].get_textpage().get_text_range().replace("\r\n", "\n") for i in range(len(pdf))]
    finally:
        pdf.close()


def extract_pypdf(data: bytes) -> list[str]:
    import pypdf

    return [page.extract_text() or "" for page in pypdf.PdfReader(io.BytesIO(data)).pages]


def extract_chunkyard(data: bytes) -> list[str]:
    from chunking.parsers import parse_bytes

    return [p.text for p in parse_bytes(data, "x.pdf", "x").pages]


def bench_pdf_libraries(corpus: Path) -> list[tuple[str, int, float, float, float]]:
    pdfs = sorted((corpus / "pdf").glob("*.pdf"))
    references = {p.stem: docx_reference(corpus / "docx" / f"{p.stem}.docx")
                  for p in pdfs if (corpus / "docx" / f"{p.stem}.docx").exists()}
    libraries = [("pypdfium2 text", extract_pypdfium2), ("pypdf text", extract_pypdf),
                 ("chunkyard parser (pypdfium2 + headings)", extract_chunkyard)]
    rows = []
    for name, extract in libraries:
        try:
            extract(pdfs[0].read_bytes())
        except ImportError:
            print(f"  ({name}: not installed)", file=sys.stderr)
            continue
        pages, seconds, f1s, indents = 0, 0.0, [], []
        for path in pdfs:
            data = path.read_bytes()
            start = time.perf_counter()
            texts = extract(data)
            seconds += time.perf_counter() - start
            pages += len(texts)
            if path.stem in references:
                text = "\n".join(texts)
                f1s.append(word_f1(text, references[path.stem]))
                indents.append(indentation_kept(text, references[path.stem]))
        rows.append((name, pages, seconds, sum(f1s) / max(len(f1s), 1), sum(indents) / max(len(indents), 1)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs per format")
    args = parser.parse_args()
    if not args.corpus.is_dir():
        print(f"bench_parsers: no corpus at {args.corpus}; skipped")
        return
    print(f"Parser throughput on {args.corpus.resolve()} (best of {args.repeat})")
    print(f"{'format':<8}{'docs':>6}{'pages':>7}{'seconds':>10}{'pages/s':>10}{'docs/s':>9}{'MB/s':>8}")
    for name, docs, pages, seconds, mb in bench_formats(args.corpus, args.repeat):
        print(f"{name:<8}{docs:>6}{pages:>7}{seconds:>10.3f}{pages / seconds:>10.1f}{docs / seconds:>9.1f}{mb / seconds:>8.2f}")
    if not (args.corpus / "pdf").is_dir():
        return
    print("\nPDF library comparison (reference text: the DOCX each PDF was converted from)")
    rows = bench_pdf_libraries(args.corpus)
    base = next((r[2] / r[1] for r in rows if r[0] == "pypdfium2 text"), None)
    print(f"{'library':<42}{'pages':>6}{'ms/page':>9}{'pages/s':>9}{'x pdfium':>10}{'word F1':>9}{'indent kept':>13}")
    for name, pages, seconds, f1, indent in rows:
        per_page = seconds / pages
        ratio = f"{per_page / base:.1f}x" if base else "-"
        print(f"{name:<42}{pages:>6}{per_page * 1000:>9.2f}{pages / seconds:>9.1f}{ratio:>10}{f1:>9.4f}{indent:>13.1%}")


if __name__ == "__main__":
    main()
