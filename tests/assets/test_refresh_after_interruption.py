"""A run stopped part way through a changed document leaves nothing wrong behind, and the next
plan (`chunkyard run`, the nightly schedule) takes up exactly what is left.

Before: stopped after `raw_documents`, the document (status 'read', the new bytes recorded) was
never parsed again and stayed out of search; stopped after a chunks step, the new chunks were
paired by position with the old text's vectors, and nothing planned their embeddings.
"""

import duckdb
from dagster import AssetKey

from orchestration.definitions import INGEST_JOB
from tests.assets.test_embedder_changes import plan
from tests.assets.test_time_budgets import DOCS, run

from orchestration.definitions import build_project


def run_assets(settings, instance, doc_id, *assets):
    job = build_project(settings).defs.resolve_job_def(INGEST_JOB)
    return job.execute_in_process(instance=instance, partition_key=doc_id, raise_on_error=False,
                                  asset_selection=[AssetKey(a) for a in assets])


def mismatched_vectors(settings, doc_id):
    """Vectors paired with a chunk of another text (the embedded text is the chunk's own here)."""
    with duckdb.connect(settings.db_path, read_only=True) as con:
        return con.execute("SELECT count(*) FROM current_chunks c JOIN current_embeddings e "
                           "USING (doc_id, strategy, chunk_index) WHERE doc_id = ? AND e.text_sha256 <> c.text_sha256",
                           [doc_id]).fetchone()[0]


def test_stopped_after_chunking_the_old_vectors_go_and_the_embeddings_are_planned(settings, instance, docs_dir):
    (docs_dir / "slow.txt").write_text("The first text of this document, about rivers.", encoding="utf-8")
    settings = settings.model_copy(update={"enabled_strategies": ["recursive", "token"]})
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    (docs_dir / "slow.txt").write_text("Another text altogether, about mountains and snow.", encoding="utf-8")
    assert run_assets(settings, instance, "slow.txt", "raw_documents", "parsed_documents",
                      "chunks_recursive", "chunks_token").success
    assert mismatched_vectors(settings, "slow.txt") == 0
    planned = plan(settings, instance)
    assert {d: [k.to_user_string() for k in keys] for d, keys in planned.items()} == {
        "slow.txt": ["embeddings_recursive", "embeddings_token"]}
    assert run_assets(settings, instance, "slow.txt", "embeddings_recursive", "embeddings_token").success
    assert plan(settings, instance) == {}
    with duckdb.connect(settings.db_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM current_embeddings WHERE doc_id = 'slow.txt'").fetchone()[0] > 0


def test_stopped_after_reading_the_document_is_planned_whole(settings, instance, docs_dir):
    (docs_dir / "slow.txt").write_text("The first text of this document, about rivers.", encoding="utf-8")
    settings = settings.model_copy(update={"enabled_strategies": ["recursive"]})
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    (docs_dir / "slow.txt").write_text("Another text altogether, about mountains and snow.", encoding="utf-8")
    assert run_assets(settings, instance, "slow.txt", "raw_documents").success
    planned = plan(settings, instance)
    assert list(planned) == ["slow.txt"]
    assert planned["slow.txt"] == build_project(settings).graph_order
    job = build_project(settings).defs.resolve_job_def(INGEST_JOB)
    assert job.execute_in_process(instance=instance, partition_key="slow.txt", asset_selection=planned["slow.txt"]).success
    assert plan(settings, instance) == {}
    with duckdb.connect(settings.db_path, read_only=True) as con:
        assert "mountains" in con.execute("SELECT string_agg(text, ' ') FROM current_chunks "
                                          "WHERE doc_id = 'slow.txt'").fetchone()[0]


def test_a_chunk_steps_work_for_no_document_in_particular_is_shared_among_its_documents(
        settings, instance, docs_dir, monkeypatch):
    # Loading the tokenizer (or semantic's model) and the parses was counted nowhere: a step of 9 s
    # recorded 0.65 s. Now the documents' seconds of a step add up to at least that work.
    import time

    from resources.tokenizer import TokenizerResource

    real = TokenizerResource.get_tokenizer

    def slow_to_load(self):
        time.sleep(1.0)
        return real(self)

    monkeypatch.setattr(TokenizerResource, "get_tokenizer", slow_to_load)
    (docs_dir / "slow.txt").write_text("A third document.", encoding="utf-8")
    settings = settings.model_copy(update={"enabled_strategies": ["recursive"]})
    result = run(settings, instance, "alpha.md", "sub/beta.txt")
    assert result.success
    with duckdb.connect(settings.db_path, read_only=True) as con:
        rows = dict(con.execute("SELECT doc_id, seconds FROM stage_costs WHERE run_id = ? AND stage = 'chunk'",
                                [result.run_id]).fetchall())
    assert set(rows) == set(DOCS)
    assert sum(rows.values()) >= 1.0
    assert min(rows.values()) >= 1.0 / len(DOCS) - 0.01  # shared equally


def test_chunks_refused_by_the_blocking_check_are_a_settled_failure_and_spare_their_batch(
        settings, instance, docs_dir, monkeypatch):
    # token_cap failing for one document skips the embeddings step of its whole range run. Its
    # batch-mates, chunked the same as before, keep their vectors; it is recorded as the strategy's
    # failure (status lists it) and no plan asks again for what the check would block again.
    import assets.strategies as strategies
    from assets.checks import CheckOutcome
    from orchestration.status import stored_status
    from resources.store import ChunkStore

    (docs_dir / "slow.txt").write_text("The first text of this document, about rivers.", encoding="utf-8")
    settings = settings.model_copy(update={"enabled_strategies": ["recursive"]})
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    real = strategies.chunk_outcomes

    def over_the_cap_for_slow(text, chunks, cap, atomic):
        outcomes = real(text, chunks, cap, atomic)
        if "rivers" in text:
            outcomes = [CheckOutcome("token_cap", False, description="1 chunk over the cap of 30")
                        if o.name == "token_cap" else o for o in outcomes]
        return outcomes

    monkeypatch.setattr(strategies, "chunk_outcomes", over_the_cap_for_slow)
    with duckdb.connect(settings.db_path, read_only=True) as con:
        before = dict(con.execute("SELECT doc_id, count(*) FROM chunk_embeddings GROUP BY 1").fetchall())
    run(settings, instance, "alpha.md", "sub/beta.txt")  # the blocking check fails the range's embeddings
    with duckdb.connect(settings.db_path, read_only=True) as con:
        after = dict(con.execute("SELECT doc_id, count(*) FROM chunk_embeddings GROUP BY 1").fetchall())
    assert after == before, "chunks made again the same keep their vectors"
    store = ChunkStore(settings.db_path)
    ((sha, cfg, error),) = store.strategy_failures()["recursive"].values()
    assert error == "slow.txt: recursive chunks refused by the token_cap check: 1 chunk over the cap of 30"
    assert plan(settings, instance) == {}
    with store.connect(read_only=True) as con:
        (folder,) = stored_status(con)
    assert any(doc == "slow.txt" and cause.startswith("[chunk recursive]") for doc, cause in folder.failed)
