"""The retrieval eval sets under eval/ are well-formed and their references are real.

Every eval set is JSONL, one question per line:
``{"id", "question", "references": [{"doc", "excerpt" and/or "char_start", "char_end"}]}``
where ``doc`` is the document's partition key (its cleaned path relative to the
documents folder the set is written for) and ``excerpt`` is found verbatim in the
document's PARSED text (what the chunks' offsets point into), not in the raw file.
An excerpt that occurs more than once carries char_start/char_end, which must be
those of its first occurrence (the evaluator resolves an excerpt by ``str.find``).
A reference may also be offsets alone, a non-blank span of the parsed text.
Scores are deliberately not asserted here: they move whenever a strategy improves.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from chunking.parsers import parse_document
from resources.documents import scan_folder

REPO_ROOT = Path(__file__).resolve().parents[2]
EVAL_DIR = REPO_ROOT / "eval"
SHARED_CORPUS = REPO_ROOT.parent / "shared" / "corpus"

# Each eval set names the documents folder its doc ids are relative to.
# A new eval file must be declared here, so its references get checked too.
DOCUMENTS_ROOT_OF_SET = {
    "corpus": SHARED_CORPUS,
    "examples": REPO_ROOT / "examples" / "docs",
}
# Documents nobody here wrote, absent from a user's clone: their sets skip then.
OPTIONAL_ROOTS = {SHARED_CORPUS}

CORPUS_MIN_QUESTIONS = 80
CORPUS_MIN_DOCUMENTS = 15
CORPUS_MIN_FORMATS = 4

EVAL_FILES = sorted(EVAL_DIR.glob("*.jsonl"))


def load_eval_set(path: Path) -> list[dict]:
    """Parse one eval file; a malformed line fails with its file and line number."""
    items = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as exc:
            pytest.fail(f"{path.name}:{line_no}: not JSON: {exc}")
    return items


@lru_cache(maxsize=None)
def documents_of(root: Path) -> dict:
    return scan_folder(root)


@lru_cache(maxsize=None)
def parsed_text(root: Path, doc_id: str) -> str:
    """The parsed text of one document, parsed once per test session."""
    source = documents_of(root)[doc_id]
    return parse_document(source.path, doc_id).text


def root_of(path: Path) -> Path:
    assert path.stem in DOCUMENTS_ROOT_OF_SET, (
        f"eval/{path.name}: unknown eval set; declare its documents folder in DOCUMENTS_ROOT_OF_SET")
    root = DOCUMENTS_ROOT_OF_SET[path.stem]
    if root in OPTIONAL_ROOTS and not root.is_dir():
        pytest.skip(f"{root} is not checked out beside the repo")
    return root


def references_of(items: list[dict]):
    for item in items:
        for ref in item["references"]:
            yield item["id"], ref


def test_the_corpus_set_exists():
    assert "corpus" in {p.stem for p in EVAL_FILES}


@pytest.mark.parametrize("path", EVAL_FILES, ids=lambda p: p.name)
def test_every_item_has_the_agreed_shape_and_a_unique_id(path: Path):
    items = load_eval_set(path)
    assert items, f"{path.name} is empty"
    for item in items:
        assert set(item) >= {"id", "question", "references"}, item
        assert isinstance(item["id"], str) and item["id"].strip()
        assert isinstance(item["question"], str) and item["question"].strip(), item["id"]
        assert isinstance(item["references"], list) and item["references"], item["id"]
        for ref in item["references"]:
            assert isinstance(ref.get("doc"), str) and ref["doc"], item["id"]
            if "excerpt" in ref:
                assert isinstance(ref["excerpt"], str) and ref["excerpt"].strip(), item["id"]
            offsets = [k for k in ("char_start", "char_end") if k in ref]
            assert offsets in ([], ["char_start", "char_end"]), f"{item['id']}: give both offsets or neither"
            assert "excerpt" in ref or offsets, f"{item['id']}: a reference needs an excerpt or char offsets"
            if offsets:
                assert isinstance(ref["char_start"], int) and isinstance(ref["char_end"], int), item["id"]
                assert 0 <= ref["char_start"] < ref["char_end"], item["id"]
    duplicated = [i for i, n in Counter(item["id"] for item in items).items() if n > 1]
    assert duplicated == [], f"{path.name}: duplicated ids {duplicated}"
    questions = Counter(item["question"].strip().lower() for item in items)
    assert [q for q, n in questions.items() if n > 1] == [], f"{path.name}: a question asked twice"


@pytest.mark.parametrize("path", EVAL_FILES, ids=lambda p: p.name)
def test_every_reference_is_verbatim_in_its_parsed_document(path: Path):
    root = root_of(path)
    known = documents_of(root)
    problems = []
    for item_id, ref in references_of(load_eval_set(path)):
        if ref["doc"] not in known:
            problems.append(f"{item_id}: no document {ref['doc']!r} under {root}")
            continue
        text = parsed_text(root, ref["doc"])
        excerpt = ref.get("excerpt")
        if excerpt is None:
            start, end = ref["char_start"], ref["char_end"]
            if not (0 <= start < end <= len(text) and text[start:end].strip()):
                problems.append(f"{item_id}: offsets {start}..{end} are not a non-blank span of {ref['doc']} "
                                f"({len(text)} chars)")
        elif "char_start" in ref:
            found = text[ref["char_start"]:ref["char_end"]]
            if found != excerpt:
                problems.append(f"{item_id}: {ref['doc']}[{ref['char_start']}:{ref['char_end']}] is {found!r}, "
                                f"not the excerpt {excerpt[:60]!r}")
            elif text.find(excerpt) != ref["char_start"]:
                # The evaluator resolves an excerpt to its first occurrence and rejects other offsets.
                problems.append(f"{item_id}: offsets in {ref['doc']} are not the excerpt's first occurrence")
        elif excerpt not in text:
            problems.append(f"{item_id}: excerpt not in the parsed text of {ref['doc']}: {excerpt[:80]!r}")
        elif text.count(excerpt) > 1:
            problems.append(f"{item_id}: excerpt occurs {text.count(excerpt)} times in {ref['doc']}; "
                            "give char_start/char_end")
    assert problems == []


def test_the_corpus_set_is_large_and_varied():
    path = EVAL_DIR / "corpus.jsonl"
    items = load_eval_set(path)
    docs = {ref["doc"] for _, ref in references_of(items)}
    formats = {doc.split("/", 1)[0] for doc in docs if "/" in doc}
    assert len(items) >= CORPUS_MIN_QUESTIONS
    assert len(docs) >= CORPUS_MIN_DOCUMENTS, sorted(docs)
    assert len(formats) >= CORPUS_MIN_FORMATS, sorted(formats)
    assert not any(doc.startswith("hostile/") for doc in docs)
    assert any(len(item["references"]) > 1 for item in items), "no question needs two passages"


def test_corpus_excerpts_are_passages_not_words_or_pages():
    """Tight references: a sentence to a short paragraph, so character IoU means something.

    The floor is 30 characters, not 50, because one CJK sentence is that short."""
    items = load_eval_set(EVAL_DIR / "corpus.jsonl")
    sizes = {(item_id, ref["doc"]): len(ref["excerpt"]) if "excerpt" in ref else ref["char_end"] - ref["char_start"]
             for item_id, ref in references_of(items)}
    assert [k for k, n in sizes.items() if not 30 <= n <= 600] == []
