"""A document whose rows the store cannot take fails alone, on its own partition's check, whatever
the run shape: beside a document that failed before the write (so it is the only one written),
and run alone. Before, a lone failing write raised and failed the whole step, losing the other
document's check too.

Rows are made unstorable the way a real value can be: a token count past DuckDB's INTEGER.
"""

import dataclasses

import duckdb
from dagster import DagsterEventType

from orchestration.definitions import INGEST_JOB, build_project
from tests.assets.test_partition_truth import latest_check_description
from tests.assets.test_time_budgets import DOCS, check_results, clock, partition_metadata, run, slow_to_chunk, stored

__all__ = ["clock"]  # a fixture, used by name


def unstorable_chunks_of(monkeypatch, marker: str) -> None:
    """``recursive`` gives the chunks of a text holding ``marker`` a token count no INTEGER holds."""
    import chunking.strategies.recursive as recursive

    real_split = recursive.split_recursive

    def split_recursive(text, *args, **kwargs):
        spans = real_split(text, *args, **kwargs)
        return [dataclasses.replace(s, tokens=2**40) for s in spans] if marker in text else spans

    monkeypatch.setattr(recursive, "split_recursive", split_recursive)


def test_the_only_document_written_fails_alone_when_its_rows_cannot_be_stored(settings, instance, docs_dir, clock,
                                                                             monkeypatch):
    (docs_dir / "slow.txt").write_text("SLOW text that a strategy takes too long to chunk.", encoding="utf-8")
    (docs_dir / "sub" / "beta.txt").write_text("UNSTORABLE text whose chunks the store refuses.", encoding="utf-8")
    slow_to_chunk(clock, monkeypatch)
    unstorable_chunks_of(monkeypatch, "UNSTORABLE")
    # slow.txt fails before the write, so sub/beta.txt is the only document written.
    result = run(settings, instance, "slow.txt", "sub/beta.txt")
    assert result.success, "two documents failing alone must not fail the step"
    coverage = check_results(result, "chunks_recursive", "coverage")
    assert set(coverage) - {None} == {"slow.txt", "sub/beta.txt"}  # None: the step's summary
    assert not coverage["slow.txt"][0] and "limits.chunk_timeout_s" in coverage["slow.txt"][1]
    passed, description = coverage["sub/beta.txt"]
    assert not passed and "sub/beta.txt: recursive chunks could not be stored (nothing of them was)" in description
    assert "could not be stored" in partition_metadata(result, "chunks_recursive")["sub/beta.txt"]["error"]
    assert stored(settings, "chunks") == set()
    # The strategy's own refusal is recorded (the next run leaves it while it would recur); the
    # store's refusal is not: it may be the store's passing trouble, so the next run retries it.
    from resources.store import ChunkStore

    assert set(ChunkStore(settings.db_path).strategy_failures()["recursive"]) == {"slow.txt"}

    # Alone, it fails its run, with the cause on its check.
    job = build_project(settings).defs.resolve_job_def(INGEST_JOB)
    alone = job.execute_in_process(instance=instance, partition_key="sub/beta.txt", raise_on_error=False)
    assert not alone.success
    failures = {e.step_key: e.event_specific_data for e in alone.all_events
                if e.event_type == DagsterEventType.STEP_FAILURE}
    assert failures["chunks_recursive"].user_failure_data.metadata["document"].value == "sub/beta.txt"
    assert "could not be stored" in latest_check_description(instance, "chunks_recursive", "coverage", "sub/beta.txt")


def test_vectors_the_store_refuses_fail_their_documents_check(settings, instance, docs_dir, monkeypatch):
    from resources.store import ChunkStore

    real = ChunkStore.replacing_embeddings

    def replacing_embeddings(self, strategy, model_id, items, failures=None, embed_version=None):
        write = real(self, strategy, model_id, items, failures, embed_version)

        def refusing(con):
            if "sub/beta.txt" in items:
                raise duckdb.ConversionException("a value the store cannot take")
            write(con)

        return refusing

    monkeypatch.setattr(ChunkStore, "replacing_embeddings", replacing_embeddings)
    instance.add_dynamic_partitions("documents", list(DOCS[::2]))
    job = build_project(settings).defs.resolve_job_def(INGEST_JOB)
    alone = job.execute_in_process(instance=instance, partition_key="sub/beta.txt", raise_on_error=False)
    assert not alone.success  # before: a step failure with no document, or "nothing to check" passed
    description = latest_check_description(instance, "embeddings_recursive", "embeddings_complete", "sub/beta.txt")
    assert description.startswith("sub/beta.txt: recursive vectors could not be stored (nothing of them was): "
                                  "ConversionException")
    failures = {e.step_key: e.event_specific_data for e in alone.all_events
                if e.event_type == DagsterEventType.STEP_FAILURE}
    assert failures["embeddings_recursive"].user_failure_data.metadata["document"].value == "sub/beta.txt"

    both = job.execute_in_process(instance=instance, tags={"dagster/asset_partition_range_start": "alpha.md",
                                                           "dagster/asset_partition_range_end": "sub/beta.txt"},
                                  raise_on_error=False)
    assert both.success
    checks = check_results(both, "embeddings_recursive", "embeddings_complete")
    assert checks["alpha.md"][0] is True and checks["sub/beta.txt"][0] is False
    assert stored(settings, "embeddings") == {"alpha.md"}
