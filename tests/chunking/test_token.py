"""The ``token`` strategy and ``chunking.compat.lightrag.chunking_by_token_size`` (LightRAG's F)."""

from __future__ import annotations

import inspect
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunking import chunk_text, default_tokenizer
from chunking.compat import lightrag as L
from chunking.model import ParsedDocument
from chunking.strategies import get_strategy, strategy_names
from chunking.strategies.token import TokenConfig, TokenOffsets, chunk_token
from chunking.tokenizers import CharTokenizer


def reference_chunking_by_token_size(tokenizer, content, split_by_character=None, split_by_character_only=False,
                                     chunk_overlap_token_size=100, chunk_token_size=1200):
    """LightRAG's F as published (lightrag/operate.py), test-only, to compare against."""
    tokens = tokenizer.encode(content)
    results = []
    if split_by_character:
        new_chunks = []
        for chunk in content.split(split_by_character):
            _tokens = tokenizer.encode(chunk)
            if len(_tokens) > chunk_token_size:
                if split_by_character_only:
                    raise ValueError("over the limit")
                for start in range(0, len(_tokens), chunk_token_size - chunk_overlap_token_size):
                    new_chunks.append((min(chunk_token_size, len(_tokens) - start),
                                       tokenizer.decode(_tokens[start:start + chunk_token_size])))
            else:
                new_chunks.append((len(_tokens), chunk))
        for index, (n, chunk) in enumerate(new_chunks):
            results.append({"tokens": n, "content": chunk.strip(), "chunk_order_index": index})
    else:
        for index, start in enumerate(range(0, len(tokens), chunk_token_size - chunk_overlap_token_size)):
            results.append({"tokens": min(chunk_token_size, len(tokens) - start),
                            "content": tokenizer.decode(tokens[start:start + chunk_token_size]).strip(),
                            "chunk_order_index": index})
    return results


def _without_spans(out):
    return [{k: v for k, v in d.items() if k != "_source_span"} for d in out]


TEXT = "The quick brown fox jumps over the lazy dog. " * 40 + "\n\nA second paragraph follows here.\n\n" + "tail " * 30

# Multi-byte UTF-8: accents, CJK, emoji (4 bytes, split over tokens by cl100k), combining marks.
MULTIBYTE = "naïve café 日本語のテキストです。 😀🎉👩‍👩‍👧 Straße e\u0301 " * 25


# --------------------------------------------------------------------------- compat: the reference, reproduced


def test_signature_matches_lightrag():
    params = inspect.signature(L.chunking_by_token_size).parameters
    assert list(params) == ["tokenizer", "content", "split_by_character", "split_by_character_only",
                            "chunk_overlap_token_size", "chunk_token_size"]
    assert [p.default for p in list(params.values())[2:]] == [None, False, 100, 1200]


@pytest.mark.parametrize("tok", [CharTokenizer(), default_tokenizer()], ids=["char", "cl100k"])
@pytest.mark.parametrize("size,overlap", [(50, 10), (37, 0), (7, 6), (1200, 100)])
def test_compat_equals_the_reference_on_text_no_window_splits_a_character(tok, size, overlap):
    out = L.chunking_by_token_size(tok, TEXT, chunk_overlap_token_size=overlap, chunk_token_size=size)
    assert _without_spans(out) == reference_chunking_by_token_size(tok, TEXT, chunk_overlap_token_size=overlap,
                                                                   chunk_token_size=size)
    for d in out:
        assert ("_source_span" in d) == bool(d["content"])  # a whitespace-only window has no span
        if d["content"]:
            assert TEXT[d["_source_span"]["start"]:d["_source_span"]["end"]] == d["content"]


def test_compat_keeps_the_references_duplicate_tail_windows():
    # 10 tokens, size 4, overlap 2: starts 0,2,4,6,8 -> the window at 8 lies inside the one at 6.
    out = L.chunking_by_token_size(CharTokenizer(), "abcdefghij", chunk_overlap_token_size=2, chunk_token_size=4)
    assert [d["content"] for d in out] == ["abcd", "cdef", "efgh", "ghij", "ij"]
    assert [d["tokens"] for d in out] == [4, 4, 4, 4, 2]


@pytest.mark.parametrize("sep,only", [("\n\n", False), ("\n\n", True), (". ", False)])
def test_compat_split_by_character_equals_the_reference(sep, only):
    tok = default_tokenizer()
    text = "Short one.\n\n\n\nAnother short paragraph. With two sentences.\n\n   \n\n" + ("long " * 90) + "\n\nend"
    size = 100 if only else 40
    out = L.chunking_by_token_size(tok, text, sep, only, 5, size)
    assert _without_spans(out) == reference_chunking_by_token_size(tok, text, sep, only, 5, size)
    assert any(d["content"] == "" and "_source_span" not in d for d in out) == (sep == "\n\n")
    for d in out:
        if d["content"]:
            assert text[d["_source_span"]["start"]:d["_source_span"]["end"]] == d["content"]


def test_compat_split_by_character_only_raises_lightrags_error(caplog):
    text = "ok\n\n" + "word " * 50
    with caplog.at_level(logging.WARNING, logger="lightrag"):
        with pytest.raises(L.ChunkTokenLimitExceededError) as err:
            L.chunking_by_token_size(CharTokenizer(), text, "\n\n", True, 0, 100)
    assert err.value.chunk_tokens == 250 and err.value.chunk_token_limit == 100
    assert err.value.chunk_preview == ("word " * 50)[:120]
    assert any(r.name == "lightrag" and "exceeds token limit" in r.message for r in caplog.records)


def test_compat_rejects_overlap_not_below_size():
    with pytest.raises(ValueError, match="must be <"):
        L.chunking_by_token_size(CharTokenizer(), "abc", chunk_overlap_token_size=5, chunk_token_size=5)
    with pytest.raises(ValueError, match="non-negative"):
        L.chunking_by_token_size(CharTokenizer(), "abc", chunk_overlap_token_size=-1, chunk_token_size=5)


def test_compat_fixes_the_references_garbled_characters_and_says_where_each_came_from():
    tok = default_tokenizer()
    ref = reference_chunking_by_token_size(tok, MULTIBYTE, chunk_overlap_token_size=3, chunk_token_size=11)
    assert any("\ufffd" in d["content"] for d in ref)  # the reference decodes half characters
    out = L.chunking_by_token_size(tok, MULTIBYTE, chunk_overlap_token_size=3, chunk_token_size=11)
    assert len(out) == len(ref) and [d["tokens"] for d in out] == [d["tokens"] for d in ref]
    for d in out:
        assert "\ufffd" not in d["content"]
        assert MULTIBYTE[d["_source_span"]["start"]:d["_source_span"]["end"]] == d["content"]


def test_compat_logs_as_lightrag_including_the_algorithms_under_it(caplog):
    # P degrading to R warns from inside the algorithms; a compat caller sees it under "lightrag".
    with caplog.at_level(logging.DEBUG):
        L.chunking_by_paragraph_semantic(CharTokenizer(), "Some text. " * 20, 50, blocks_path=None)
    assert caplog.records and {r.name for r in caplog.records} == {"lightrag"}
    caplog.clear()
    # The same algorithm called natively keeps its own logger.
    with caplog.at_level(logging.DEBUG):
        chunk_text("Some text. " * 20, "paragraph", tokenizer=CharTokenizer(), chunk_token_size=50,
                   chunk_overlap_token_size=5)
    assert caplog.records and all(r.name.startswith("chunking.") for r in caplog.records)


# --------------------------------------------------------------------------- native: the `token` strategy


def test_token_is_registered_with_its_config():
    assert "token" in strategy_names()
    spec = get_strategy("token")
    assert spec.config_model is TokenConfig
    assert spec.default_config().chunk_token_size == 1200 and spec.default_config().chunk_overlap_token_size == 100
    with pytest.raises(ValueError, match="must be smaller"):
        TokenConfig(chunk_token_size=10, chunk_overlap_token_size=10)


def _check(text, chunks, tok, size):
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text and c.verbatim
        assert c.text and c.text == c.text.strip()
        assert c.token_count == len(tok.encode(c.text)) <= size
    covered = set()
    for c in chunks:
        covered.update(range(c.char_start, c.char_end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_native_windows_are_exact_and_stop_at_the_end():
    tok = default_tokenizer()
    chunks = chunk_text(TEXT, "token", chunk_token_size=50, chunk_overlap_token_size=10)
    _check(TEXT, chunks, tok, 50)
    ref = reference_chunking_by_token_size(tok, TEXT, chunk_overlap_token_size=10, chunk_token_size=50)
    assert [c.text for c in chunks] == [d["content"] for d in ref[: len(chunks)]]
    # Adjacent chunks share their overlap.
    assert all(a.char_end > b.char_start for a, b in zip(chunks, chunks[1:]))
    # The reference's last window lies inside the one before; the native stops at the end.
    short = chunk_text("abcdefghij", "token", tokenizer=CharTokenizer(), chunk_token_size=4, chunk_overlap_token_size=2)
    assert [c.text for c in short] == ["abcd", "cdef", "efgh", "ghij"]


def test_native_multibyte_characters_split_by_tokens_are_never_garbled():
    tok = default_tokenizer()
    offsets = TokenOffsets(MULTIBYTE, tok)
    # cl100k really does cut inside characters here: a token boundary that is not a character boundary.
    bounds = {offsets.char_at(i) for i in range(len(offsets) + 1)}
    assert len(bounds) < len(offsets) + 1
    chunks = chunk_text(MULTIBYTE, "token", chunk_token_size=11, chunk_overlap_token_size=3)
    _check(MULTIBYTE, chunks, tok, 11)


def test_native_split_by_character():
    tok = default_tokenizer()
    text = "Para one.\n\nPara two is here.\n\n\n\n" + "long " * 90
    chunks = chunk_text(text, "token", chunk_token_size=40, chunk_overlap_token_size=5, split_by_character="\n\n")
    _check(text, chunks, tok, 40)
    assert [c.text for c in chunks[:2]] == ["Para one.", "Para two is here."]


def test_native_split_by_character_drops_only_the_separator_itself():
    # Split as the reference splits (str.split): a non-whitespace separator is in no chunk,
    # every other character is, in both a segment within the cap and a windowed one.
    tok = default_tokenizer()
    text = "第一句。第二句很长" + "很长的句子" * 30 + "。x。。y"
    chunks = chunk_text(text, "token", chunk_token_size=20, chunk_overlap_token_size=0, split_by_character="。")
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text and "。" not in c.text
        assert c.token_count == len(tok.encode(c.text)) <= 20
    covered = set().union(*(range(c.char_start, c.char_end) for c in chunks))
    assert [ch for i, ch in enumerate(text) if i not in covered] == ["。"] * text.count("。")


def test_native_split_by_character_only_fails_the_document_with_a_clear_error():
    doc = ParsedDocument.from_text("ok\n\n" + "word " * 50, doc_id="notes.txt")
    config = TokenConfig(chunk_token_size=20, chunk_overlap_token_size=0, split_by_character="\n\n",
                         split_by_character_only=True)
    with pytest.raises(ValueError, match=r"notes\.txt.*char 4 has \d+ tokens > chunk_token_size 20"):
        chunk_token(doc, config, default_tokenizer())


def test_native_empty_and_whitespace_text():
    assert chunk_text("", "token") == []
    assert chunk_text(" \n\t ", "token", chunk_token_size=2, chunk_overlap_token_size=0) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(st.characters(codec="utf-8", categories=("L", "M", "N", "P", "S", "Zs", "Cc")), max_size=300),
    size=st.integers(4, 40),
    overlap_share=st.floats(0, 0.9),
)
def test_property_exact_offsets_and_counts(text, size, overlap_share):
    tok = default_tokenizer()
    overlap = int(size * overlap_share)
    chunks = chunk_text(text, "token", chunk_token_size=size, chunk_overlap_token_size=overlap)
    _check(text, chunks, tok, size)
    out = L.chunking_by_token_size(tok, text, chunk_overlap_token_size=overlap, chunk_token_size=size)
    ref = reference_chunking_by_token_size(tok, text, chunk_overlap_token_size=overlap, chunk_token_size=size)
    assert [d["tokens"] for d in out] == [d["tokens"] for d in ref]
    for d, r in zip(out, ref):
        if "\ufffd" not in r["content"]:
            assert d["content"] == r["content"]
        if d["content"]:
            assert text[d["_source_span"]["start"]:d["_source_span"]["end"]] == d["content"]


@pytest.mark.parametrize(("text", "pieces"), [(" café", ["caf", "é"]), ("Über café ", ["Ü", "ber", "caf", "é"])])
def test_a_one_token_window_over_the_cap_once_stripped_is_cut_by_characters(text, pieces):
    # " café" is one token, "café" two ("ca" + "fé"): at a cap of 1 the window could give back
    # no token, and "café" was emitted with 2 tokens, against the cap, whose only exception
    # is a single character (found by fuzzing). Its text is now cut into characters within the cap.
    tok = default_tokenizer()
    chunks = chunk_text(text, "token", chunk_token_size=1, chunk_overlap_token_size=0)
    assert [c.text for c in chunks] == pieces
    _check(text, chunks, tok, 1)
