"""Coarse-to-fine search (``SearchIndex.search(within=...)``) on a hand-built store.

The fixture store holds two strategies of the same documents: ``para`` (paragraphs,
the coarse one) and ``sent`` (sentences, the fine one), embedded by a bag of words.
"""

import re

import pytest

from fixture_store import DOCS, MODEL_ID, bag_of_words, put_document
from search.engine import RRF_K, SearchError, SearchIndex, combine_with_parents
from search.evaluation import Question, Reference, evaluate, resolve_reference
from search.metrics import score_question

QUERY = "boats harbour ferry bread oven onions"
ALL = 100  # deeper than any strategy of the fixture: a whole ranking


@pytest.fixture
def index(store):
    idx = SearchIndex(store.path, MODEL_ID, embed=bag_of_words, context_chars=20)
    yield idx
    idx.close()


def key(hit):
    return hit.doc_id, hit.chunk_index


def overlaps(hit, region) -> bool:
    return hit.doc_id == region.doc_id and hit.char_start < region.char_end and hit.char_end > region.char_start


def parent_rank(hit, coarse) -> int | None:
    """The rank of the best coarse hit the fine hit shares a character with (None: none)."""
    return next((c.rank for c in coarse if overlaps(hit, c)), None)


@pytest.mark.parametrize("mode, k", [("vector", 3), ("keyword", 2)])
def test_fine_hits_come_only_from_the_top_coarse_hits_in_their_own_order(index, mode, k):
    coarse = index.search(QUERY, mode=mode, k=2, strategy="para")
    plain = index.search(QUERY, mode=mode, k=ALL, strategy="sent")
    hits = index.search(QUERY, mode=mode, k=k, strategy="sent", within="para", within_depth=2)
    assert len(hits) == k and len({key(h) for h in hits}) == k
    expected = [h for h in plain if parent_rank(h, coarse) is not None][:k]
    assert [key(h) for h in hits] == [key(h) for h in expected]  # the plain order, restricted
    assert [h.score for h in hits] == pytest.approx([h.score for h in expected])
    assert [h.rank for h in hits] == list(range(1, k + 1))
    for hit in hits:
        assert (hit.within, hit.parent_rank) == ("para", parent_rank(hit, coarse))
    if mode == "vector":  # plain search would have returned a sentence from outside the two coarse hits
        assert [key(h) for h in plain[:k]] != [key(h) for h in hits]


def test_hybrid_fuses_the_fine_rankings_restricted_to_the_candidates(index):
    coarse = index.search(QUERY, mode="hybrid", k=2, strategy="para")
    candidates = {key(h) for h in index.search(QUERY, mode="vector", k=ALL, strategy="sent")
                  if parent_rank(h, coarse) is not None}
    fused: dict = {}
    for mode in ("vector", "keyword"):
        ranking = [key(h) for h in index.search(QUERY, mode=mode, k=ALL, strategy="sent") if key(h) in candidates]
        for rank, chunk in enumerate(ranking, start=1):
            fused[chunk] = fused.get(chunk, 0.0) + 1 / (RRF_K + rank)
    hits = index.search(QUERY, mode="hybrid", k=3, strategy="sent", within="para", within_depth=2)
    assert [h.score for h in hits] == pytest.approx(sorted(fused.values(), reverse=True)[:3])
    assert all(h.score == pytest.approx(fused[key(h)]) for h in hits)


def test_returned_provenance_is_the_stored_fine_chunks(index):
    plain = {key(h): h for h in index.search(QUERY, mode="vector", k=ALL, strategy="sent")}
    for hit in index.search(QUERY, mode="hybrid", k=4, strategy="sent", within="para", within_depth=2):
        stored = plain[key(hit)]
        assert (hit.strategy, hit.text, hit.char_start, hit.char_end, hit.page_start, hit.page_end,
                hit.heading_path) == (stored.strategy, stored.text, stored.char_start, stored.char_end,
                                      stored.page_start, stored.page_end, stored.heading_path)
        text = DOCS[hit.doc_id]
        assert text[hit.char_start:hit.char_end] == hit.text
        assert hit.context_before == text[max(0, hit.char_start - 20):hit.char_start]


@pytest.mark.parametrize("rank_by", ["rrf", "product"])
def test_fine_chunks_ranked_with_their_coarse_parent(index, rank_by):
    coarse = index.search(QUERY, mode="vector", k=3, strategy="para")
    fine = [h for h in index.search(QUERY, mode="vector", k=ALL, strategy="sent") if parent_rank(h, coarse)]
    if rank_by == "rrf":
        expected = {key(h): 1 / (RRF_K + r) + 1 / (RRF_K + parent_rank(h, coarse)) for r, h in enumerate(fine, 1)}
    else:
        expected = {key(h): h.score * coarse[parent_rank(h, coarse) - 1].score for h in fine}
    hits = index.search(QUERY, mode="vector", k=4, strategy="sent", within="para", within_depth=3,
                        within_rank=rank_by)
    assert [h.score for h in hits] == pytest.approx(sorted(expected.values(), reverse=True)[:4])
    assert all(h.score == pytest.approx(expected[key(h)]) for h in hits)


def test_combine_with_parents_by_hand():
    fine = [(7, 0.9), (8, 0.8), (9, 0.7)]
    parents = {7: 3, 8: 1, 9: 2}
    assert combine_with_parents(fine, parents, [0.5, 0.4, 0.1], "fine") == fine
    assert combine_with_parents(fine, parents, [0.5, 0.4, 0.1], "rrf") == [
        (8, pytest.approx(1 / 62 + 1 / 61)), (7, pytest.approx(1 / 61 + 1 / 63)), (9, pytest.approx(1 / 63 + 1 / 62))]
    assert combine_with_parents(fine, parents, [0.5, 0.4, 0.1], "product") == [
        (8, pytest.approx(0.4)), (9, pytest.approx(0.28)), (7, pytest.approx(0.09))]
    # ties keep the fine order
    assert [i for i, _ in combine_with_parents(fine, {7: 2, 8: 1, 9: 1}, [0.5, 0.4], "rrf")] == [7, 8, 9]


def test_too_few_fine_chunks_deepen_the_coarse_ranking_to_k_distinct_hits(index):
    one = index.search(QUERY, mode="vector", k=1, strategy="para")
    inside = [h for h in index.search(QUERY, mode="vector", k=ALL, strategy="sent") if parent_rank(h, one)]
    assert len(inside) < 5  # the best paragraph alone holds fewer than k sentences
    hits = index.search(QUERY, mode="vector", k=5, strategy="sent", within="para", within_depth=1)
    assert len(hits) == 5 and len({key(h) for h in hits}) == 5
    assert max(h.parent_rank for h in hits) > 1
    every = index.search(QUERY, mode="vector", k=ALL, strategy="sent", within="para", within_depth=1)
    assert len(every) == sum(len(re.findall(r"[^.\s][^.]*\.", t)) for t in DOCS.values())  # the coarse ran out


def test_fine_chunks_count_when_they_share_a_character_with_a_coarse_hit(store):
    # "win": windows of 6 words, every 3: many straddle the paragraph boundary of boats.txt.
    from chunking.model import Chunk

    text = DOCS["boats.txt"]
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    chunks = [Chunk(text=text[words[i][0]:words[min(i + 6, len(words)) - 1][1]], char_start=words[i][0],
                    char_end=words[min(i + 6, len(words)) - 1][1], token_count=6) for i in range(0, len(words), 3)]
    sha = store.load_parsed("boats.txt").sha256
    store.replace_chunks("boats.txt", "win", chunks, config_hash="test", doc_sha256=sha)
    store.replace_embeddings("boats.txt", "win", MODEL_ID, [
        (i, c.text_sha256, v) for i, (c, v) in enumerate(zip(chunks, bag_of_words([c.text for c in chunks])))], {})
    idx = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    try:
        coarse, = idx.search("wind island ferry noon", mode="vector", k=1, strategy="para", doc_ids=["boats.txt"])
        expected = {i for i, c in enumerate(chunks)
                    if c.char_start < coarse.char_end and c.char_end > coarse.char_start}
        hits = idx.search("wind island ferry noon", mode="vector", k=len(expected), strategy="win", within="para",
                          within_depth=1, doc_ids=["boats.txt"])
    finally:
        idx.close()
    assert {h.chunk_index for h in hits} == expected
    assert any(chunks[i].char_start < coarse.char_start for i in expected)  # one straddles the boundary
    assert all(h.parent_rank == 1 for h in hits)


def test_document_and_folder_filters_apply_to_both_levels(index):
    hits = index.search("bread boats soup", mode="hybrid", k=4, strategy="sent", within="para", folder="kitchen")
    assert hits and all(h.doc_id.startswith("kitchen/") for h in hits)
    only = index.search("bread boats soup", mode="vector", k=3, strategy="sent", within="para", doc_ids=["boats.txt"])
    assert len(only) == 3 and {h.doc_id for h in only} == {"boats.txt"}
    assert index.search("zeppelin", mode="keyword", k=3, strategy="sent", within="para") == []


def test_within_itself_is_plain_search(index):
    # (hybrid fuses the two rankings of the candidates alone, so its scores are not plain search's)
    for mode in ("vector", "keyword"):
        plain = index.search(QUERY, mode=mode, k=3, strategy="sent")
        same = index.search(QUERY, mode=mode, k=3, strategy="sent", within="sent", within_depth=3)
        assert [(key(h), h.score) for h in same] == [(key(h), pytest.approx(h.score)) for h in plain]
        assert [h.parent_rank for h in same] == [1, 2, 3]


def test_bad_within_requests_are_named(index):
    with pytest.raises(SearchError, match="strategy 'nope'"):
        index.search("x", mode="keyword", within="nope")
    with pytest.raises(SearchError, match="within_rank must be one of"):
        index.search("x", mode="keyword", within="para", within_rank="best")
    with pytest.raises(SearchError, match="within_depth must be at least 1"):
        index.search("x", mode="keyword", within="para", within_depth=0)


def test_the_evaluation_scores_exactly_the_spans_search_returns(index):
    questions = [
        Question("q1", "When does the ferry leave the island?",
                 (Reference("boats.txt", "The ferry leaves at noon."),)),
        Question("q2", "How long to knead bread dough?", (Reference("kitchen/bread.md", "Knead the dough"),)),
    ]
    report = evaluate(index, questions, ks=(1, 3), mode="hybrid", strategies=["sent"], within="para",
                      within_depth=1, within_rank="rrf")
    assert report.mode == "hybrid,within=para@1/rrf"
    for k in (1, 3):
        scores = []
        for q in questions:
            refs = [resolve_reference(r, DOCS[r.doc]) for r in q.references]
            hits = index.search(q.question, mode="hybrid", k=3, strategy="sent", within="para", within_depth=1,
                                within_rank="rrf")
            available = sum(1 for h in index.search(q.question, mode="vector", k=ALL, strategy="sent")
                            if any(h.doc_id == d and h.char_start < e and h.char_end > s for d, s, e in refs))
            scores.append(score_question([(h.doc_id, h.char_start, h.char_end) for h in hits], refs, k, available))
        row = report.at(k)["sent"]
        assert row.recall == pytest.approx(sum(s.recall for s in scores) / 2)
        assert row.iou == pytest.approx(sum(s.iou for s in scores) / 2)
        assert row.mrr == pytest.approx(sum(s.mrr for s in scores) / 2)
    assert evaluate(index, questions, ks=(1,), mode="vector", strategies=["sent"], within="para").mode == \
        "vector,within=para@10"
