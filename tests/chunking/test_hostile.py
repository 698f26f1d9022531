"""Every file of ../shared/corpus/hostile gets its expected outcome: the encodings
decode right, the odd-but-valid files parse, everything else fails alone with a
specific DocumentError — and no other exception type ever escapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from chunking.parsers import DocumentError, document_problems, parse_document

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
HOSTILE = CORPUS / "hostile"

# Only the tests that read the shared files: the fuzz tests below make their own inputs.
needs_corpus = pytest.mark.skipif(not HOSTILE.is_dir(), reason="../shared/corpus is not checked out beside the repo")

FAILS = {
    "empty.txt": "file is empty",
    "truncated.pdf": "PDF is truncated",
    "random_bytes.pdf": "not a PDF",
    "random_bytes.docx": "not a DOCX container",
    "fake_zip.docx": "not a DOCX container",
    "broken.json": "invalid JSON",
}


@needs_corpus
@pytest.mark.parametrize(("name", "cause"), sorted(FAILS.items()))
def test_bad_files_fail_with_their_own_specific_message(name, cause):
    with pytest.raises(DocumentError, match=cause) as info:
        parse_document(HOSTILE / name, f"hostile/{name}")
    assert info.value.source == name


@needs_corpus
def test_latin1_decodes_to_the_right_characters():
    doc = parse_document(HOSTILE / "latin1.txt", "latin1")
    assert doc.text == "Café au lait. Naïve résumé.\n"
    assert doc.encoding == "cp1252"


@needs_corpus
def test_shift_jis_decodes_to_the_same_text_as_the_utf8_copy():
    doc = parse_document(HOSTILE / "vim_tutor.ja.sjis.txt", "sjis")
    assert doc.encoding in ("cp932", "shift_jis")
    assert doc.text == parse_document(CORPUS / "txt" / "vim_tutor.ja.txt", "utf8").text
    assert "非常に強力なエディター" in doc.blocks[0].content  # wrapped CJK lines rejoin without a space


@needs_corpus
def test_nul_bytes_giant_line_and_unclosed_html_are_processable():
    nul = parse_document(HOSTILE / "nul_bytes.txt", "nul")
    assert "\x00" not in nul.text and nul.text.startswith("text with") and nul.text.endswith("inside.")
    giant = parse_document(HOSTILE / "one_giant_line.txt", "giant")
    assert len(giant.text) == 2_000_000 and len(giant.blocks) == 1
    html = parse_document(HOSTILE / "unclosed.html", "unclosed")
    assert html.blocks[0].heading == "Unclosed" and "<td>cell</td>" in html.blocks[0].content
    for doc in (nul, giant, html):
        assert document_problems(doc) == []


@needs_corpus
def test_every_hostile_file_either_parses_or_raises_document_error():
    outcomes = {}
    for path in sorted(HOSTILE.iterdir()):
        try:
            parse_document(path, path.name)
            outcomes[path.name] = "ok"
        except DocumentError:
            outcomes[path.name] = "failed"
    assert {n for n, o in outcomes.items() if o == "failed"} == set(FAILS)


@needs_corpus
def test_size_limit_refuses_before_reading():
    with pytest.raises(DocumentError, match=r"file size 2000000 bytes is over the limit of 1048576 bytes \(raise limits.max_bytes"):
        parse_document(HOSTILE / "one_giant_line.txt", "giant", max_bytes=1024 * 1024)


# -- fuzz: no input, however broken, lets anything but DocumentError escape -------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from chunking.parsers import parse_bytes  # noqa: E402

_EXTENSIONS = [".txt", ".md", ".html", ".json", ".docx", ".pdf"]


def _valid_samples() -> dict[str, bytes]:
    import io
    import zipfile

    docx = io.BytesIO()
    with zipfile.ZipFile(docx, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
                   "<w:body><w:p><w:r><w:t>hello world</w:t></w:r></w:p></w:body></w:document>")
    import importlib.util

    # The PDF writer lives beside this file; load it by path (tests/ is not a package).
    spec = importlib.util.spec_from_file_location("_pdf_fixture", Path(__file__).with_name("test_parsers_pdf.py"))
    pdf_fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pdf_fixture)
    make_pdf, PAGES = pdf_fixture.make_pdf, pdf_fixture.PAGES

    return {".docx": docx.getvalue(), ".pdf": make_pdf(PAGES), ".html": b"<h1>T</h1><table><tr><td>x</td></tr></table>",
            ".md": b"# T\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", ".json": b'{"a": [1, 2]}', ".txt": "Café\n".encode()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ext=st.sampled_from(_EXTENSIONS), data=st.binary(min_size=0, max_size=600))
def test_random_bytes_never_escape_as_another_exception(ext, data):
    try:
        parse_bytes(data, f"fuzz{ext}", "fuzz")
    except DocumentError as err:
        _assert_not_a_bug(err)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ext=st.sampled_from(_EXTENSIONS), cut=st.floats(0.0, 1.0), flip=st.integers(0, 10_000))
def test_truncated_or_corrupted_valid_files_never_escape(ext, cut, flip):
    data = bytearray(_SAMPLES[ext])
    if flip < len(data):
        data[flip] ^= 0xFF
    try:
        parse_bytes(bytes(data[: int(len(data) * cut) or 1]), f"fuzz{ext}", "fuzz")
    except DocumentError as err:
        _assert_not_a_bug(err)


def _assert_not_a_bug(err: DocumentError) -> None:
    """parse_bytes wraps a library's internal error as a DocumentError; one of these
    types in the message would be our own bug hiding behind that net."""
    for bug in ("AttributeError", "TypeError", "NameError", "KeyError", "IndexError", "AssertionError",
                "UnboundLocalError"):
        assert bug not in err.cause, err.cause


_SAMPLES = _valid_samples()
