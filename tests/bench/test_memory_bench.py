"""bench/bench_memory.py: the shapes of text it measures and one measurement."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bench_memory import SHAPES, measure_one, text_of  # noqa: E402


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_is_cut_to_the_length_asked(shape):
    text = text_of(shape, 20_000)
    assert len(text) == 20_000
    expected = {"lines": "w0\nw1\nw2", "one": "xxxx", "tiny": "W0. W1. W2."}
    if shape in expected:
        assert text.startswith(expected[shape])


def test_one_measurement_chunks_the_document_and_reports_its_peak_growth():
    row = measure_one("semantic", "tiny", 30_000, model=False)
    assert row["chars"] == 30_000 and row["chunks"] > 0
    assert row["growth_kib"] >= 0 and row["base_kib"] > 0 and row["seconds"] > 0
