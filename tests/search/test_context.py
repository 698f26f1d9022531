"""Embedding text with context: the pure builder, and the rows the embeddings asset embeds."""

import hashlib

import numpy as np
import pytest

from fixture_store import DOCS, put_document
from resources.store import StoredChunk
from search.context import (
    ContextRow, EmbedContext, context_text, context_window, document_title, embed_rows, embedding_text, late_key,
    late_tiles,
    neighbours, with_context,
)


def test_embedding_text_prepends_title_and_heading_path():
    assert embedding_text("Body.", title="Guide", heading_path=["Setup", "Linux"]) == "Guide > Setup > Linux\n\nBody."
    # A first heading equal to the title is not repeated; blank parts and extra spaces go.
    assert embedding_text("Body.", title="Guide", heading_path=["Guide", " ", "Run  it"]) == "Guide > Run it\n\nBody."
    assert embedding_text("Body.") == "Body."


def test_document_title_is_the_first_heading_else_the_file_stem():
    assert document_title("  Getting started ", "getting-started.md", "getting-started.md") == "Getting started"
    assert document_title(None, "notes/field-guide.txt", "notes/field-guide.txt") == "field-guide"


def test_with_context_changes_the_embedded_text_and_its_hash_not_the_stored_chunk(store):
    rows = [StoredChunk(*r) for r in [(0, DOCS["boats.txt"].split("\n\n")[0], "sha-of-chunk", 10, 0, 80)]]
    [row] = with_context(store, "boats.txt", "para", rows)
    assert row.text == "boats > Top\n\n" + rows[0].text
    assert row.text_sha256 == hashlib.sha256(row.text.encode()).hexdigest() != rows[0].text_sha256
    assert (row.chunk_index, row.char_start, row.char_end) == (0, 0, 80)
    assert store.load_chunks("boats.txt", "para")[0].text == rows[0].text  # the store is untouched


# -- neighbour context -----------------------------------------------------------------

def words(text: str) -> int:
    """A stand-in for the model's tokenizer: one word piece per whitespace-separated word."""
    return len(text.split())


class WordModel:
    """count_model_tokens / max_seq_length like the embedder's, with 2 special tokens."""

    def __init__(self, max_seq_length: int) -> None:
        self.max_seq_length = max_seq_length

    def count_model_tokens(self, text: str) -> int:
        return words(text) + 2


DOC = "one two three four five six seven. CHUNK text here. eight nine ten eleven twelve"
SPAN = (DOC.index("CHUNK"), DOC.index("eight") - 1)  # "CHUNK text here."


def test_neighbours_split_the_budget_in_whole_words_around_the_span():
    before, after = neighbours(DOC, *SPAN, 6, words)
    assert (before, after) == ("five six seven. ", " eight nine ten")
    assert DOC[SPAN[0] - len(before):SPAN[1] + len(after)] == before + DOC[SPAN[0]:SPAN[1]] + after  # contiguous
    assert neighbours(DOC, *SPAN, 0, words) == ("", "")


def test_a_side_at_the_document_edge_leaves_its_share_to_the_other():
    start, end = 0, len("one two")
    before, after = neighbours(DOC, start, end, 4, words)
    assert before == "" and after == " three four five six"
    before, after = neighbours(DOC, DOC.index("eleven"), len(DOC), 4, words)
    assert (before, after) == ("here. eight nine ten ", "")


def test_neighbours_never_take_a_word_cut_by_the_look_back_limit():
    doc = "x" * 500 + " tail. CHUNK"
    before, _ = neighbours(doc, doc.index("CHUNK"), len(doc), 1, words)  # looks back 12 characters only
    assert before == "tail. "
    before, _ = neighbours(doc, doc.index("CHUNK"), len(doc), 2, words)
    assert before == "tail. "  # the 500 x's are cut by the look-back: not a whole word, never taken


def test_context_text_adds_neighbours_within_the_models_max_sequence():
    text = DOC[SPAN[0]:SPAN[1]]
    out = context_text(text, title="Guide", doc_text=DOC, span=SPAN, neighbour_tokens=100,
                       count_tokens=WordModel(14).count_model_tokens, max_tokens=14)
    # 14 - 2 specials - "Guide" - 3 chunk words leaves 8 words of neighbours, 4 before and 4 after
    assert out == "Guide\n\nfour five six seven. CHUNK text here. eight nine ten eleven"
    assert WordModel(14).count_model_tokens(out) == 14
    # the neighbour budget caps below the model's limit, and a chunk that fills the model gets none
    assert context_text(text, doc_text=DOC, span=SPAN, neighbour_tokens=2, count_tokens=WordModel(99).count_model_tokens,
                        max_tokens=99) == "seven. CHUNK text here. eight"
    assert context_text(text, doc_text=DOC, span=SPAN, neighbour_tokens=50, count_tokens=WordModel(5).count_model_tokens,
                        max_tokens=5) == text
    with pytest.raises(ValueError, match="count_tokens and max_tokens"):
        context_text(text, doc_text=DOC, span=SPAN, neighbour_tokens=5)


def test_embed_context_switches_and_code_versions():
    assert not EmbedContext() and EmbedContext(headings=True) and EmbedContext(neighbour_tokens=8)
    assert EmbedContext.of(True) == EmbedContext(headings=True) and EmbedContext.of(False) == EmbedContext()
    assert EmbedContext(True, 0).code_version_suffix() == "+context"  # as before the option existed
    assert EmbedContext(True, 256).code_version_suffix() == "+context+neighbours256"
    assert EmbedContext(False, 64).code_version_suffix() == "+neighbours64" and EmbedContext().code_version_suffix() == ""
    with pytest.raises(ValueError, match="neighbour_tokens must be >= 0"):
        EmbedContext(neighbour_tokens=-1)


def test_with_neighbours_the_embedded_text_holds_the_neighbours_the_stored_chunk_does_not(store):
    first, second = store.load_chunks("boats.txt", "sent")[:2]
    [row] = with_context(store, "boats.txt", "sent", [second], EmbedContext(neighbour_tokens=6), WordModel(256))
    assert row.text == "boats before dark. Fishermen mend their nets on the quay.\n\nWind turns every"
    assert first.text.endswith("boats before dark.")  # the end of the sentence before, and the start of the one after
    assert row.text_sha256 == hashlib.sha256(row.text.encode()).hexdigest() != second.text_sha256
    assert (row.chunk_index, row.char_start, row.char_end) == (second.chunk_index, second.char_start, second.char_end)
    assert store.load_chunks("boats.txt", "sent")[1] == second  # the store is untouched
    [both] = with_context(store, "boats.txt", "sent", [second], EmbedContext(True, 6), WordModel(256))
    assert both.text == "boats\n\n" + row.text
    with pytest.raises(ValueError, match="needs the embedder"):
        with_context(store, "boats.txt", "sent", [second], EmbedContext(neighbour_tokens=6))


@pytest.mark.parametrize("context", [EmbedContext(neighbour_tokens=6), EmbedContext(late_tokens=15)],
                         ids=["neighbours", "late"])
def test_a_changed_neighbour_changes_the_cache_key_an_unchanged_one_does_not(store, context):
    def key(text: str) -> str:
        put_document(store, "boats.txt", text)
        chunk = next(c for c in store.load_chunks("boats.txt", "sent") if c.text == "Fishermen mend their nets on the quay.")
        [row] = with_context(store, "boats.txt", "sent", [chunk], context, WordModel(256))
        return row.text_sha256

    original = key(DOCS["boats.txt"])
    assert key(DOCS["boats.txt"]) == original  # an unchanged document: the same keys, all cache hits
    assert key(DOCS["boats.txt"].replace("before dark", "after dark")) != original  # the sentence before changed
    assert key(DOCS["boats.txt"].replace("The ferry leaves at noon.", "The ferry is late.")) == original  # far away


# -- late chunking ---------------------------------------------------------------------

def test_late_window_is_the_chunk_centred_in_its_neighbours_and_pools_its_own_span():
    text = DOC[SPAN[0]:SPAN[1]]
    window, start, end = context_window(text, title="Guide", doc_text=DOC, span=SPAN, neighbour_tokens=14,
                                        count_tokens=WordModel(256).count_model_tokens, max_tokens=14)
    assert window == "Guide\n\nfour five six seven. CHUNK text here. eight nine ten eleven"
    assert window[start:end] == text
    # At the document's edge the other side takes the whole budget; the span is still the chunk's.
    first = DOC[:len("one two")]
    window, start, end = context_window(first, doc_text=DOC, span=(0, len(first)), neighbour_tokens=8,
                                        count_tokens=WordModel(256).count_model_tokens, max_tokens=8)
    assert (window, window[start:end]) == ("one two three four five six", first)
    # A chunk longer than the window gets no neighbours: the window is its own text (the model
    # truncates it at its max sequence, as it would truncate the chunk embedded alone).
    assert context_window(text, doc_text=DOC, span=SPAN, neighbour_tokens=3,
                          count_tokens=WordModel(256).count_model_tokens, max_tokens=3) == (text, 0, len(text))


def test_with_late_chunking_rows_carry_the_window_its_span_and_a_key_of_both(store):
    second = store.load_chunks("boats.txt", "sent")[1]
    # 15 word pieces: the chunk's 7 words, 2 special tokens and 6 words of neighbours.
    [row] = with_context(store, "boats.txt", "sent", [second], EmbedContext(late_tokens=15), WordModel(256))
    assert row.text == "boats before dark. Fishermen mend their nets on the quay.\n\nWind turns every"
    assert row.text[slice(*row.pooled_span)] == second.text
    assert row.text_sha256 == late_key(row.text, *row.pooled_span)
    assert row.text_sha256 not in {hashlib.sha256(row.text.encode()).hexdigest(), second.text_sha256}
    assert (row.chunk_index, row.char_start, row.char_end) == (second.chunk_index, second.char_start, second.char_end)
    # The window never exceeds the model's max sequence, whatever embed_late asks for.
    [capped] = with_context(store, "boats.txt", "sent", [second], EmbedContext(late_tokens=256), WordModel(10))
    assert WordModel(10).count_model_tokens(capped.text) <= 10
    [headed] = with_context(store, "boats.txt", "sent", [second], EmbedContext(True, late_tokens=16), WordModel(256))
    assert headed.text == "boats\n\n" + row.text and headed.text[slice(*headed.pooled_span)] == second.text
    assert late_key("a b", 0, 1) != late_key("a b", 2, 3)  # the same window, another span: another key


class Recorder:
    """An embedder of 2-d vectors that records its calls: ``whole`` for every whole text,
    ``pooled`` for every late-chunked span."""

    dimension = 2

    def __init__(self, whole, pooled):
        self.whole, self.pooled, self.calls = np.float32(whole), np.float32(pooled), []

    def embed(self, texts):
        self.calls.append(("embed", list(texts)))
        return np.tile(self.whole, (len(texts), 1))

    def embed_spans(self, windows):
        self.calls.append(("spans", list(windows)))
        return np.tile(self.pooled, (len(windows), 1))


def test_embed_rows_pools_late_rows_and_embeds_the_others_whole():
    plain = StoredChunk(0, "plain", "p", 1, 0, 5)
    late = ContextRow(1, "left CHUNK right", "k", 1, 6, 11, pooled_span=(5, 10))
    recorder = Recorder(whole=[1.0, 1.0], pooled=[2.0, 2.0])
    vectors = embed_rows(recorder, [late, plain])
    assert vectors.tolist() == [[2.0, 2.0], [1.0, 1.0]]
    assert recorder.calls == [("embed", ["plain"]), ("spans", [("left CHUNK right", 5, 10)])]


def test_a_blended_late_row_mixes_in_its_own_text_vector_by_weight_and_is_normalised():
    blended = ContextRow(1, "left CHUNK right", "k", 1, 6, 11, pooled_span=(5, 10), own_text="T\n\nCHUNK", blend=0.25)
    unblended = ContextRow(2, "left CHUNK right", "k2", 1, 6, 11, pooled_span=(5, 10))
    recorder = Recorder(whole=[0.0, 1.0], pooled=[1.0, 0.0])
    vectors = embed_rows(recorder, [blended, unblended])
    expected = np.array([0.75, 0.25]) / np.hypot(0.75, 0.25)  # (1 - w) late + w own, then unit length
    assert np.allclose(vectors[0], expected) and np.isclose(np.linalg.norm(vectors[0]), 1.0)
    assert vectors[1].tolist() == [1.0, 0.0]  # no blend: the late vector as it was
    assert recorder.calls == [("spans", [("left CHUNK right", 5, 10)] * 2), ("embed", ["T\n\nCHUNK"])]


def test_blended_late_rows_carry_their_own_text_and_a_key_of_window_span_weight_and_text(store):
    second = store.load_chunks("boats.txt", "sent")[1]
    [late] = with_context(store, "boats.txt", "sent", [second], EmbedContext(True, late_tokens=16), WordModel(256))
    [half] = with_context(store, "boats.txt", "sent", [second], EmbedContext(True, late_tokens=16, late_blend=0.5),
                          WordModel(256))
    [third] = with_context(store, "boats.txt", "sent", [second], EmbedContext(True, late_tokens=16, late_blend=0.3),
                           WordModel(256))
    # The same window and span; the own text is the chunk as +ctx embeds it alone (title, then text).
    assert (half.text, half.pooled_span) == (late.text, late.pooled_span)
    assert half.own_text == "boats\n\n" + second.text and half.blend == 0.5
    assert late.own_text is None and late.blend == 0.0
    # Unblended keys are what they were before blending existed (their cached vectors stay valid).
    assert late.text_sha256 == late_key(late.text, *late.pooled_span)
    assert half.text_sha256 == late_key(half.text, *half.pooled_span, half.own_text, 0.5)
    assert len({late.text_sha256, half.text_sha256, third.text_sha256}) == 3  # another weight: another vector
    [tiled] = with_context(store, "boats.txt", "sent", [second],
                           EmbedContext(late_tokens=256, late_tiled=True, late_blend=0.5), WordModel(256))
    assert tiled.own_text == second.text and tiled.blend == 0.5  # no headings: the chunk's text alone


def test_late_chunking_options_are_checked():
    assert EmbedContext(late_tokens=256) and EmbedContext(late_tokens=256).code_version_suffix() == "+late256"
    assert EmbedContext(True, late_tokens=128).code_version_suffix() == "+context+late128"
    with pytest.raises(ValueError, match="late_tokens must be >= 0"):
        EmbedContext(late_tokens=-1)
    with pytest.raises(ValueError, match="late chunking and neighbour context exclude each other"):
        EmbedContext(neighbour_tokens=64, late_tokens=256)
    assert EmbedContext(True, late_tokens=256, late_blend=0.5).code_version_suffix() == "+context+late256+blend0.5"
    with pytest.raises(ValueError, match="late_blend needs late_tokens"):
        EmbedContext(True, late_blend=0.5)
    for weight in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"late_blend must be in \[0, 1\)"):
            EmbedContext(late_tokens=256, late_blend=weight)


def test_late_tiles_share_windows_of_consecutive_chunks_within_the_budget():
    doc = "one two three. four five. six seven eight. nine"
    chunks = [(t, doc.index(t), doc.index(t) + len(t)) for t in ("one two three.", "four five.", "six seven eight.", "nine")]
    count = WordModel(256).count_model_tokens
    tiles = late_tiles(chunks, doc, count_tokens=count, max_tokens=9)  # 7 words + 2 specials per window
    assert [w for w, _, _ in tiles] == ["one two three. four five.", "one two three. four five.",
                                        "six seven eight. nine", "six seven eight. nine"]
    assert all(w[s:e] == text for (w, s, e), (text, _, _) in zip(tiles, chunks))
    assert all(count(w) <= 9 for w, _, _ in tiles)
    # A chunk that alone exceeds the window has its own; a title and the first chunk's headings lead it.
    [(alone, s, e), (next_window, _, _)] = late_tiles(chunks[2:], doc, count_tokens=count, max_tokens=3)
    assert (alone[s:e], next_window) == ("six seven eight.", "nine")
    titled = late_tiles(chunks[:2], doc, count_tokens=count, max_tokens=20, title="Doc", heading_paths=[["Intro"], []])
    assert titled[0][0] == titled[1][0] == "Doc > Intro\n\none two three. four five."
    # Chunks that are not verbatim spans (or overlap) are joined by a newline.
    changed = [("ONE two three.", 0, 14), chunks[1]]
    assert late_tiles(changed, doc, count_tokens=count, max_tokens=20)[0][0] == "ONE two three.\nfour five."


def test_tiled_late_rows_and_their_keys(store):
    rows = store.load_chunks("boats.txt", "sent")
    tiled = with_context(store, "boats.txt", "sent", rows, EmbedContext(late_tokens=256, late_tiled=True),
                         WordModel(256))
    assert len({r.text for r in tiled}) == 1 and tiled[0].text == DOCS["boats.txt"]  # one window for the document
    assert [r.text[slice(*r.pooled_span)] for r in tiled] == [r.text for r in rows]
    assert len({r.text_sha256 for r in tiled}) == len(rows)  # one key per span
    assert EmbedContext(late_tokens=256, late_tiled=True).code_version_suffix() == "+late256tiled"
    with pytest.raises(ValueError, match="late_tiled needs late_tokens"):
        EmbedContext(late_tiled=True)
