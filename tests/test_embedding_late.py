"""Late chunking in the embedder: ``embed_spans`` pools a window's contextualised word-piece
vectors over one span (chunking/embedding.py)."""

import numpy as np
import pytest

from chunking.embedding import span_weights

WINDOW = ("The harbour master keeps the tide tables in a drawer. "
          "Boats leave the quay at dawn and come back before dark. "
          "The fish market opens when the first boat is in.")
BOATS = WINDOW.index("Boats")
BOATS_END = WINDOW.index("The fish")  # "Boats ... dark. " (the trailing space has no word piece)


def test_span_weights_count_the_pieces_that_overlap_the_span_and_the_special_tokens():
    # [CLS] "ab" "cd" "##ef" "gh" [SEP]: offsets as a fast tokenizer gives them, specials at (0, 0).
    offsets = [(0, 0), (0, 2), (3, 5), (5, 7), (8, 10), (0, 0)]
    special = [1, 0, 0, 0, 0, 1]
    assert span_weights(offsets, special, 3, 7).tolist() == [1, 0, 1, 1, 0, 1]
    assert span_weights(offsets, special, 4, 6).tolist() == [1, 0, 1, 1, 0, 1]  # pieces cut by the span count
    assert span_weights(offsets, special, 0, 10).tolist() == [1] * 6  # the whole window: the model's own pooling
    assert span_weights(offsets, special, 2, 3).tolist() == [1] * 6  # no piece in the span: the whole window
    assert span_weights(offsets, special, 12, 20).tolist() == [1] * 6  # truncated away: the whole window


@pytest.fixture(scope="module")
def embedder():
    from chunking.embedding import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(batch_size=8, precision="float32")


def manual_pool(embedder, window: str, start: int, end: int) -> np.ndarray:
    """The reference: sentence-transformers' own token vectors, averaged over the chosen pieces, normalised."""
    tokens = embedder._model.encode([window], output_value="token_embeddings", convert_to_numpy=False)[0]
    encoded = embedder._model.tokenizer(window, return_offsets_mapping=True, return_special_tokens_mask=True,
                                        truncation=True, max_length=embedder.max_seq_length)
    keep = [i for i, ((s, e), sp) in enumerate(zip(encoded["offset_mapping"], encoded["special_tokens_mask"]))
            if sp or (s < end and e > start)]
    assert 2 < len(keep) < len(encoded["input_ids"])  # a strict part of the window, specials included
    vector = tokens[keep].float().mean(0).numpy()
    return vector / np.linalg.norm(vector)


@pytest.mark.model
def test_a_span_covering_the_window_is_the_models_own_vector(embedder):
    reference = embedder._model.encode([WINDOW], normalize_embeddings=True, convert_to_numpy=True)[0]
    [whole] = embedder.embed_spans([(WINDOW, 0, len(WINDOW))])
    assert np.abs(whole - reference).max() < 1e-5
    assert np.abs(whole - embedder.embed([WINDOW])[0]).max() < 1e-5


@pytest.mark.model
def test_only_the_spans_own_word_pieces_are_pooled(embedder):
    [late] = embedder.embed_spans([(WINDOW, BOATS, BOATS_END)])
    assert np.abs(late - manual_pool(embedder, WINDOW, BOATS, BOATS_END)).max() < 1e-5
    assert abs(np.linalg.norm(late) - 1) < 1e-5


@pytest.mark.model
def test_a_spans_vector_depends_on_its_context_and_neighbours_differ(embedder):
    sentence = WINDOW[BOATS:BOATS_END].strip()
    other = f"Taxes are due in April. {sentence} Trains run every hour."
    start = other.index("Boats")
    harbour, elsewhere, first, alone = embedder.embed_spans([
        (WINDOW, BOATS, BOATS_END), (other, start, start + len(sentence)), (WINDOW, 0, BOATS), (sentence, 0, len(sentence)),
    ])
    assert float(harbour @ elsewhere) < 0.999  # the same words in other company: another vector
    assert float(harbour @ first) < 0.95  # two neighbouring spans of one window are told apart
    assert float(harbour @ alone) > 0.6  # yet it still describes its own words
    assert np.abs(alone - embedder.embed([sentence])[0]).max() < 1e-5


@pytest.mark.model
def test_order_duplicates_truncation_and_bad_spans(embedder):
    long_window = "word " * 600 + "tail"  # far beyond the model's 256 word pieces
    spans = [(WINDOW, BOATS, BOATS_END), (WINDOW, 0, BOATS), (WINDOW, BOATS, BOATS_END),
             (long_window, len(long_window) - 4, len(long_window))]
    before = embedder.texts_embedded
    vectors = embedder.embed_spans(spans)
    assert embedder.texts_embedded - before == 2  # one forward per distinct window, however many spans
    assert np.array_equal(vectors[0], vectors[2]) and not np.array_equal(vectors[0], vectors[1])
    # Spans pooled from one forward equal the same spans pooled one call each.
    for (window, start, end), vector in zip(spans[:2], vectors[:2]):
        assert np.abs(embedder.embed_spans([(window, start, end)])[0] - vector).max() < 1e-5
    # A span the truncation cut off gets the window's vector as the model read it.
    assert np.abs(vectors[3] - embedder.embed([long_window])[0]).max() < 1e-5
    assert embedder.embed_spans([]).shape == (0, embedder.dimension)
    with pytest.raises(ValueError, match=r"span \(5, 400\) is not inside a window of"):
        embedder.embed_spans([(WINDOW, 5, 400)])
