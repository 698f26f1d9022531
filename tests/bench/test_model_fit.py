"""bench/model_fit.py: the share of chunks the model reads only in part, per strategy."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from model_fit import chunks_over_limit_per_strategy, table  # noqa: E402


def test_counts_chunks_and_documents_over_the_limit_per_strategy():
    rows = [("recursive", "a.md", "x" * 5), ("recursive", "a.md", "x" * 2), ("recursive", "b.md", "x" * 9),
            ("simple", "a.md", "x")]
    results = chunks_over_limit_per_strategy(rows, lambda texts: [len(t) for t in texts], 4)
    assert results == [("recursive", 3, 2, 2, 2), ("simple", 1, 0, 1, 0)]
    assert table(results, 4).splitlines()[2] == "| recursive | 3 | 2 | 66.7% | 2 of 2 |"
