"""Eval sets, reference resolution, the evaluation over a store, the recall guard."""

import json
from pathlib import Path

import numpy as np
import pytest

from chunking.parsers import parse_document
from fixture_store import DOCS, MODEL_ID, bag_of_words
from resources.documents import clean_partition_key
from search.engine import SearchIndex
from search.metrics import QuestionScores
from search.evaluation import (
    EvalSetError,
    Question,
    Reference,
    evaluate,
    EvalReport,
    lead_support,
    leaders,
    leaders_line,
    load_eval_set,
    markdown_table,
    parse_eval_set,
    previous_recall,
    recall_drops,
    record_report,
    resolve_reference,
)

REPO = Path(__file__).resolve().parents[2]


def test_examples_eval_set_references_are_verbatim_in_the_parsed_documents():
    questions = load_eval_set(REPO / "eval" / "examples.jsonl")
    assert len(questions) >= 10
    docs = set()
    for q in questions:
        for ref in q.references:
            path = REPO / "examples" / "docs" / ref.doc
            assert clean_partition_key(ref.doc) == ref.doc, "doc must be the partition key"
            text = parse_document(path, ref.doc).text
            doc, start, end = resolve_reference(ref, text)
            assert text[start:end] == ref.excerpt
            docs.add(doc)
    assert len(docs) == 4  # every example document is asked about


@pytest.mark.parametrize("line, message", [
    ("not json", "expected"),
    ('{"id": "a", "question": "q", "references": []}', "at least one reference"),
    ('{"id": "a", "question": "q", "references": [{"doc": "x"}]}', "excerpt"),
    ('{"id": "a", "question": "q", "references": [{"excerpt": "x"}]}', "'doc'"),
])
def test_malformed_eval_lines_are_named(line, message):
    with pytest.raises(EvalSetError, match=rf"set\.jsonl:2: .*{message}"):
        parse_eval_set('{"id": "ok", "question": "q", "references": [{"doc": "d", "excerpt": "e"}]}\n' + line,
                       "set.jsonl")


def test_duplicate_ids_are_rejected():
    line = json.dumps({"id": "a", "question": "q", "references": [{"doc": "d", "char_start": 0, "char_end": 2}]})
    with pytest.raises(EvalSetError, match="duplicate id 'a'"):
        parse_eval_set(line + "\n" + line)


def test_resolve_reference_by_excerpt_or_offsets():
    text = "abc def abc"
    assert resolve_reference(Reference("d", excerpt="abc"), text) == ("d", 0, 3)  # first occurrence
    assert resolve_reference(Reference("d", char_start=4, char_end=7), text) == ("d", 4, 7)
    with pytest.raises(ValueError, match="not found verbatim"):
        resolve_reference(Reference("d", excerpt="xyz"), text)
    with pytest.raises(ValueError, match="outside"):
        resolve_reference(Reference("d", char_start=5, char_end=50), text)
    with pytest.raises(ValueError, match="do not hold"):
        resolve_reference(Reference("d", excerpt="def", char_start=0, char_end=3), text)
    with pytest.raises(ValueError, match="not in the store"):
        resolve_reference(Reference("gone", excerpt="abc"), None)


def test_recall_drops_more_than_two_points_only():
    previous = {"a": 0.80, "b": 0.80, "c": 0.5}
    current = {"a": 0.78, "b": 0.7799, "c": 0.9, "new": 0.1}
    assert recall_drops(previous, current) == {"b": (0.80, 0.7799)}


def test_evaluate_scores_each_strategy_and_skips_unresolvable_questions(store):
    index = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    sentence = "Knead the dough for ten minutes."
    questions = [
        Question("q1", sentence, (Reference("kitchen/bread.md", excerpt=sentence),)),
        Question("q2", "missing", (Reference("kitchen/bread.md", excerpt="not in the text"),)),
    ]
    report = evaluate(index, questions, ks=(1, 3))
    assert report.skipped == {"q2": "excerpt not found verbatim in 'kitchen/bread.md': 'not in the text'"}
    sent = report.at(1)["sent"]
    # The question is the sentence chunk itself: found first, exactly.
    assert (sent.questions, sent.recall, sent.precision, sent.iou, sent.mrr, sent.ndcg) == (1, 1.0, 1.0, 1.0, 1.0, 1.0)
    para = report.at(1)["para"]
    text = DOCS["kitchen/bread.md"]
    paragraph = text.split("\n\n")[0]
    assert para.recall == 1.0 and para.precision == pytest.approx(len(sentence) / len(paragraph))
    assert report.at(3)["sent"].precision < 1.0  # three sentences retrieved, one relevant
    assert (sent.chunks, para.chunks) == (9, 5)
    assert "| sent | 1 | 1.000 | 1.000 | 1.000 |" in markdown_table(report, ks=(1,))
    index.close()


def test_means_over_a_subset_are_the_scores_of_those_questions_evaluated_alone(store):
    index = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    questions = [
        Question("bread", "Knead the dough for ten minutes.",
                 (Reference("kitchen/bread.md", excerpt="Knead the dough for ten minutes."),)),
        Question("soup", "onions butter", (Reference("kitchen/soup.md", excerpt="Add stock and simmer."),)),
        Question("ferry", "ferry noon", (Reference("boats.txt", excerpt="The ferry leaves at noon."),)),
    ]
    report = evaluate(index, questions, ks=(1, 3))
    for subset in (["bread"], ["soup", "ferry"]):
        alone = evaluate(index, [q for q in questions if q.id in subset], ks=(1, 3))
        for k in (1, 3):
            means = report.means_over(k, subset)
            assert set(means) == {"sent", "para"}
            for strategy, row in alone.at(k).items():
                assert means[strategy] == pytest.approx(
                    {"recall": row.recall, "precision": row.precision, "iou": row.iou, "mrr": row.mrr,
                     "ndcg": row.ndcg})
    # The whole set averages to the report's own rows; the subsets really differ.
    whole = report.means_over(1, [q.id for q in questions])
    assert whole["sent"]["recall"] == pytest.approx(report.at(1)["sent"].recall)
    assert report.means_over(1, ["bread"])["sent"] != report.means_over(1, ["soup", "ferry"])["sent"]
    index.close()


def _report(recall_iou: dict[str, list[tuple[float, float]]]) -> EvalReport:
    """A report at k=5 with these per-question (recall, IoU) scores, questions q0, q1, ..."""
    return EvalReport(rows=[], per_question={
        (name, 5): {f"q{i}": QuestionScores(5, r, 0.0, iou, 0.0, 0.0) for i, (r, iou) in enumerate(scores)}
        for name, scores in recall_iou.items()})


def test_lead_support_is_the_share_of_resampled_question_sets_on_which_a_row_leads_on_both():
    dominant = _report({"cand": [(0.9, 0.3)] * 4, "coarse": [(0.8, 0.1)] * 4, "small": [(0.5, 0.2)] * 4})
    support = lead_support(dominant, 5, ["cand"], resamples=50)["cand"]
    assert support.share == 1.0 and support.recall_margin == pytest.approx((0.1, 0.1))
    assert support.iou_margin == pytest.approx((0.1, 0.1))
    # A tie counts as at or above (as in leaders); a row below on IoU never leads.
    tied = _report({"cand": [(0.8, 0.3)] * 3, "coarse": [(0.8, 0.1)] * 3, "worse": [(0.7, 0.4)] * 3})
    assert lead_support(tied, 5, ["cand"], resamples=20)["cand"].share == 0.0
    assert lead_support(tied, 5, ["cand"], others=["coarse"], resamples=20)["cand"].share == 1.0
    # A lead on the mean that rests on one question: the share is each resample's leaders() reading.
    fragile = {"cand": [(1.0, 0.2), (0.6, 0.2), (0.6, 0.2), (0.6, 0.2), (0.7, 0.2)],
               "coarse": [(0.5, 0.1), (0.7, 0.1), (0.7, 0.1), (0.7, 0.1), (0.7, 0.1)]}
    support = lead_support(_report(fragile), 5, ["cand"], resamples=400, seed=3)["cand"]
    draws = np.random.default_rng(3).integers(0, 5, size=(400, 5))
    on_both = [leaders({name: (np.mean([fragile[name][i][0] for i in draw]), np.mean([fragile[name][i][1] for i in draw]))
                        for name in fragile}).on_both == ["cand"] for draw in draws]
    assert 0.0 < support.share < 1.0 and support.share == pytest.approx(np.mean(on_both))
    assert support.recall_margin[0] < 0 < support.recall_margin[1]  # the lead does not survive every draw
    with pytest.raises(ValueError, match="no rows to compare against"):
        lead_support(_report({"cand": [(1.0, 1.0)]}), 5, ["cand"], resamples=5)


def test_history_round_trip_gives_the_previous_recall(store):
    index = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    q = Question("q1", "ferry noon", (Reference("boats.txt", excerpt="The ferry leaves at noon."),))
    report = evaluate(index, [q], ks=(5,))
    index.close()
    assert previous_recall(store, eval_set_sha256="x", mode="vector", model_id=MODEL_ID) == {}
    # The same set under two paths (relative, then absolute): one history.
    for run_id, when, path in (("r1", "2026-01-01 00:00:00", "e.jsonl"), ("r2", "2026-01-02 00:00:00", "/p/e.jsonl")):
        record_report(store, report, run_id=run_id, eval_set=path, eval_set_sha256="x", model_id=MODEL_ID,
                      evaluated_at=when)
    with store.connect() as con:
        con.execute("UPDATE retrieval_eval SET recall = 0.25 WHERE run_id = 'r2' AND strategy = 'sent' AND k = 5")
    assert previous_recall(store, eval_set_sha256="x", mode="vector", model_id=MODEL_ID) == {
        "para": 1.0, "sent": 0.25}
    # The file edited in place: another set, no previous recall to fall from.
    assert previous_recall(store, eval_set_sha256="y", mode="vector", model_id=MODEL_ID) == {}
    assert previous_recall(store, eval_set_sha256="x", mode="hybrid", model_id=MODEL_ID) == {}


# Two reference rows that trade recall for IoU (as the shipped strategies do), a candidate aimed
# at both, and an exploration row with the best IoU of all.
LEADER_SCORES = {"coarse": (0.7483, 0.055), "small": (0.557, 0.099), "late": (0.7484, 0.105), "fine": (0.614, 0.110)}


def test_leaders_on_recall_and_iou_at_once_compare_unrounded_scores():
    # Against every other row: "late" has the best recall, "fine" the best IoU: nobody leads on both.
    found = leaders(LEADER_SCORES)
    assert found.on_both == [] and found.best_recall == ("late", 0.7484) and found.best_iou == ("fine", 0.110)
    # Against the reference rows only, "late" leads on both; it prints like "coarse" at three
    # decimals (0.748) and is compared unrounded: 0.0001 less and it does not lead.
    found = leaders(LEADER_SCORES, others={"coarse", "small"})
    assert found.on_both == ["late"]
    assert found.best_recall == ("coarse", 0.7483) and found.best_iou == ("small", 0.099)
    assert leaders({**LEADER_SCORES, "late": (0.7482, 0.105)}, others={"coarse", "small"}).on_both == []
    # A tie is "at or above"; a reference row that beats the other reference rows on both leads too.
    assert leaders({"a": (0.5, 0.1), "b": (0.5, 0.1)}).on_both == ["a", "b"]
    assert leaders({"a": (0.6, 0.2), "b": (0.5, 0.1)}, others={"a", "b"}).on_both == ["a"]
    assert leaders({"alone": (0.1, 0.1)}).on_both == []  # nothing to compare against
    with pytest.raises(ValueError, match="no rows to compare against"):
        leaders(LEADER_SCORES, others={"absent"})


def test_leaders_line_names_the_rows_and_the_bests():
    assert leaders_line(LEADER_SCORES, 5) == (
        "no row is at or above the best of the others on recall@5 and IoU@5 at once "
        "(best recall@5: late 0.7484; best IoU@5: fine 0.1100)")
    assert leaders_line(LEADER_SCORES, 5, others={"coarse", "small"}, against="the shipped rows", digits=3) == (
        "at or above the shipped rows on recall@5 and IoU@5 at once: late (0.748 / 0.105) "
        "(best recall@5: coarse 0.748; best IoU@5: small 0.099)")
    # Rows tied exactly at the best are all named (they print alike; the first alone hid the tie).
    tied = {"paragraph": (0.9794, 0.3), "recursive": (0.9794, 0.2), "token": (0.5, 0.3), "semantic": (0.97941, 0.1)}
    assert leaders(tied).best_recall_names == ("semantic",)
    tied["semantic"] = (0.9794, 0.1)
    found = leaders(tied)
    assert found.best_recall_names == ("paragraph", "recursive", "semantic")
    assert found.best_iou_names == ("paragraph", "token")
    assert leaders_line(tied, 5).endswith(
        "(best recall@5: paragraph, recursive, semantic 0.9794; best IoU@5: paragraph, token 0.3000)")
