"""Character and rank metrics on hand-computed cases."""

import math

import pytest

from search.metrics import (
    char_scores,
    covered_length,
    merge_intervals,
    ndcg,
    reciprocal_rank,
    score_question,
    mean_scores,
)


def test_merge_intervals_joins_overlapping_and_touching_spans_and_drops_empty_ones():
    assert merge_intervals([(5, 10), (0, 3), (3, 4), (8, 12), (20, 20)]) == [(0, 4), (5, 12)]


def test_overlapping_chunks_count_shared_characters_once():
    # Reference A[10:30] (20 chars); chunks A[0:20] and A[15:35] overlap on A[15:20].
    # Retrieved characters: A[0:35] = 35 (not 20 + 20 = 40); all 20 reference chars found.
    scores = char_scores([("A", 0, 20), ("A", 15, 35)], [("A", 10, 30)])
    assert scores.recall == 1.0
    assert scores.precision == pytest.approx(20 / 35)
    assert scores.iou == pytest.approx(20 / 35)


def test_reference_spanning_two_chunks_is_found_half_then_whole():
    refs = [("A", 90, 110)]  # 20 characters, 10 in each chunk
    chunks = [("A", 0, 100), ("A", 100, 200)]
    one = score_question(chunks, refs, k=1, relevant_available=2)
    assert (one.recall, one.precision, one.iou) == pytest.approx((10 / 20, 10 / 100, 10 / 110))
    two = score_question(chunks, refs, k=2, relevant_available=2)
    assert (two.recall, two.precision, two.iou) == pytest.approx((1.0, 20 / 200, 20 / 200))
    assert one.mrr == two.mrr == 1.0
    assert one.ndcg == two.ndcg == pytest.approx(1.0)


def test_same_offsets_in_another_document_score_nothing():
    refs = [("A", 0, 50)]
    ranked = [("B", 0, 50), ("A", 0, 100)]
    first = score_question(ranked, refs, k=1, relevant_available=1)
    assert (first.recall, first.precision, first.iou, first.mrr, first.ndcg) == (0.0, 0.0, 0.0, 0.0, 0.0)
    both = score_question(ranked, refs, k=2, relevant_available=1)
    # R = B[0:50] + A[0:100] = 150 chars, T = 50, R∩T = 50.
    assert (both.recall, both.precision, both.iou) == pytest.approx((1.0, 50 / 150, 50 / 150))
    assert both.mrr == 0.5
    assert both.ndcg == pytest.approx(1 / math.log2(3))


def test_references_in_two_documents_and_overlapping_references():
    refs = [("A", 0, 10), ("A", 5, 15), ("B", 0, 10)]  # T = A[0:15] + B[0:10] = 25
    assert covered_length(refs) == 25
    scores = char_scores([("A", 10, 20), ("B", 0, 5)], refs)  # R = 15; R∩T = A[10:15] + B[0:5] = 10
    assert scores.recall == pytest.approx(10 / 25)
    assert scores.precision == pytest.approx(10 / 15)
    assert scores.iou == pytest.approx(10 / (15 + 25 - 10))


def test_ndcg_with_graded_positions_and_ideal_cut_by_available_relevant_chunks():
    refs = [("A", 0, 10), ("A", 100, 110)]
    ranked = [("A", 0, 20), ("A", 50, 60), ("A", 95, 105)]  # relevant, not, relevant
    dcg = 1 + 1 / math.log2(4)
    assert ndcg(ranked, refs, relevant_available=2) == pytest.approx(dcg / (1 + 1 / math.log2(3)))
    # Only one relevant chunk is said to exist, but two relevant hits came back (hits within
    # chunks can do that): the ideal is then two relevant hits in front, not one, and the
    # score stays below 1 (DCG 1.5 over the ideal 1 + 1/log2(3)); before, it was 1.5.
    assert ndcg(ranked, refs, relevant_available=1) == pytest.approx(dcg / (1 + 1 / math.log2(3)))
    assert ndcg(ranked[:1], refs, relevant_available=1) == 1.0
    assert ndcg(ranked[1:2], refs, relevant_available=1) == 0.0
    assert reciprocal_rank(ranked[1:], refs) == 0.5


def test_no_retrieved_chunk_gives_zero_precision_and_empty_reference_is_rejected():
    assert char_scores([], [("A", 0, 10)]).precision == 0.0
    with pytest.raises(ValueError, match="reference"):
        char_scores([("A", 0, 10)], [("A", 3, 3)])


def test_mean_scores_is_a_macro_average():
    refs = [("A", 0, 10)]
    a = score_question([("A", 0, 10)], refs, k=1, relevant_available=1)
    b = score_question([("B", 0, 10)], refs, k=1, relevant_available=1)
    assert mean_scores([a, b]) == pytest.approx({"recall": 0.5, "precision": 0.5, "iou": 0.5, "mrr": 0.5, "ndcg": 0.5})
