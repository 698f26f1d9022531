"""Vector, keyword and hybrid search over a real DuckDB store; index upkeep on add/change/delete."""

import re

import pytest

from search.engine import (
    SearchError,
    SearchIndex,
    extension_path,
    ground,
    grounding_verdict,
    keyword_text,
    not_covered,
    reciprocal_rank_fusion,
)
from fixture_store import DOCS, MODEL_ID, bag_of_words, put_document


@pytest.fixture
def index(store):
    idx = SearchIndex(store.path, MODEL_ID, embed=bag_of_words, context_chars=30)
    yield idx
    idx.close()


def test_extensions_ship_in_their_packages():
    for name in ("vss", "fts"):
        path = extension_path(name)
        assert path.name == f"{name}.duckdb_extension" and path.is_file()


def test_vector_hit_is_located_in_its_document_with_its_context(index):
    hits = index.search("boats harbour dark", mode="vector", k=2, strategy="sent")
    top = hits[0]
    assert (top.strategy, top.rank, top.doc_id) == ("sent", 1, "boats.txt")
    assert top.text == "The harbour fills with boats before dark."
    text = DOCS["boats.txt"]
    assert text[top.char_start:top.char_end] == top.text
    assert top.context_before == text[max(0, top.char_start - 30):top.char_start]
    assert top.context_after == text[top.char_end:top.char_end + 30]
    assert top.score == pytest.approx(1.0 - 0.0, abs=0.35) and top.score > hits[1].score
    assert (top.page_start, top.page_end) == (0, 0)
    para = index.search("boats harbour dark", mode="vector", k=1, strategy="para")[0]
    assert para.heading_path == ["Top"]


def test_keyword_search_is_bm25_with_stemming(index):
    hits = index.search("knead", mode="keyword", k=3, strategy="sent")
    assert [h.text for h in hits] == ["Knead the dough for ten minutes."]
    # Porter stemming: "baking" matches "Bake".
    assert index.search("baking", mode="keyword", k=3, strategy="sent")[0].text.startswith("Bake the loaf")
    assert index.search("zeppelin", mode="keyword", k=3) == []


def test_keyword_terms_are_what_keyword_search_can_match(index):
    # Stop words and punctuation never reach the index: a query of only those has no terms,
    # which the CLI says instead of a bare "no hits".
    assert index.keyword_terms("The of and, to!") == []
    assert index.search("The of and, to!", mode="keyword", k=3) == []
    assert index.keyword_terms("The cats, running!") == ["cats", "running"]
    assert index.keyword_terms("Été") == ["ete"]


def test_keyword_text_splits_cjk_runs_into_bigrams():
    assert keyword_text("用同一把密钥") == " 用同 同一 一把 把密 密钥 "
    assert keyword_text("RSA 密钥签名, 3 keys") == "RSA  密钥 钥签 签名 , 3 keys"
    assert keyword_text("a 字 b") == "a  字  b"  # a one-character run stays a term
    assert keyword_text("ファイルを保存") == " ファ ァイ イル ルを を保 保存 "  # kana and kanji alike
    assert keyword_text("Größe, no CJK here.") == "Größe, no CJK here."


MULTILINGUAL = (
    "通常来说用同一把密钥签名及加密并不是个好主意。这个算法只在特定的情况下使用。\n\n"
    "这是一份将密钥与用户标识相联系的签名。通常不应删除这样的签名。\n\n"
    "ファイルを保存して終了するには :wq とタイプします。\n\n"
    "Размер фрагмента текста зависит от модели.\n\n"
    "DuckDB 1.5.5 ships the fts extension."
)


def test_keyword_search_finds_cjk_cyrillic_and_digits(store):
    # fts's default tokenizer deleted every non a-z character: none of these queries matched anything.
    put_document(store, "multi.txt", MULTILINGUAL)
    idx = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    try:
        def top(query):
            hits = idx.search(query, mode="keyword", k=3, strategy="para")
            return hits[0].text if hits else None

        paragraphs = MULTILINGUAL.split("\n\n")
        assert top("为什么不建议用同一把密钥既签名又加密") == paragraphs[0]  # no spaces in the query either
        assert top("能不能删除自身签名") == paragraphs[1]
        assert top("保存して終了するコマンド") == paragraphs[2]
        assert top("фрагмента") == paragraphs[3]
        assert top("1.5.5") == paragraphs[4]
        # Latin search is as before: stemming, and a word absent from every chunk finds nothing.
        assert idx.search("baking", mode="keyword", k=1, strategy="sent")[0].text.startswith("Bake the loaf")
        assert idx.search("zeppelin", mode="keyword", k=3) == []
    finally:
        idx.close()


def test_hybrid_fuses_both_rankings(index):
    hits = index.search("ferry noon", mode="hybrid", k=3, strategy="sent")
    assert hits[0].text == "The ferry leaves at noon."
    # Both lists rank it first: 2 / (60 + 1).
    assert hits[0].score == pytest.approx(2 / 61)


def test_all_strategies_and_filters(index):
    hits = index.search("bread flour", mode="vector", k=2)
    assert {h.strategy for h in hits} == {"para", "sent"}
    assert sum(h.strategy == "sent" for h in hits) == 2
    only = index.search("bread flour", mode="vector", k=5, strategy="sent", doc_ids=["boats.txt"])
    assert only and {h.doc_id for h in only} == {"boats.txt"}
    folder = index.search("onions", mode="keyword", k=5, folder="kitchen/")
    assert folder and {h.doc_id for h in folder} <= {"kitchen/bread.md", "kitchen/soup.md"}
    # A folder or document id that names nothing stored is a mistake, said as such (not "no hits").
    with pytest.raises(SearchError, match="no stored document under the folder 'garden'"):
        index.search("onions", mode="keyword", k=5, folder="garden")
    with pytest.raises(SearchError, match="no document 'garden.txt'"):
        index.search("onions", mode="keyword", k=5, doc_ids=["boats.txt", "garden.txt"])
    assert index.search("onions", mode="keyword", k=5, folder="kitchen", doc_ids=["boats.txt"]) == []


def test_bad_requests_are_named(index):
    with pytest.raises(SearchError, match="strategy 'nope'"):
        index.search("x", strategy="nope")
    with pytest.raises(SearchError, match="mode"):
        index.search("x", mode="fuzzy")
    no_model = SearchIndex(index.db_path, MODEL_ID)
    with pytest.raises(SearchError, match="embedding model"):
        no_model.search("x", mode="vector")
    with pytest.raises(SearchError, match="no chunkyard database"):
        SearchIndex(index.db_path.parent / "missing.duckdb", MODEL_ID).search("x", mode="keyword")


def test_index_follows_documents_added_changed_and_deleted(index, store):
    assert index.search("onions", mode="keyword", k=1, strategy="sent")[0].doc_id == "kitchen/soup.md"
    builds = index.builds
    index.search("onions", mode="keyword", k=1)
    assert index.builds == builds  # nothing changed: no rebuild

    put_document(store, "garden.txt", "Tomatoes ripen in the greenhouse. Water the onions at dawn.")
    docs = {h.doc_id for h in index.search("onions", mode="keyword", k=5, strategy="sent")}
    assert docs == {"kitchen/soup.md", "garden.txt"}
    assert index.search("greenhouse tomatoes", mode="vector", k=1, strategy="sent")[0].doc_id == "garden.txt"

    put_document(store, "garden.txt", "Roses climb the fence. Prune them in March.")
    assert {h.doc_id for h in index.search("onions", mode="keyword", k=5)} == {"kitchen/soup.md"}
    assert index.search("greenhouse", mode="keyword", k=5) == []
    assert index.search("prune roses", mode="hybrid", k=1, strategy="sent")[0].doc_id == "garden.txt"

    store.delete_document("garden.txt")
    assert all(h.doc_id != "garden.txt" for h in index.search("prune roses fence", mode="hybrid", k=10))
    assert index.builds == builds + 3


def test_hnsw_index_agrees_with_exact_search_and_filters_still_give_k(store):
    exact = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    hnsw = SearchIndex(store.path, MODEL_ID, embed=bag_of_words, vector_index="hnsw")
    for query in ("boats harbour", "bread oven crust", "soup stock"):
        a = exact.search(query, mode="vector", k=3, strategy="sent")
        b = hnsw.search(query, mode="vector", k=3, strategy="sent")
        assert (a[0].doc_id, a[0].chunk_index) == (b[0].doc_id, b[0].chunk_index)
        assert [h.score for h in a] == pytest.approx([h.score for h in b])  # ties may swap ids
    filtered = hnsw.search("bread", mode="vector", k=3, strategy="sent", folder="kitchen")
    assert len(filtered) == 3 and all(h.doc_id.startswith("kitchen/") for h in filtered)


def test_reciprocal_rank_fusion():
    fused = reciprocal_rank_fusion([[(1, 0.9), (2, 0.8)], [(2, 5.0), (3, 4.0)]], k=3)
    assert fused == [(2, pytest.approx(1 / 62 + 1 / 61)), (1, pytest.approx(1 / 61)), (3, pytest.approx(1 / 62))]


def test_grounding_verdict_and_claims(index):
    assert grounding_verdict([0.69, 0.5], 0.7) == (False, 0.69)
    assert grounding_verdict([0.7], 0.7) == (True, 0.7)
    assert grounding_verdict([], 0.7) == (False, 0.0)
    results = {g.strategy: g for g in ground(index, "The ferry leaves at noon.", threshold=0.7, k=2)}
    assert set(results) == {"para", "sent"}
    assert results["sent"].grounded and results["sent"].score == pytest.approx(1.0, abs=1e-5)
    assert len(results["sent"].evidence) == 2
    unsupported = ground(index, "Quantum chromodynamics of gluons", threshold=0.7, strategy="sent")
    assert [g.grounded for g in unsupported] == [False]
    assert unsupported[0].to_json()["verdict"] == "unsupported"


# -- overlap-aware top k ----------------------------------------------------------------

def test_not_covered_skips_hits_inside_better_ones_and_keeps_distinct_ones():
    ranked = [("a", 0, 100), ("a", 50, 150), ("a", 10, 60), ("b", 0, 100), ("a", 100, 200), ("a", 200, 200)]
    # ("a", 50, 150) is half inside the first: skipped at 0.5, kept at 0.6; ("a", 10, 60) is wholly inside;
    # another document's span is never covered; ("a", 100, 200) touches the first only at its edge.
    assert not_covered(ranked, 0.5) == [0, 3, 4, 5]
    assert not_covered(ranked, 0.6) == [0, 1, 3, 4, 5]
    assert not_covered(ranked, 1.0) == [0, 1, 3, 4, 5]  # only hits wholly inside kept ones go
    # covered by the union of two kept hits, though by neither alone
    assert not_covered([("a", 0, 60), ("a", 50, 110), ("a", 30, 90)], 0.9) == [0, 1]
    assert not_covered([], 0.5) == []


def put_windows(store, doc_id: str, text: str, width: int, step: int) -> None:
    """Overlapping word windows of ``text`` as strategy "win" (each ``width`` words, every ``step``)."""
    from chunking.model import Chunk

    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    chunks = [Chunk(text=text[words[i][0]:words[min(i + width, len(words)) - 1][1]], char_start=words[i][0],
                    char_end=words[min(i + width, len(words)) - 1][1], token_count=width)
              for i in range(0, len(words), step)]
    sha = store.load_parsed(doc_id).sha256
    store.replace_chunks(doc_id, "win", chunks, config_hash="test", doc_sha256=sha)
    vectors = bag_of_words([c.text for c in chunks])
    store.replace_embeddings(doc_id, "win", MODEL_ID, [(i, c.text_sha256, v) for i, (c, v) in enumerate(zip(chunks, vectors))], {})


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_search_with_skip_covered_returns_k_distinct_regions(store, mode):
    text = "boats harbour boats harbour boats harbour quay nets wind ferry noon island bread flour"
    put_document(store, "dense.txt", text)
    put_windows(store, "dense.txt", text, width=4, step=1)  # every window overlaps the next by 3 words
    idx = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    try:
        plain = idx.search("boats harbour", mode=mode, k=3, strategy="win", doc_ids=["dense.txt"])
        distinct = idx.search("boats harbour", mode=mode, k=3, strategy="win", doc_ids=["dense.txt"], skip_covered=0.5)
    finally:
        idx.close()
    assert len(plain) == len(distinct) == 3
    assert distinct[0].chunk_index == plain[0].chunk_index  # the best hit is never skipped
    assert [h.rank for h in distinct] == [1, 2, 3]
    for i, hit in enumerate(distinct):
        for better in distinct[:i]:
            shared = max(0, min(hit.char_end, better.char_end) - max(hit.char_start, better.char_start))
            assert shared < 0.5 * (hit.char_end - hit.char_start)
    def covered(hits):
        return len(set().union(*(range(h.char_start, h.char_end) for h in hits)))
    assert covered(distinct) > covered(plain)  # the plain top 3 are mostly the same words


def test_skip_covered_must_be_a_fraction(index):
    for bad in (0, -0.1, 1.5):
        with pytest.raises(SearchError, match="skip_covered must be in"):
            index.search("boats", mode="keyword", skip_covered=bad)


def test_weighted_fusion_moves_the_ranking_toward_the_heavier_list():
    vector, keyword = [(1, 0.9), (2, 0.8), (3, 0.7)], [(3, 9.0), (2, 8.0), (1, 7.0)]
    assert reciprocal_rank_fusion([vector, keyword], 3, weights=(1.0, 1.0)) == reciprocal_rank_fusion([vector, keyword], 3)
    assert [i for i, _ in reciprocal_rank_fusion([vector, keyword], 3, weights=(1.0, 2.0))] == [3, 2, 1]
    assert [i for i, _ in reciprocal_rank_fusion([vector, keyword], 3, weights=(1.0, 0.5))] == [1, 2, 3]
    assert [i for i, _ in reciprocal_rank_fusion([vector, keyword], 3, weights=(1.0, 0.0))] == [1, 2, 3]


def test_hybrid_keyword_weight_zero_ranks_as_vector_search(index):
    vector = [(h.doc_id, h.chunk_index) for h in index.search("ferry island wind", mode="vector", k=3, strategy="sent")]
    hybrid = index.search("ferry island wind", mode="hybrid", k=3, strategy="sent", keyword_weight=0.0)
    assert [(h.doc_id, h.chunk_index) for h in hybrid] == vector
    with pytest.raises(SearchError, match="keyword_weight must be >= 0"):
        index.search("ferry", mode="hybrid", keyword_weight=-1)


def test_skip_covered_never_changes_the_fused_order_of_what_it_keeps(store, monkeypatch):
    text = " ".join(f"w{i} boats harbour" if i % 7 == 0 else f"w{i}" for i in range(400))
    put_document(store, "long.txt", text)
    put_windows(store, "long.txt", text, width=6, step=6)  # disjoint windows: nothing is ever covered
    idx = SearchIndex(store.path, MODEL_ID, embed=bag_of_words)
    depths = []  # how deep each ranking fed to the fusion went
    for name in ("_vector", "_keyword"):
        real = getattr(idx, name)
        monkeypatch.setattr(idx, name, lambda table, q, k, d, f, *rows, real=real: depths.append(k) or real(table, q, k, d, f, *rows))
    try:
        for k in (1, 5, 10, 20):
            depths.clear()
            plain = idx.search("boats harbour w14", mode="hybrid", k=k, strategy="win")
            plain_depths = list(depths)
            depths.clear()
            distinct = idx.search("boats harbour w14", mode="hybrid", k=k, strategy="win", skip_covered=0.5)
            assert depths == plain_depths  # looking deeper for distinct hits does not deepen the fusion
            assert [(h.chunk_index, h.score) for h in distinct] == [(h.chunk_index, h.score) for h in plain]
    finally:
        idx.close()


def test_the_grounding_threshold_is_the_models_measured_one_else_the_seeds():
    from search.engine import DEFAULT_GROUNDING_THRESHOLD, grounding_threshold_for

    assert DEFAULT_GROUNDING_THRESHOLD == 0.7  # seeds/sentence-chunking-adr.md, for nomic-embed-text
    assert grounding_threshold_for("all-MiniLM-L6-v2") == 0.6
    assert grounding_threshold_for("all-MiniLM-L6-v2:bfloat16") == 0.6  # the precision does not move it
    assert grounding_threshold_for("nomic-embed-text") == 0.7
