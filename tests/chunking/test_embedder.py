"""The embedder's fast path: length-sorted batches under two limits, run by parallel workers.

Each speed option must give the vectors the model's own forward gives, in input order.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from chunking.embedding import _token_budget_batches

TEXTS = [
    "Bring a large pot of salted water to a rolling boil.",
    "Jupiter is the largest planet in the solar system.",
    "ok",
    "A much longer sentence about rivers, tides and the moon " * 12,
    "Galileo discovered the four largest moons with an early telescope in 1610.",
    "x",
    "Drain the pasta, toss it with the tomato sauce and grate parmesan on top.",
] * 9  # 63 texts: several batches of mixed widths


@pytest.mark.parametrize(
    ("lengths", "batch_size", "batch_tokens"),
    [
        ([5, 3, 9, 1, 7, 7, 2, 30, 4], 4, None),
        ([5, 3, 9, 1, 7, 7, 2, 30, 4], 100, 20),
        ([5, 3, 9, 1, 7, 7, 2, 30, 4], 2, 1000),
        ([50, 60], 10, 10),  # each text alone exceeds the budget: one text per batch
        ([4] * 10, 3, 8),
    ],
)
def test_batches_cover_every_text_once_within_both_limits(lengths, batch_size, batch_tokens):
    lengths = np.array(lengths)
    order = np.argsort(lengths, kind="stable")
    batches = list(_token_budget_batches(order, lengths, batch_size, batch_tokens))
    assert np.array_equal(np.concatenate(batches), order)
    for rows in batches:
        assert 1 <= len(rows) <= batch_size
        if batch_tokens is not None and len(rows) > 1:
            assert len(rows) * lengths[rows].max() <= batch_tokens


def test_token_budget_binds_before_the_text_count():
    lengths = np.array([10] * 8)
    batches = list(_token_budget_batches(np.arange(8), lengths, 64, 30))
    assert [len(b) for b in batches] == [3, 3, 2]


@pytest.fixture(scope="module")
def embedder():
    from chunking.embedding import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(batch_size=8)


def _embed(embedder, **settings):
    saved = {name: getattr(embedder, name) for name in settings}
    for name, value in settings.items():
        setattr(embedder, name, value)
    try:
        return embedder.embed(TEXTS)
    finally:
        for name, value in saved.items():
            setattr(embedder, name, value)


@pytest.mark.model
def test_sorted_batches_equal_sentence_transformers_encode(embedder):
    reference = embedder._model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    for settings in (dict(workers=1), dict(workers=2), dict(batch_tokens=None), dict(batch_tokens=40)):
        assert np.abs(_embed(embedder, **settings) - reference).max() < 1e-5, settings


@pytest.mark.model
def test_workers_keep_input_order_and_restore_torch_threads(embedder):
    import torch

    threads = torch.get_num_threads()
    one = _embed(embedder, workers=1)
    several = _embed(embedder, workers=3)
    assert torch.get_num_threads() == threads
    assert np.abs(one - several).max() < 1e-5
    # Identical texts land in different batches and workers; they must get identical vectors.
    assert np.abs(several[0] - several[7]).max() < 1e-5
    assert np.abs(several[3] - several[3 + 7 * 8]).max() < 1e-5


@pytest.mark.model
def test_concurrent_embeds_from_two_threads_get_their_own_vectors(embedder):
    expected = _embed(embedder, workers=1)
    results: dict[int, np.ndarray] = {}

    def embed_reversed(key: int) -> None:
        results[key] = embedder.embed(TEXTS[::-1])

    threads = [threading.Thread(target=embed_reversed, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for vectors in results.values():
        assert np.abs(vectors[::-1] - expected).max() < 1e-5
