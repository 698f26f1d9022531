"""The ``semantic`` strategy with the real bundled all-MiniLM-L6-v2 (offline).

One small text with two clearly different topics; the split must land between them.
"""

from __future__ import annotations

import numpy as np
import pytest

from chunking.model import ParsedDocument
from chunking.strategies.semantic import SemanticConfig, chunk_semantic
from chunking.tokenizers import TiktokenTokenizer

pytestmark = pytest.mark.model

PASTA = [
    "Bring a large pot of salted water to a rolling boil.",
    "Add the spaghetti and stir so the noodles do not stick together.",
    "Cook the pasta for nine minutes until it is al dente.",
    "Meanwhile, fry garlic in olive oil and add crushed tomatoes for the sauce.",
    "Drain the pasta, toss it with the tomato sauce and grate parmesan on top.",
]
ASTRONOMY = [
    "Jupiter is the largest planet in the solar system.",
    "Its Great Red Spot is a storm larger than the Earth.",
    "The planet has dozens of moons, including the volcanic Io.",
    "Galileo discovered the four largest moons with an early telescope in 1610.",
    "Astronomers study the gas giant's atmosphere with space probes.",
]


@pytest.fixture(scope="module")
def embedder():
    from chunking.embedding import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


@pytest.mark.parametrize("window_mode", ["combine", "reembed"])
def test_real_model_splits_between_the_two_topics(embedder, window_mode):
    text = " ".join(PASTA) + "\n\n" + " ".join(ASTRONOMY)
    doc = ParsedDocument.from_text(text)
    chunks = chunk_semantic(doc, SemanticConfig(window_mode=window_mode), TiktokenTokenizer(), embedder)
    assert [c.text for c in chunks] == [" ".join(PASTA), " ".join(ASTRONOMY)]
    assert all(doc.text[c.char_start : c.char_end] == c.text for c in chunks)


def test_fast_batching_and_bfloat16_match_sentence_transformers(embedder):
    texts = PASTA + ASTRONOMY + ["short", "a much longer sentence " * 30]
    reference = embedder._model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    fast = embedder.embed(texts)
    assert fast.shape == (len(texts), embedder.dimension) and fast.dtype == np.float32
    assert np.min(np.sum(fast * reference, axis=1)) > 0.9999
    embedder.precision = "bfloat16"
    try:
        half = embedder.embed(texts)
    finally:
        embedder.precision = "float32"
    assert np.min(np.sum(half * reference, axis=1)) > 0.999
    assert embedder.embed([]).shape == (0, embedder.dimension)


def test_int8_precision_splits_between_the_two_topics_too(embedder):
    text = " ".join(PASTA) + "\n\n" + " ".join(ASTRONOMY)
    embedder.precision = "int8"
    try:
        chunks = chunk_semantic(ParsedDocument.from_text(text), SemanticConfig(), TiktokenTokenizer(), embedder)
    finally:
        embedder.precision = "float32"
    assert [c.text for c in chunks] == [" ".join(PASTA), " ".join(ASTRONOMY)]
