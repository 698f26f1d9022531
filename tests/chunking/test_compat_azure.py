from __future__ import annotations

import pytest

from chunking.compat import azure
from chunking.compat.azure import Chunk, Page, SentenceTextSplitter, SimpleTextSplitter, SplitPage


def test_module_constants():
    assert azure.ENCODING_MODEL == "text-embedding-ada-002"
    assert azure.DEFAULT_SECTION_LENGTH == 1000
    assert azure.DEFAULT_OVERLAP_PERCENT == 10
    assert azure.STANDARD_SENTENCE_ENDINGS == [".", "!", "?"]
    assert azure.CJK_SENTENCE_ENDINGS == ["。", "！", "？", "‼", "⁇", "⁈", "⁉"]
    assert azure.STANDARD_WORD_BREAKS == [",", ";", ":", " ", "(", ")", "[", "]", "{", "}", "\t", "\n"]
    assert {"、", "，", "「", "」", "—", "“", "”"} <= set(azure.CJK_WORD_BREAKS)
    assert SplitPage is Chunk


def test_splitter_attributes_match_the_reference():
    splitter = SentenceTextSplitter()
    assert splitter.max_tokens_per_section == 500
    assert splitter.max_section_length == 1000
    assert splitter.semantic_overlap_percent == 10
    assert splitter.section_overlap == 100
    assert splitter.sentence_endings == azure.STANDARD_SENTENCE_ENDINGS + azure.CJK_SENTENCE_ENDINGS
    assert splitter.word_breaks == azure.STANDARD_WORD_BREAKS + azure.CJK_WORD_BREAKS
    assert SentenceTextSplitter(max_tokens_per_section=100).max_tokens_per_section == 100


def test_split_pages_yields_chunks_with_page_numbers():
    pages = [
        Page(page_num=0, offset=0, text="The procedure continues to operate"),
        Page(page_num=1, offset=34, text="under heavy load and completes successfully. Follow-up sentence."),
    ]
    # The seed's Example 4 (its token limit is not given). At 14 tokens the merge does not fit and
    # the reference (2025) trims the carried fragment and puts the rest before it: its output is
    # "to operateThe procedure continues under heavy load ..." (text out of order). chunkyard
    # carries the whole fragment instead; as the reference, the whitespace after an ending
    # starts the next chunk.
    chunks = list(SentenceTextSplitter(max_tokens_per_section=14).split_pages(pages))
    assert chunks == [
        Chunk(page_num=0, text="The procedure continues to operate under heavy load and completes successfully."),
        Chunk(page_num=1, text=" Follow-up sentence."),
    ]


def test_attribute_changes_are_honoured_on_the_next_call():
    text = " ".join(f"Sentence {i} is a short one." for i in range(100))
    splitter = SentenceTextSplitter()
    default = list(splitter.split_pages([Page(0, 0, text)]))
    splitter.max_section_length = 300
    smaller = list(splitter.split_pages([Page(0, 0, text)]))
    assert len(smaller) > len(default)
    assert all(len(c.text) <= 360 for c in smaller)


def test_the_references_unread_attributes_are_plain_and_settable():
    # The reference sets section_overlap (100) and sentence_search_limit (100) in __init__ and never
    # reads them: code that sets them (it raised AttributeError here) gets the same chunks.
    text = " ".join(f"Sentence {i} is a short one." for i in range(100))
    splitter = SentenceTextSplitter()
    assert (splitter.section_overlap, splitter.sentence_search_limit) == (100, 100)
    splitter.max_section_length = 300
    assert splitter.section_overlap == 100  # set once, as there
    before = list(splitter.split_pages([Page(0, 0, text)]))
    splitter.section_overlap, splitter.sentence_search_limit = 50, 10
    assert list(splitter.split_pages([Page(0, 0, text)])) == before


def test_a_page_without_text_is_blank():
    pages = [Page(0, 0, "The procedure continues"), Page(1, 23, None), Page(2, 23, "to operate. Done.")]
    assert [(c.page_num, c.text) for c in SentenceTextSplitter().split_pages(pages)] == [
        (0, "The procedure continues to operate. Done.")]


def test_split_page_by_max_tokens():
    text = "The quick brown fox jumps. " * 40  # 241 tokens
    splitter = SentenceTextSplitter(max_tokens_per_section=50)
    pieces = list(splitter.split_page_by_max_tokens(3, text))
    assert len(pieces) > 1 and all(p.page_num == 3 for p in pieces)
    assert "".join(p.text for p in pieces) == text  # sentence boundaries exist: no duplication
    assert all(p.text.endswith(".") for p in pieces[:-1])  # cut just after the ending
    short = list(splitter.split_page_by_max_tokens(0, "Short."))
    assert short == [Chunk(page_num=0, text="Short.")]


def test_endoftext_is_ordinary_text():
    chunks = list(SentenceTextSplitter().split_pages([Page(0, 0, "A <|endoftext|> B.")]))
    assert [c.text for c in chunks] == ["A <|endoftext|> B."]


def test_images_follow_their_figure_placeholder():
    image = {"placeholder": '<figure id="1"></figure>'}
    page = Page(0, 0, 'Text before. <figure id="1"></figure> After.', images=[image])
    chunks = list(SentenceTextSplitter().split_pages([page]))
    assert chunks[0].images == [image] and chunks[-1].images == []


def test_simple_text_splitter():
    assert list(SimpleTextSplitter().split_pages([Page(0, 0, "  ")])) == []
    assert list(SimpleTextSplitter().split_pages([Page(0, 0, '{"a": 1}')])) == [Chunk(0, '{"a": 1}')]
    chunks = list(SimpleTextSplitter(max_object_length=4).split_pages([Page(0, 0, "abcdef"), Page(1, 6, "ghij")]))
    # As the reference: page_num is the slice index, not the page the characters come from.
    assert [(c.page_num, c.text) for c in chunks] == [(0, "abcd"), (1, "efgh"), (2, "ij")]
    one = list(SimpleTextSplitter().split_pages([Page(3, 0, '{"a": 1}')]))
    assert [c.page_num for c in one] == [0]


def test_bad_page_text_is_rejected():
    with pytest.raises(TypeError, match="Page 0"):
        list(SentenceTextSplitter().split_pages([Page(0, 0, b"bytes")]))  # type: ignore[arg-type]
