"""A strategy's failure on a parsed document is recorded in the store, so the next run decides
the same way whether it ran in a batch or alone: settled (the same bytes, configuration and
limits would fail the same way: not re-run, and `status` lists it) until the limit that refused
it is raised, the document changes or its configuration does; then it is re-run.

Before, a batch's step counted the failed partition as materialized, so raising the limit
retried nothing and nothing listed the document; run alone, it was re-run (and failed) by every
later run instead.
"""

import duckdb

from chunking.limits import DocumentLimits
from orchestration.definitions import build_project
from orchestration.schedules import chunk_refresh, plan_from_refresh
from orchestration.status import stored_status
from resources.store import ChunkStore
from tests.assets.test_time_budgets import check_results, run

LONG = "\n\n".join(f"Paragraph {i} has enough words in it to make a chunk of its own here." for i in range(12))


def plan(settings, instance, limits):
    project = build_project(settings)
    store = ChunkStore(settings.db_path)
    partitions = instance.get_dynamic_partitions("documents")
    materialized = {key: set(instance.get_materialized_partitions(key)) for key in project.graph_order}
    refresh = chunk_refresh(store, project.config_hashes, limits, project.embed_versions)
    return plan_from_refresh(partitions, materialized, project.graph_order, refresh), refresh.settled


def test_a_strategy_failure_is_settled_until_its_limit_is_raised_then_retried(settings, instance, docs_dir):
    (docs_dir / "slow.txt").write_text(LONG, encoding="utf-8")
    tight = DocumentLimits(max_chunks=3)
    settings = settings.model_copy(update={"enabled_strategies": ["recursive"], "limits": tight})
    result = run(settings, instance, "alpha.md", "sub/beta.txt")
    assert result.success
    passed, description = check_results(result, "chunks_recursive", "coverage")["slow.txt"]
    assert not passed and "over the limit of 3 (raise limits.max_chunks" in description

    store = ChunkStore(settings.db_path)
    with duckdb.connect(settings.db_path, read_only=True) as con:
        sha = con.execute("SELECT sha256 FROM documents WHERE doc_id = 'slow.txt'").fetchone()[0]
    ((doc_sha, cfg, error),) = store.strategy_failures()["recursive"].values()
    assert doc_sha == sha and cfg == build_project(settings).config_hashes["recursive"]
    assert "limits.max_chunks" in error
    with store.connect(read_only=True) as con:
        (folder,) = stored_status(con)
    assert any(doc == "slow.txt" and cause.startswith("[chunk recursive] ") for doc, cause in folder.failed)

    # The same limits: settled, not planned again (its partition counts as materialized in a batch).
    planned, settled = plan(settings, instance, tight)
    assert settled == {"recursive": {"slow.txt"}} and planned == {}
    # The limit raised: planned again, the strategy's assets only.
    planned, settled = plan(settings, instance, DocumentLimits(max_chunks=100))
    assert settled == {"recursive": set()}
    assert [k.to_user_string() for k in planned["slow.txt"]] == ["chunks_recursive", "embeddings_recursive"]
    assert set(planned) == {"slow.txt"}

    # Run with it raised: stored, and no longer recorded as failed.
    raised = settings.model_copy(update={"limits": DocumentLimits(max_chunks=100)})
    assert run(raised, instance, "alpha.md", "sub/beta.txt").success
    assert store.strategy_failures() == {}
    with duckdb.connect(settings.db_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM current_chunks WHERE doc_id = 'slow.txt'").fetchone()[0] > 3


def test_a_settled_failure_run_alone_is_not_planned_again_either(settings, instance, docs_dir):
    (docs_dir / "slow.txt").write_text(LONG, encoding="utf-8")
    tight = DocumentLimits(max_chunks=3)
    settings = settings.model_copy(update={"enabled_strategies": ["recursive"], "limits": tight})
    instance.add_dynamic_partitions("documents", ["alpha.md", "slow.txt", "sub/beta.txt"])
    job = build_project(settings).defs.resolve_job_def("ingest_job")
    assert not job.execute_in_process(instance=instance, partition_key="slow.txt", raise_on_error=False).success
    assert "chunks_recursive" not in {k.to_user_string() for k in build_project(settings).graph_order
                                      if "slow.txt" in instance.get_materialized_partitions(k)}
    planned, settled = plan(settings, instance, tight)
    assert settled == {"recursive": {"slow.txt"}} and "slow.txt" not in planned  # before: planned every time
    planned, _ = plan(settings, instance, DocumentLimits(max_chunks=100))
    assert [k.to_user_string() for k in planned["slow.txt"]] == ["chunks_recursive", "embeddings_recursive"]
