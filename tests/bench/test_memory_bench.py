"""bench/bench_memory.py: the shapes of text it measures and one measurement."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_memory  # noqa: E402
from bench_memory import SHAPES, measure_one, text_of  # noqa: E402


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chars", [20, 400, 20_000])
def test_each_shape_is_cut_to_the_length_asked(shape, chars):
    text = text_of(shape, chars)
    assert len(text) == chars
    expected = {"lines": "w0\nw1\nw2", "one": "xxxx", "tiny": "W0. W1. W2."}
    if shape in expected:
        assert text.startswith(expected[shape][:chars])


def test_the_growth_is_the_peak_during_the_chunking_even_below_an_earlier_peak(monkeypatch):
    # The process peaks first (as the setup of a measurement can), then the strategy
    # allocates less than that peak: its own 64 MiB must still be measured.
    import chunking.strategies as strategies

    earlier = np.ones(256 * 2**20 // 8)
    del earlier

    class Allocating:
        def parse_config(self, values):
            return None

        def chunk(self, doc, config, tokenizer, embedder):
            block = np.ones(64 * 2**20 // 8)
            return [block.sum()]

    monkeypatch.setattr(strategies, "get_strategy", lambda name: Allocating())
    row = bench_memory.measure_one("allocating", "one", 1000, model=False)
    assert row["chunks"] == 1 and not row["over_max_chunks"]
    assert 60 * 1024 <= row["growth_kib"] < 200 * 1024, row


def test_one_semantic_measurement_chunks_through_a_recording_embedder():
    row = measure_one("semantic", "tiny", 30_000, model=False)
    assert row["chars"] == 30_000 and row["chunks"] > 0 and not row["over_max_chunks"]
