"""Through the real pipeline: context embedding in the embeddings asset, a named variant
(``[variants.*]``) beside the strategies it is made from, then the CLI commands."""

import json
import textwrap

import duckdb
import numpy as np
import pytest
from dagster import instance_for_test

from chunking.strategies import config_hash
from orchestration.cli import main
from orchestration.definitions import INGEST_JOB, build_project
from orchestration.settings import load_settings
from search.evaluation import leaders_line

pytestmark = pytest.mark.model

GUIDE = """# Harbour guide

## Boats

The boats come back before dark, because the wind turns every afternoon.

## Markets

The fish market opens at dawn and closes when the ice runs out.
"""
NOTES = "Bread needs flour, water, salt and yeast. Knead the dough for ten minutes.\n"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    docs = root / "docs"
    (docs / "kitchen").mkdir(parents=True)
    (docs / "guide.md").write_text(GUIDE, encoding="utf-8")
    (docs / "kitchen" / "bread.txt").write_text(NOTES, encoding="utf-8")
    eval_set = root / "eval.jsonl"
    eval_set.write_text(json.dumps({"id": "q", "question": "When does the fish market open?", "references": [
        {"doc": "guide.md", "excerpt": "The fish market opens at dawn"}]}) + "\n", encoding="utf-8")
    config = root / "chunkyard.toml"
    config.write_text(textwrap.dedent(f"""
        docs_root = "{docs}"
        db_path = "{root / 'db' / 'chunkyard.duckdb'}"
        eval_set = "{eval_set}"
        enabled_strategies = ["recursive", "paragraph"]
        embed_with_context = ["paragraph"]
        [embed_neighbours]
        paragraph = 24
        [strategies.paragraph]
        chunk_token_size = 16
        chunk_overlap_token_size = 0
        [strategies.recursive]
        chunk_token_size = 30
        chunk_overlap_token_size = 5
        [variants.rec_small]
        strategy = "recursive"
        embed_with_context = true
        chunk_token_size = 12
        chunk_overlap_token_size = 4
        [variants.rec_late]
        strategy = "recursive"
        embed_with_context = true
        embed_late = 40
        chunk_token_size = 12
        chunk_overlap_token_size = 0
        [variants.rec_blend]
        strategy = "recursive"
        embed_with_context = true
        embed_late = 40
        embed_late_blend = 0.5
        chunk_token_size = 12
        chunk_overlap_token_size = 0
    """), encoding="utf-8")
    settings = load_settings(config)
    project = build_project(settings)
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("documents", ["guide.md", "kitchen/bread.txt"])
        result = project.defs.resolve_job_def(INGEST_JOB).execute_in_process(
            instance=instance, raise_on_error=False,
            tags={"dagster/asset_partition_range_start": "guide.md",
                  "dagster/asset_partition_range_end": "kitchen/bread.txt"})
        assert result.success
    return config, settings


def test_context_embedding_changes_only_what_is_embedded(ingested):
    _, settings = ingested
    with duckdb.connect(settings.db_path, read_only=True) as con:
        rows = con.execute(
            """SELECT c.strategy, c.text, c.heading_path, c.text_sha256 = e.text_sha256,
                      e.text_sha256 IN (SELECT text_sha256 FROM embedding_vectors)
               FROM chunks c JOIN embeddings e USING (doc_id, strategy, chunk_index)
               WHERE c.doc_id = 'guide.md'"""
        ).fetchall()
    by_strategy = {}
    for strategy, text, heading_path, same_sha, cached in rows:
        by_strategy.setdefault(strategy, []).append(same_sha)
        assert cached
        assert not text.startswith("Harbour guide >")  # the stored chunk text is unchanged
    assert all(by_strategy["recursive"])  # no context: the vector is the chunk text's
    assert not any(by_strategy["paragraph"])  # with context: keyed by the text the model read
    assert not any(by_strategy["rec_small"])  # the variant's own embed_with_context


def _guide_with_context(settings, strategy: str, *contexts):
    """guide.md's stored chunks of ``strategy``, the embedder, the rows ``with_context`` makes
    for each of ``contexts``, and the text keys the embeddings asset stored per chunk index."""
    from resources.embedding import EmbeddingModelResource
    from resources.store import ChunkStore
    from search.context import with_context

    store = ChunkStore(settings.db_path)
    chunks = store.load_chunks("guide.md", strategy)
    embedder = EmbeddingModelResource(model=settings.embedding_model).get_embedder()
    rows = [with_context(store, "guide.md", strategy, chunks, context, embedder) for context in contexts]
    with duckdb.connect(settings.db_path, read_only=True) as con:
        keys = dict(con.execute("SELECT chunk_index, text_sha256 FROM embeddings WHERE doc_id = 'guide.md' "
                                "AND strategy = ?", [strategy]).fetchall())
    return store, chunks, embedder, rows, keys


def test_neighbour_context_embeds_the_text_around_each_chunk(ingested):
    _, settings = ingested
    from search.context import EmbedContext

    _, chunks, embedder, (embedded, headings_only), stored = _guide_with_context(
        settings, "paragraph", EmbedContext(True, 24), EmbedContext(True, 0))
    assert len(chunks) > 1
    assert stored == {row.chunk_index: row.text_sha256 for row in embedded}  # the asset embedded these texts
    assert all(a.text_sha256 != b.text_sha256 for a, b in zip(embedded, headings_only))
    for chunk, row in zip(chunks, embedded):
        assert chunk.text in row.text and len(row.text) > len(chunk.text) + len("Harbour guide")  # neighbours added
        assert embedder.count_model_tokens(row.text) <= embedder.max_seq_length
        assert GUIDE[chunk.char_start:chunk.char_end] == chunk.text  # the stored chunk is its own span


def test_late_chunking_stores_each_chunks_pooled_vector_and_search_and_eval_use_it(ingested):
    _, settings = ingested
    from resources.embedding import EmbeddingModelResource
    from search.context import EmbedContext
    from search.engine import SearchIndex
    from search.evaluation import evaluate, load_eval_set

    store, chunks, embedder, (rows,), keys = _guide_with_context(settings, "rec_late", EmbedContext(True, late_tokens=40))
    assert len(chunks) > 2
    expected = embedder.embed_spans([(r.text, *r.pooled_span) for r in rows])
    stored = dict(store.load_embeddings_of(["guide.md"], "rec_late")["guide.md"])
    assert keys == {r.chunk_index: r.text_sha256 for r in rows}  # keyed by window and span
    for row, vector in zip(rows, expected):
        assert row.text[slice(*row.pooled_span)] == GUIDE[row.char_start:row.char_end]  # the chunk's own words
        assert embedder.count_model_tokens(row.text) <= 40  # the window: embed_late word pieces at most
        assert np.abs(np.asarray(stored[row.chunk_index]) - vector).max() < 1e-5  # the pooled vector is stored
    assert all(r.pooled_span[1] - r.pooled_span[0] + len("Harbour guide") < len(r.text) for r in rows)  # neighbours
    whole = embedder.embed([r.text for r in rows])
    assert any(np.abs(w - v).max() > 1e-3 for w, v in zip(whole, expected))  # not the window's own vector
    # Search and eval read exactly those vectors: the top hit's score is its cosine to the query.
    index = SearchIndex(settings.db_path, EmbeddingModelResource(model=settings.embedding_model).model_id,
                        embed=embedder.embed)
    try:
        [hit] = index.search("When does the fish market open?", mode="vector", k=1, strategy="rec_late")
        query = embedder.embed(["When does the fish market open?"])[0]
        assert abs(hit.score - float(np.asarray(stored[hit.chunk_index]) @ query)) < 1e-4
        report = evaluate(index, load_eval_set(settings.eval_set), ks=(5,), mode="vector", strategies=["rec_late"])
        assert report.at(5)["rec_late"].recall > 0
    finally:
        index.close()


def test_a_blended_late_variant_stores_the_weighted_mean_of_its_late_and_own_vectors(ingested):
    _, settings = ingested
    from search.context import EmbedContext

    store, chunks, embedder, (rows,), keys = _guide_with_context(
        settings, "rec_blend", EmbedContext(True, late_tokens=40, late_blend=0.5))
    assert len(chunks) > 2 and keys == {r.chunk_index: r.text_sha256 for r in rows}
    late = embedder.embed_spans([(r.text, *r.pooled_span) for r in rows])
    own = embedder.embed([r.own_text for r in rows])
    stored = dict(store.load_embeddings_of(["guide.md"], "rec_blend")["guide.md"])
    late_stored = dict(store.load_embeddings_of(["guide.md"], "rec_late")["guide.md"])
    for row, l, o in zip(rows, late, own):
        assert row.own_text.startswith("Harbour guide") and row.own_text.endswith(
            GUIDE[row.char_start:row.char_end])  # the chunk as +ctx embeds it alone
        expected = (l + o) / np.linalg.norm(l + o)
        assert np.abs(np.asarray(stored[row.chunk_index]) - expected).max() < 1e-5
        assert np.abs(np.asarray(stored[row.chunk_index]) - np.asarray(late_stored[row.chunk_index])).max() > 1e-3


def test_a_variant_is_a_strategy_of_its_own_in_the_store(ingested):
    _, settings = ingested
    variant = settings.strategy_instances()[2]
    with duckdb.connect(settings.db_path, read_only=True) as con:
        rows = dict(con.execute(
            """SELECT strategy, list(DISTINCT config_hash) FROM chunks WHERE doc_id = 'guide.md' GROUP BY 1""").fetchall())
        counts = dict(con.execute("SELECT strategy, count(*) FROM chunks GROUP BY 1").fetchall())
    assert set(rows) == {"recursive", "paragraph", "rec_small", "rec_late", "rec_blend"}
    assert rows["rec_small"] == [config_hash(variant.config)] != rows["recursive"]
    assert counts["rec_small"] > counts["recursive"]  # 12-token chunks: more of them than recursive's 30


def test_cli_search_json_and_terminal(ingested, monkeypatch, capsys):
    config, _ = ingested
    monkeypatch.setenv("CHUNKYARD_CONFIG", str(config))
    assert main(["search", "fish market dawn", "--json", "-k", "2"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert {h["strategy"] for h in hits} == {"recursive", "paragraph", "rec_small", "rec_late", "rec_blend"}
    top = next(h for h in hits if h["strategy"] == "recursive" and h["rank"] == 1)
    assert top["doc_id"] == "guide.md" and "fish market" in top["text"]
    assert GUIDE[top["char_start"]:top["char_end"]] == top["text"]
    assert GUIDE.endswith(top["text"] + top["context_after"])
    assert {"page_start", "page_end", "heading_path", "score", "context_before"} <= set(top)

    assert main(["search", "knead", "--mode", "keyword", "--strategy", "recursive", "--folder", "kitchen"]) == 0
    out = capsys.readouterr().out
    assert "[recursive #1]" in out and "kitchen/bread.txt" in out and "»" in out and "Knead" in out
    assert main(["search", "the of and", "--mode", "keyword"]) == 0
    assert "no hits: every word of the query is an English stop word" in capsys.readouterr().out
    assert main(["search", "zzyzx quorble", "--mode", "keyword"]) == 0
    assert capsys.readouterr().out == "no hits\n"

    assert main(["search", "fish market", "--strategy", "rec_small", "--json", "-k", "1"]) == 0
    hit, = json.loads(capsys.readouterr().out)
    assert hit["strategy"] == "rec_small" and "fish market" in hit["text"]
    assert GUIDE[hit["char_start"]:hit["char_end"]] == hit["text"]

    assert main(["search", "x", "--strategy", "nope"]) == 2
    assert "strategy 'nope'" in capsys.readouterr().err

    # Coarse-to-fine: rec_small's chunks from inside recursive's best hit, each shown with its parent.
    assert main(["search", "fish market dawn", "--strategy", "recursive", "--json", "-k", "1"]) == 0
    coarse, = json.loads(capsys.readouterr().out)
    assert main(["search", "fish market dawn", "--strategy", "rec_small", "--within", "recursive",
                 "--within-depth", "1", "--within-rank", "rrf", "--json", "-k", "2"]) == 0
    fine = json.loads(capsys.readouterr().out)
    assert len(fine) == 2 and all((h["within"], h["parent_rank"]) == ("recursive", 1) for h in fine)
    for hit in fine:
        assert hit["doc_id"] == coarse["doc_id"] and GUIDE[hit["char_start"]:hit["char_end"]] == hit["text"]
        assert hit["char_start"] < coarse["char_end"] and hit["char_end"] > coarse["char_start"]
    assert main(["search", "fish market", "--strategy", "rec_small", "--within", "recursive", "-k", "1"]) == 0
    assert "[rec_small #1 in recursive #1]" in capsys.readouterr().out
    monkeypatch.setattr("orchestration.cli_search._settings",
                        lambda: load_settings(config).model_copy(update={"search_within": "recursive"}))
    assert main(["search", "fish market", "--strategy", "rec_small", "--json", "-k", "1"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["within"] == "recursive"  # the setting applies
    assert main(["search", "fish market", "--strategy", "rec_small", "--within", "off", "--json", "-k", "1"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["within"] is None  # --within off overrides it
    assert main(["search", "x", "--within", "nope"]) == 2
    assert "search_within: 'nope' is not an enabled strategy or variant" in capsys.readouterr().err


def test_cli_ground_verdicts(ingested, monkeypatch, capsys):
    config, _ = ingested
    monkeypatch.setenv("CHUNKYARD_CONFIG", str(config))
    assert main(["ground", "The fish market opens at dawn and closes when the ice runs out.", "--json"]) == 0
    grounded = json.loads(capsys.readouterr().out)
    assert grounded["threshold"] == 0.6  # no threshold set: all-MiniLM-L6-v2's measured one, not the seed's 0.7
    by = {g["strategy"]: g for g in grounded["strategies"]}
    assert by["recursive"]["verdict"] == "grounded" and by["recursive"]["score"] >= 0.7
    assert main(["ground", "Quarterly tax filings for limited companies", "--threshold", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "unsupported" in out and "GROUNDED" not in out


def test_cli_eval_prints_the_table_and_records_history(ingested, monkeypatch, capsys, tmp_path):
    config, settings = ingested
    monkeypatch.setenv("CHUNKYARD_CONFIG", str(config))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["eval"]) == 0
    out = capsys.readouterr().out
    assert "recall" in out and "check recall_at_5_stable: passed" in out
    names = ("recursive", "paragraph", "rec_small", "rec_late", "rec_blend")
    lines = [line.split() for line in out.splitlines() if line.startswith(names)]
    assert sorted((l[0], int(l[1])) for l in lines) == sorted((s, k) for s in names for k in (1, 3, 5, 10))
    with duckdb.connect(settings.db_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM retrieval_eval").fetchone()[0] == 20
        at5 = con.execute("SELECT strategy, recall, iou FROM retrieval_eval WHERE k = 5 ORDER BY 1").fetchall()
    # The leaders line after the table: from the recorded, unrounded scores.
    assert leaders_line({s: (recall, iou) for s, recall, iou in at5}, 5) in out.splitlines()

    # Overlap-aware top k: scored and recorded under its own mode label, never against plain top k.
    assert main(["eval", "--skip-covered", "0.5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["leaders@5"]) == {"best_recall", "best_iou", "on_both", "best_recall_names", "best_iou_names"}
    assert report["leaders@5"]["best_recall"][0] == report["leaders@5"]["best_recall_names"][0]
    assert report["skipped"] == {}
    assert report["leaders@5"]["best_recall"][0] in names
    assert {c["name"]: c["passed"] for c in report["checks"]} == {"recall_at_5_stable": True}
    with duckdb.connect(settings.db_path, read_only=True) as con:
        modes = con.execute("SELECT mode, count(*) FROM retrieval_eval GROUP BY 1 ORDER BY 1").fetchall()
    assert modes == [("vector", 20), ("vector,skip_covered=0.5", 20)]
    assert main(["eval", "--skip-covered", "2"]) == 2
    assert "--skip-covered must be 0 (off) or a fraction in (0, 1]" in capsys.readouterr().err

    # Coarse-to-fine: its own mode label in the history and the output.
    assert main(["eval", "--within", "paragraph", "--within-depth", "2"]) == 0
    assert "mode: vector,within=paragraph@2 " in capsys.readouterr().out
    with duckdb.connect(settings.db_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM retrieval_eval WHERE mode = 'vector,within=paragraph@2'").fetchone()[0] == 20


def test_cli_search_and_ground_refuse_what_names_nothing(ingested, monkeypatch, capsys):
    config, _ = ingested
    monkeypatch.setenv("CHUNKYARD_CONFIG", str(config))
    refused = {
        ("search", ""): "the query is empty",
        ("search", "   ", "--mode", "vector"): "the query is empty",
        ("search", "fish", "-k", "0"): "k must be between 1 and 10000 (hits per strategy), not 0",
        ("search", "fish", "-k", "9223372036854775808"): "k must be between 1 and 10000",
        ("search", "fish", "--doc", "guide.md", "--doc", "nosuch.md"): "no document 'nosuch.md' in ",
        ("search", "fish", "--folder", "nosuch"): "no stored document under the folder 'nosuch'",
        ("ground", " "): "the claim is empty",
        ("ground", "fish", "--threshold", "5"): "the grounding threshold is a cosine similarity, in [-1, 1]; not 5",
        ("ground", "fish", "-k", "-5"): "k must be between 1 and 10000",
    }
    for argv, message in refused.items():
        assert main(list(argv)) == 2, argv
        err = capsys.readouterr().err
        assert message in err, (argv, err)
    # A folder or document that is stored still filters as before.
    assert main(["search", "knead", "--folder", "kitchen/", "--doc", "kitchen/bread.txt", "--json", "-k", "1"]) == 0
    assert {h["doc_id"] for h in json.loads(capsys.readouterr().out)} == {"kitchen/bread.txt"}


def test_cli_eval_names_the_questions_it_left_out_and_says_why_none_scored(ingested, monkeypatch, capsys, tmp_path):
    config, settings = ingested
    monkeypatch.setenv("CHUNKYARD_CONFIG", str(config))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    good = {"id": "market", "question": "When does the fish market open?",
            "references": [{"doc": "guide.md", "excerpt": "The fish market opens at dawn"}]}
    absent = {"id": "absent", "question": "Who?", "references": [{"doc": "nosuch.md", "excerpt": "x"}]}
    unfound = {"id": "unfound", "question": "What?", "references": [{"doc": "guide.md", "excerpt": "no such words"}]}
    mixed, none_scored, empty = tmp_path / "mixed.jsonl", tmp_path / "none.jsonl", tmp_path / "empty.jsonl"
    mixed.write_text("\n".join(json.dumps(q) for q in (good, absent)) + "\n", encoding="utf-8")
    none_scored.write_text("\n".join(json.dumps(q) for q in (absent, unfound)) + "\n", encoding="utf-8")
    empty.write_text("", encoding="utf-8")

    assert main(["eval", "--eval-set", str(mixed)]) == 0
    out = capsys.readouterr().out
    assert "1 question(s) not scored:\n    absent: document 'nosuch.md' is not in the store" in out
    assert main(["eval", "--eval-set", str(mixed), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["skipped"]) == ["absent"] and {r["questions"] for r in report["rows"]} == {1}

    # Nothing scored: --json still answers (no leaders), and the note says both causes.
    assert main(["eval", "--eval-set", str(none_scored), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == [] and report["leaders@5"] is None and set(report["skipped"]) == {"absent", "unfound"}
    [check] = report["checks"]
    assert check["passed"] and ("2 skipped: 1 of them about documents this store does not hold, 1 unresolved in "
                                "the stored text, e.g. excerpt not found verbatim in 'guide.md'") in check["description"]
    assert main(["eval", "--eval-set", str(empty)]) == 0
    assert "the eval set holds no question" in capsys.readouterr().out

    # What the asset would fail on is said before a run, plainly (exit 2).
    assert main(["eval", "--eval-set", str(tmp_path / "gone.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"chunkyard eval: eval set not found: {tmp_path / 'gone.jsonl'}"
    monkeypatch.setattr("orchestration.cli_search._settings", lambda: load_settings(config).model_copy(
        update={"db_path": str(tmp_path / "nowhere" / "x.duckdb")}))
    assert main(["eval"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"chunkyard eval: no chunkyard database at {tmp_path / 'nowhere' / 'x.duckdb'}: run `chunkyard run` first")


def test_a_failed_eval_step_is_reported_without_dagsters_wrappers():
    from dagster._utils.error import SerializableErrorInfo

    from orchestration.cli_search import step_failure_message

    class Failed:  # StepFailureData's two fields that matter here
        def __init__(self, error, user_failure_data=None):
            self.error, self.user_failure_data = error, user_failure_data

    cause = SerializableErrorInfo("SearchError: cannot read x.duckdb: locked\n", [], "SearchError")
    wrapped = SerializableErrorInfo('dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while '
                                    'executing op "retrieval_eval":\n', [], "DagsterExecutionStepExecutionError",
                                    cause=cause)
    assert step_failure_message(Failed(wrapped)) == "cannot read x.duckdb: locked"

    class Described:
        description = "eval set line 3: not JSON"

    assert step_failure_message(Failed(wrapped, Described())) == "eval set line 3: not JSON"


def test_a_strategy_no_longer_configured_is_marked_left_out_of_search_and_pruned(ingested, monkeypatch, capsys,
                                                                              tmp_path):
    # Its rows were listed by status as current and searched for ever; --force did not remove them.
    config, settings = ingested
    text = config.read_text(encoding="utf-8")
    assert "[variants.rec_small]" in text
    smaller = tmp_path / "without-rec-small.toml"
    smaller.write_text(text.replace("[variants.rec_small]", "[variants.rec_gone]"), encoding="utf-8")
    monkeypatch.setenv("CHUNKYARD_CONFIG", str(smaller))
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "rec_small (not configured)" in out and "not in the configuration, kept from an earlier one: rec_small" in out
    assert main(["search", "fish market dawn", "--json", "-k", "1"]) == 0
    assert "rec_small" not in {h["strategy"] for h in json.loads(capsys.readouterr().out)}
    assert main(["search", "fish market dawn", "--json", "-k", "1", "--strategy", "rec_small"]) == 0
    assert {h["strategy"] for h in json.loads(capsys.readouterr().out)} == {"rec_small"}
    # Nor scored by eval (the retrieval_eval asset built with the configured names).
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    assert main(["eval", "--json"]) == 0
    scored = {row["strategy"] for row in json.loads(capsys.readouterr().out)["rows"]}
    assert scored and "rec_small" not in scored
