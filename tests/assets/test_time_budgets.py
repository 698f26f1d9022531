"""A document over its chunking or embedding time budget fails alone: its partition says which
limit refused it, the other documents of the batch are chunked and embedded, nothing of it is stored.

The steps' clock (``chunking.limits._clock``) is made to jump while the slow document is being
worked on, so no test waits for a real timeout."""

import time

import duckdb
import pytest
from dagster import AssetKey, DagsterEventType

import chunking.limits as limits
from orchestration.definitions import INGEST_JOB, build_project
from tests.assets.test_partition_truth import latest_check_description

RANGE = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
DOCS = ("alpha.md", "slow.txt", "sub/beta.txt")


class JumpingClock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def jump(self) -> None:
        self.offset += 10_000  # far past the default budgets (300 s)


@pytest.fixture
def clock(monkeypatch):
    jumping = JumpingClock()
    monkeypatch.setattr(limits, "_clock", jumping)
    return jumping


def run(settings, instance, first, last):
    instance.add_dynamic_partitions("documents", [d for d in DOCS if not instance.has_dynamic_partition("documents", d)])
    job = build_project(settings).defs.resolve_job_def(INGEST_JOB)
    return job.execute_in_process(instance=instance, tags={RANGE[0]: first, RANGE[1]: last}, raise_on_error=False)


def partition_metadata(result, asset_name):
    out = {}
    for event in result.all_events:
        if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            mat = event.event_specific_data.materialization
            if mat.asset_key.to_user_string() == asset_name:
                out[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
    return out


def check_results(result, asset_name, check_name):
    return {e.event_specific_data.partition: (e.event_specific_data.passed, e.event_specific_data.description)
            for e in result.all_events
            if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
            and e.event_specific_data.asset_key.to_user_string() == asset_name
            and e.event_specific_data.check_name == check_name}


def stored(settings, table, strategy="recursive"):
    with duckdb.connect(settings.db_path, read_only=True) as con:
        sql = f"SELECT DISTINCT doc_id FROM {table} WHERE strategy = ?"
        return {r[0] for r in con.execute(sql, [strategy]).fetchall()}


def test_a_document_over_its_embedding_budget_fails_alone(settings, instance, docs_dir, clock, monkeypatch):
    import assets.strategies as strategies

    # First stored in full (chunks and vectors), then edited into text the model is too slow on.
    (docs_dir / "slow.txt").write_text("Quick text that the model reads in time.", encoding="utf-8")
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    assert stored(settings, "embeddings") == set(DOCS)
    (docs_dir / "slow.txt").write_text("SLOW text that takes the model too long to read.", encoding="utf-8")
    real_embed_rows = strategies.embed_rows

    def embed_rows(embedder, rows):
        if any("SLOW" in r.text for r in rows):
            clock.jump()  # the model "takes" 10,000 s on this document; its next batch is refused
        return real_embed_rows(embedder, rows)

    monkeypatch.setattr(strategies, "embed_rows", embed_rows)
    result = run(settings, instance, "alpha.md", "sub/beta.txt")
    assert result.success, "one document over its budget must not fail the batch"
    error = partition_metadata(result, "embeddings_recursive")["slow.txt"]["error"]
    assert error == ("slow.txt: recursive embedding time is over the limit of 300 s "
                     "(raise limits.embed_timeout_s in chunkyard.toml to allow it)")
    checks = check_results(result, "embeddings_recursive", "embeddings_complete")
    assert checks["slow.txt"] == (False, error)
    assert checks["alpha.md"][0] is True and checks["sub/beta.txt"][0] is True
    assert stored(settings, "chunks") == set(DOCS)  # chunking was within its budget
    # Its earlier vectors went with its earlier chunks: no vectors rather than wrong ones.
    assert stored(settings, "embeddings") == {"alpha.md", "sub/beta.txt"}
    # The others' metadata is their own: served from the cache this time, no error of slow.txt's.
    others = partition_metadata(result, "embeddings_recursive")
    assert others["alpha.md"]["cache_hits"] >= 1 and "error" not in others["alpha.md"]

    # Alone, the document fails its own run, with the same message and its check failed.
    job = build_project(settings).defs.resolve_job_def(INGEST_JOB)
    alone = job.execute_in_process(instance=instance, partition_key="slow.txt", raise_on_error=False)
    assert not alone.success
    failures = {e.step_key: e.event_specific_data.error_display_string
                for e in alone.all_events if e.event_type == DagsterEventType.STEP_FAILURE}
    assert error in failures["embeddings_recursive"]  # every strategy's embeddings step: the model is slow on it
    assert latest_check_description(instance, "embeddings_recursive", "embeddings_complete", "slow.txt") == error


def test_an_embedding_refusal_is_recorded_left_alone_unchanged_and_retried_once_its_limit_is_raised(
        settings, instance, docs_dir, clock, monkeypatch):
    """In a batch the refused document's partition is materialized (its check failed), alone it is
    failed: either way the store records the refusal, so the next run leaves it (an unchanged folder
    is a no-op), `status` lists it, and raising embed_timeout_s embeds it again, and only that."""
    import assets.strategies as strategies
    from chunking.limits import DocumentLimits
    from orchestration.schedules import chunk_refresh, plan_refresh, recorded_failures
    from orchestration.status import stored_status
    from resources.store import ChunkStore

    (docs_dir / "slow.txt").write_text("SLOW text that takes the model too long to read.", encoding="utf-8")
    real_embed_rows = strategies.embed_rows
    slow = {"on": True}

    def embed_rows(embedder, rows):
        if slow["on"] and any("SLOW" in r.text for r in rows):
            clock.jump()
        return real_embed_rows(embedder, rows)

    monkeypatch.setattr(strategies, "embed_rows", embed_rows)
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    project = build_project(settings)
    store = ChunkStore(settings.db_path)
    failures = store.embedding_failures()
    strategies_ = set(project.config_hashes)  # every strategy's embeddings step reads it too slowly
    assert set(failures) == strategies_ and all(list(f) == ["slow.txt"] for f in failures.values())
    sha, cfg, version, error = failures["recursive"]["slow.txt"]
    assert (cfg, version) == (project.config_hashes["recursive"], project.embed_versions["recursive"])
    assert error.startswith("slow.txt: recursive embedding time is over the limit of 300 s")
    assert store.document("slow.txt")["sha256"] == sha

    def plan(limits):
        partitions = list(DOCS)
        materialized = {key: set(instance.get_materialized_partitions(key)) for key in project.graph_order}
        refresh = chunk_refresh(store, project.config_hashes, limits, project.embed_versions)
        return plan_refresh(partitions, materialized, project.graph_order, refresh.stale,
                            recorded_failures(store), settled_chunks=refresh.settled,
                            stale_embeddings=refresh.stale_embeddings, settled_embeddings=refresh.settled_embeddings)

    default, raised = DocumentLimits(), DocumentLimits(embed_timeout_s=20_000)
    assert plan(default) == {}, "the same refusal again: an unchanged folder is a no-op"
    assert {k.to_user_string() for k in plan(raised)["slow.txt"]} == {f"embeddings_{s}" for s in strategies_}
    assert list(plan(raised)) == ["slow.txt"]
    with store.connect(read_only=True) as con:
        [status] = stored_status(con)
    assert ("slow.txt", "[embed recursive] recursive embedding time is over the limit of 300 s "
            "(raise limits.embed_timeout_s in chunkyard.toml to allow it)") in status.failed

    # Alone, the refused document fails its partition: still left alone by the next plan.
    job = project.defs.resolve_job_def(INGEST_JOB)
    assert not job.execute_in_process(instance=instance, partition_key="slow.txt", raise_on_error=False).success
    assert plan(default) == {}
    assert {s: list(f) for s, f in store.embedding_failures().items()} == {s: ["slow.txt"] for s in strategies_}

    # The model fast again (a limit raised): its embeddings are stored and the refusal is gone.
    slow["on"] = False
    assert job.execute_in_process(instance=instance, partition_key="slow.txt", raise_on_error=False,
                                  asset_selection=[AssetKey(f"embeddings_{s}") for s in strategies_]).success
    assert store.embedding_failures() == {}
    assert stored(settings, "embeddings") == set(DOCS)
    assert plan(default) == {}


def test_a_document_over_its_chunking_budget_fails_alone(settings, instance, docs_dir, clock, monkeypatch):
    import chunking.strategies.recursive as recursive

    # First stored in full, then edited into text a strategy takes too long to chunk.
    (docs_dir / "slow.txt").write_text("Quick text that is chunked in time.", encoding="utf-8")
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    (docs_dir / "slow.txt").write_text("SLOW text that a strategy takes too long to chunk.", encoding="utf-8")
    real_split = recursive.split_recursive

    def split_recursive(text, *args, **kwargs):
        if "SLOW" in text:
            clock.jump()  # recursive checks nowhere inside: the step checks when it returns
        return real_split(text, *args, **kwargs)

    monkeypatch.setattr(recursive, "split_recursive", split_recursive)
    result = run(settings, instance, "alpha.md", "sub/beta.txt")
    assert result.success
    error = partition_metadata(result, "chunks_recursive")["slow.txt"]["error"]
    assert "slow.txt: recursive chunking time is over the limit of 300 s (raise limits.chunk_timeout_s" in error
    # Its partition's check says so (not only its metadata); the others' checks are their own.
    coverage = check_results(result, "chunks_recursive", "coverage")
    assert coverage["slow.txt"] == (
        False, f"{error}. Its stored chunks are of its earlier text: kept, but neither searched nor embedded.")
    assert coverage["alpha.md"][0] is True and coverage["sub/beta.txt"][0] is True
    assert "slow.txt" not in check_results(result, "chunks_recursive", "token_cap")  # nothing new to check
    # Nothing of the earlier version is lost, and nothing of it passes for the current text:
    # search and the embeddings step read only chunks of the current parse.
    assert stored(settings, "chunks") == set(DOCS)
    assert stored(settings, "current_chunks") == {"alpha.md", "sub/beta.txt"}
    embedded = partition_metadata(result, "embeddings_recursive")["slow.txt"]
    assert embedded["error"] == ("slow.txt: nothing to embed: no recursive chunks of its current text and "
                                 "configuration (see chunks_recursive[slow.txt])")
    assert "slow.txt" not in check_results(result, "embeddings_recursive", "embeddings_complete")
    assert check_results(result, "embeddings_recursive", "embeddings_complete")["alpha.md"][0] is True

    # Alone, the document fails its own run, with the same message on its check.
    job = build_project(settings).defs.resolve_job_def(INGEST_JOB)
    alone = job.execute_in_process(instance=instance, partition_key="slow.txt", raise_on_error=False)
    assert not alone.success
    assert latest_check_description(instance, "chunks_recursive", "coverage", "slow.txt").startswith(f"{error}. ")


def slow_to_chunk(clock, monkeypatch, marker="SLOW"):
    """From now on, ``recursive`` takes "10,000 s" on any text holding ``marker``."""
    import chunking.strategies.recursive as recursive

    real_split = recursive.split_recursive

    def split_recursive(text, *args, **kwargs):
        if marker in text:
            clock.jump()
        return real_split(text, *args, **kwargs)

    monkeypatch.setattr(recursive, "split_recursive", split_recursive)


def refused_when_chunked_again(settings, again, instance, docs_dir, clock, monkeypatch):
    """slow.txt stored in full under ``settings``, then refused when chunked again under ``again``:
    the run's result and slow.txt's failed coverage check's description."""
    (docs_dir / "slow.txt").write_text("SLOW text, chunked in time the first time.", encoding="utf-8")
    assert run(settings, instance, "alpha.md", "sub/beta.txt").success
    slow_to_chunk(clock, monkeypatch)
    result = run(again, instance, "alpha.md", "sub/beta.txt")
    assert result.success
    passed, description = check_results(result, "chunks_recursive", "coverage")["slow.txt"]
    assert not passed
    return result, description


def test_a_refusal_on_unchanged_text_and_configuration_says_the_earlier_chunks_still_serve(
        settings, instance, docs_dir, clock, monkeypatch):
    result, description = refused_when_chunked_again(settings, settings, instance, docs_dir, clock, monkeypatch)
    assert description.endswith("Its chunks from an earlier run, of this same text and configuration, are kept: "
                                "search and the embeddings step still use them.")
    # They are the chunks this configuration makes of this text: embedded (from the cache) and checked.
    assert stored(settings, "current_chunks") == set(DOCS)
    embedded = partition_metadata(result, "embeddings_recursive")["slow.txt"]
    assert "error" not in embedded and embedded["cache_hits"] >= 1
    assert check_results(result, "embeddings_recursive", "embeddings_complete")["slow.txt"][0] is True


def test_a_refusal_after_a_configuration_change_keeps_the_earlier_chunks_for_search_only(
        settings, instance, docs_dir, clock, monkeypatch):
    changed = settings.model_copy(update={"strategies": {"recursive": {"chunk_token_size": 30,
                                                                      "chunk_overlap_token_size": 8}}})
    result, description = refused_when_chunked_again(settings, changed, instance, docs_dir, clock, monkeypatch)
    assert description.endswith("Its chunks made under an earlier configuration are kept: search still reads "
                                "them, the embeddings step does not.")
    assert stored(settings, "current_chunks") == set(DOCS)  # same text: search still reads them
    assert "nothing to embed" in partition_metadata(result, "embeddings_recursive")["slow.txt"]["error"]
    assert "slow.txt" not in check_results(result, "embeddings_recursive", "embeddings_complete")
    assert check_results(result, "embeddings_recursive", "embeddings_complete")["alpha.md"][0] is True


def test_a_document_never_chunked_has_nothing_to_embed_and_no_check_passed(settings, instance, docs_dir, clock,
                                                                           monkeypatch):
    (docs_dir / "slow.txt").write_text("SLOW text that a strategy takes too long to chunk.", encoding="utf-8")
    slow_to_chunk(clock, monkeypatch)
    result = run(settings, instance, "alpha.md", "sub/beta.txt")
    assert result.success
    assert check_results(result, "chunks_recursive", "coverage")["slow.txt"][1].endswith(
        "No chunks of it are stored for this strategy.")
    assert stored(settings, "chunks") == {"alpha.md", "sub/beta.txt"}
    assert stored(settings, "embeddings") == {"alpha.md", "sub/beta.txt"}
    assert "nothing to embed" in partition_metadata(result, "embeddings_recursive")["slow.txt"]["error"]
    assert "slow.txt" not in check_results(result, "embeddings_recursive", "embeddings_complete")
