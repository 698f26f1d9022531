"""Materializing documents through every asset of the real definitions, in a test instance."""

import duckdb
import pytest
from dagster import AssetKey, DagsterEventType

from orchestration.definitions import INGEST_JOB, build_project

RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")


def register(instance, *doc_ids):
    instance.add_dynamic_partitions("documents", list(doc_ids))


def run_range(project, instance, first, last):
    job = project.defs.resolve_job_def(INGEST_JOB)
    return job.execute_in_process(instance=instance, tags={RANGE[0]: first, RANGE[1]: last}, raise_on_error=False)


def run_one(project, instance, doc_id):
    job = project.defs.resolve_job_def(INGEST_JOB)
    return job.execute_in_process(instance=instance, partition_key=doc_id, raise_on_error=False)


def check_evaluations(result):
    """(asset, check, partition) -> passed, for per-document evaluations."""
    out = {}
    for event in result.all_events:
        if event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            ev = event.event_specific_data
            if ev.partition is not None:
                out[(ev.asset_key.to_user_string(), ev.check_name, ev.partition)] = ev.passed
    return out


def metadata_of(result, asset_name):
    for event in result.all_events:
        if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            mat = event.event_specific_data.materialization
            if mat.asset_key == AssetKey(asset_name):
                return {k: v.value for k, v in mat.metadata.items()}
    raise AssertionError(f"{asset_name} not materialized")


@pytest.fixture
def project(settings):
    return build_project(settings)


def table_count(db_path, sql, params=()):
    with duckdb.connect(db_path, read_only=True) as con:
        return con.execute(sql, params).fetchone()[0]


def test_two_documents_through_every_asset(project, instance, settings):
    register(instance, "alpha.md", "sub/beta.txt")
    result = run_range(project, instance, "alpha.md", "sub/beta.txt")
    assert result.success

    # Every asset of the graph materialized both partitions.
    for key in project.graph_order:
        assert instance.get_materialized_partitions(key) == {"alpha.md", "sub/beta.txt"}, key

    # Every per-document check ran for both documents; all ERROR checks passed.
    evaluations = check_evaluations(result)
    checks = {(a, c) for a, c, _ in evaluations}
    for strategy in project.config_hashes:
        for name in ("token_cap", "no_empty_chunks", "coverage"):
            assert (f"chunks_{strategy}", name) in checks
        assert (f"embeddings_{strategy}", "embeddings_complete") in checks
    failed = {k for k, passed in evaluations.items() if not passed and k[1] != "within_model_max_sequence"}
    assert not failed

    db = settings.db_path
    with duckdb.connect(db, read_only=True) as con:
        # Offsets map back to the parsed text, for every verbatim chunk.
        rows = con.execute(
            """
            WITH parsed AS (SELECT doc_id, string_agg(text, '' ORDER BY page_num) AS text FROM pages GROUP BY doc_id)
            SELECT c.strategy, c.doc_id, c.text = substr(p.text, c.char_start + 1, c.char_end - c.char_start) AS ok
            FROM chunks c JOIN parsed p USING (doc_id) WHERE c.verbatim
            """
        ).fetchall()
        assert rows and all(ok for _, _, ok in rows)
        per_doc = dict(con.execute(
            "SELECT doc_id, count(*) FROM chunks WHERE strategy = 'recursive' GROUP BY doc_id").fetchall())
        assert per_doc["alpha.md"] > 1 and per_doc["sub/beta.txt"] > 1  # a 40-token cap splits them
        assert con.execute("SELECT max(token_count) FROM chunks WHERE strategy = 'recursive'").fetchone()[0] <= 40
        n_chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        n_vectors = con.execute("SELECT count(*) FROM embeddings WHERE dim = 384").fetchone()[0]
        assert n_vectors == n_chunks
        # Blocks from Markdown headings carry the heading path into the chunks.
        paths = con.execute(
            "SELECT DISTINCT heading_path FROM chunks WHERE doc_id = 'alpha.md' AND strategy = 'recursive'"
        ).fetchall()
        assert ["Alpha", "Alpha details"] in [p[0] for p in paths]


def test_rematerialization_is_idempotent_and_embeds_nothing(project, instance, settings):
    register(instance, "alpha.md", "sub/beta.txt")
    first = run_range(project, instance, "alpha.md", "sub/beta.txt")
    assert first.success
    counts_sql = {
        t: f"SELECT count(*) FROM {t}" for t in ("documents", "pages", "blocks", "chunks", "embeddings", "embedding_vectors")
    }
    before = {t: table_count(settings.db_path, q) for t, q in counts_sql.items()}
    second = run_range(project, instance, "alpha.md", "sub/beta.txt")
    assert second.success
    after = {t: table_count(settings.db_path, q) for t, q in counts_sql.items()}
    assert after == before
    assert metadata_of(first, "embeddings_recursive")["new_embeddings"] > 0
    for strategy in project.config_hashes:
        assert metadata_of(second, f"embeddings_{strategy}")["new_embeddings"] == 0
    dupes = table_count(
        settings.db_path,
        "SELECT count(*) FROM (SELECT doc_id, strategy, chunk_index FROM chunks GROUP BY ALL HAVING count(*) > 1)",
    )
    assert dupes == 0


def test_a_bad_document_fails_alone_in_a_batch(project, instance, settings, docs_dir):
    (docs_dir / "empty.txt").write_bytes(b"")
    register(instance, "alpha.md", "empty.txt", "sub/beta.txt")
    result = run_range(project, instance, "alpha.md", "sub/beta.txt")
    assert result.success, "a bad document must not fail the batch"
    evaluations = check_evaluations(result)
    assert evaluations[("parsed_documents", "parsed", "empty.txt")] is False
    assert evaluations[("parsed_documents", "parsed", "alpha.md")] is True
    with duckdb.connect(settings.db_path, read_only=True) as con:
        status = dict(con.execute("SELECT doc_id, status FROM documents").fetchall())
        error = con.execute("SELECT error FROM documents WHERE doc_id = 'empty.txt'").fetchone()[0]
        chunked = {r[0] for r in con.execute("SELECT DISTINCT doc_id FROM chunks").fetchall()}
    assert status == {"alpha.md": "parsed", "empty.txt": "error", "sub/beta.txt": "parsed"}
    assert "empty.txt" in error and "empty" in error.lower()
    assert chunked == {"alpha.md", "sub/beta.txt"}

    # Alone, the same document fails its own run, with the message naming the file.
    alone = run_one(project, instance, "empty.txt")
    assert not alone.success
    failure = next(e for e in alone.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    assert "empty.txt" in failure.event_specific_data.error_display_string


def test_a_failed_reparse_keeps_the_rows_already_stored(project, instance, settings, docs_dir):
    register(instance, "alpha.md")
    assert run_one(project, instance, "alpha.md").success
    before = table_count(settings.db_path, "SELECT count(*) FROM chunks WHERE doc_id = 'alpha.md'")
    assert before > 0
    (docs_dir / "alpha.md").write_bytes(b"")  # the file turns bad
    assert not run_one(project, instance, "alpha.md").success
    assert table_count(settings.db_path, "SELECT count(*) FROM chunks WHERE doc_id = 'alpha.md'") == before
    assert table_count(settings.db_path, "SELECT count(*) FROM pages WHERE doc_id = 'alpha.md'") > 0
    status = table_count(settings.db_path, "SELECT status FROM documents WHERE doc_id = 'alpha.md'")
    assert status == "error"
