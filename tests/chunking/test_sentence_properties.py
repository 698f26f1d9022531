"""Property tests over random text with CJK, emoji, long words, figures and page breaks."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunking.model import Page, ParsedDocument
from chunking.strategies.sentence import FIGURE, SentenceConfig, chunk_sentence
from chunking.strategies.sentence_window import SentenceWindowConfig, chunk_sentence_window
from chunking.tokenizers import TiktokenTokenizer

TOKENIZER = TiktokenTokenizer()
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

words = st.sampled_from(["the", "data", "Dr.", "e.g.", "0.95", "U.S.", "model", "Über", "naïve", "x"])
cjk = st.text(alphabet="这是一个句子中文日本語のテキスト", min_size=1, max_size=12)
emoji = st.sampled_from(["😀", "🚀🚀", "👩‍💻", "🇩🇪"])
long_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=30, max_size=400)
punctuation = st.sampled_from([". ", "! ", "? ", "。", "！", "... ", ", ", "\n", "\n\n", " ", " "])
figure = st.text(alphabet="abc xyz=\"/", max_size=300).map(lambda body: f"<figure>{body}</figure>")
piece = st.one_of(words, words, words, cjk, emoji, long_word, punctuation, punctuation, figure)
page_text = st.lists(piece, max_size=60).map("".join)
pages_strategy = st.lists(page_text, min_size=1, max_size=3)


def document(texts: list[str]) -> ParsedDocument:
    pages, offset = [], 0
    for number, text in enumerate(texts):
        pages.append(Page(page_num=number, char_offset=offset, text=text))
        offset += len(text)
    return ParsedDocument(doc_id="p", text="".join(texts), pages=pages)


def no_ws(text: str) -> str:
    return re.sub(r"\s+", "", text)


def is_subsequence(needle: str, haystack: str) -> bool:
    it = iter(haystack)
    return all(ch in it for ch in needle)


@SETTINGS
@given(pages_strategy, st.sampled_from([24, 60, 500]), st.sampled_from([120, 300, 1000]))
def test_sentence_strategy_properties(texts, cap, section_length):
    doc = document(texts)
    config = SentenceConfig(max_tokens_per_section=cap, max_section_length=section_length)
    chunks = chunk_sentence(doc, config, TOKENIZER)

    # No chunk above the cap except figure chunks; counts are exact.
    for c in chunks:
        assert c.token_count == len(TOKENIZER.encode(c.text))
        assert c.token_count <= cap or c.metadata.get("cap_exempt") == "figure"
        assert c.text.strip() == c.text and c.text

    # Figures intact, never split, never duplicated.
    for match in FIGURE.finditer(doc.text):
        assert sum(c.text.count(match.group()) for c in chunks) == doc.text.count(match.group())
    for c in chunks:
        assert c.text.count("<figure>") == c.text.count("</figure>")

    # Order preserved and every input character appears in the output: the input
    # is a subsequence of the chunks read in order (overlaps only add repeats).
    # (Starts are not monotonic: the seed's midpoint split duplicates 10% on each
    # side, so a deeper piece of a first half can start after the second half does.)
    assert is_subsequence(no_ws(doc.text), no_ws("".join(c.text for c in chunks)))

    # Offsets map back to the input.
    for c in chunks:
        source = no_ws(doc.text[c.char_start : c.char_end])
        own = c.text[: len(c.text) - c.metadata.get("overlap_chars", 0)]
        assert source.startswith(no_ws(own))
        if "overlap_chars" in c.metadata:
            assert no_ws(c.text[len(own) :]) in source
        if c.verbatim:
            assert doc.text[c.char_start : c.char_end] == c.text
        assert doc.pages[0].page_num <= c.page_start <= c.page_end <= doc.pages[-1].page_num


@SETTINGS
@given(pages_strategy, st.sampled_from([16, 64, 512]), st.sampled_from([0, 8, 30]))
def test_sentence_window_properties(texts, size, overlap):
    doc = document(texts)
    overlap = min(overlap, size - 1)
    chunks = chunk_sentence_window(doc, SentenceWindowConfig(chunk_size=size, overlap=overlap), TOKENIZER)
    for c in chunks:
        assert doc.text[c.char_start : c.char_end] == c.text and c.verbatim
        assert c.token_count == len(TOKENIZER.encode(c.text)) <= size
    assert [c.char_start for c in chunks] == sorted(c.char_start for c in chunks)
    covered = set()
    for c in chunks:
        covered.update(range(c.char_start, c.char_end))
    assert all(i in covered for i, ch in enumerate(doc.text) if not ch.isspace())
