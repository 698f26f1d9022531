"""``chunking.compat.azure`` against outputs of the reference itself (issue 13).

``fixtures/azure/reference_2025.json`` holds what the 2025 Azure ``prepdocslib``
``SentenceTextSplitter`` emitted (cl100k_base) for the seed's worked examples,
synthetic pages that exercise its quirks, and the pages of every corpus PDF at
three sizes (stored as a sha256 of the output, the PDF pages' sha256 beside it).
The compat splitter must give the same chunks, byte for byte and page for page,
except in the cases the reference marks ``reference_scrambles``: there it trims the
fragment it carries across a page break and inserts the rest before it, so text
comes out of source order, and chunkyard knowingly keeps it in order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from chunking.compat.azure import Page, SentenceTextSplitter

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "azure" / "reference_2025.json"
CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
CASES = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, ensure_ascii=False).encode()).hexdigest()


def _split(pages: list[list], case: dict) -> list[list]:
    splitter = SentenceTextSplitter(max_tokens_per_section=case["max_tokens_per_section"])
    splitter.max_section_length = case["max_section_length"]
    offset, inputs = 0, []
    for number, text in pages:
        inputs.append(Page(number, offset, text))
        offset += len(text)
    return [[c.page_num, c.text] for c in splitter.split_pages(inputs)]


def _ids(cases):
    return [c["name"] for c in cases]


SYNTHETIC = [c for c in CASES if "pages" in c and not c["reference_scrambles"]]
CORPUS_CASES = [c for c in CASES if "corpus" in c and not c["reference_scrambles"]]
SCRAMBLED = [c for c in CASES if "pages" in c and c["reference_scrambles"]]


def test_the_fixture_covers_the_seed_examples_and_the_corpus_pdfs():
    names = {c["name"] for c in CASES}
    assert {"ex1", "ex2", "ex3", "ex3b", "ex4_20", "ex5_40", "sentences200", "wordnext"} <= names
    assert len(CORPUS_CASES) >= 8 and len(SYNTHETIC) >= 9 and SCRAMBLED


@pytest.mark.parametrize("case", SYNTHETIC, ids=_ids(SYNTHETIC))
def test_byte_identical_to_the_reference(case):
    assert _split(case["pages"], case) == case["expected"]


@pytest.fixture(scope="module")
def pdf_pages():
    if not (CORPUS / "pdf").is_dir():
        pytest.skip("../shared/corpus is not present")
    from chunking.parsers import parse_document

    cache: dict[str, list[list]] = {}

    def pages(rel: str) -> list[list]:
        if rel not in cache:
            doc = parse_document(CORPUS / rel, rel)
            cache[rel] = [[p.page_num, p.text] for p in doc.pages]
        return cache[rel]

    return pages


@pytest.mark.parametrize("case", CORPUS_CASES, ids=_ids(CORPUS_CASES))
def test_byte_identical_to_the_reference_on_corpus_pdfs(case, pdf_pages):
    pages = pdf_pages(case["corpus"])
    # The input must be what the reference saw; a changed PDF parser makes this fail first.
    assert _sha(pages) == case["pages_sha256"], "the PDF parses differently now: regenerate the fixture"
    out = _split(pages, case)
    assert (len(out), _sha(out)) == (case["chunks"], case["expected_sha256"])


@pytest.mark.parametrize("case", SCRAMBLED, ids=_ids(SCRAMBLED))
def test_where_the_reference_scrambles_the_order_compat_keeps_it(case):
    """The one known difference: the carried fragment stays whole and in order.

    Every compat chunk is a piece of the source (spaces aside: a join may add one);
    the reference emits a chunk that is not, the trimmed fragment's rest before it.
    """
    def squeeze(text: str) -> str:
        return "".join(text.split())

    source = squeeze("".join(text for _, text in case["pages"]))
    out = _split(case["pages"], case)
    assert all(squeeze(text) in source for _, text in out), out
    assert not all(squeeze(text) in source for _, text in case["expected"])
