"""Check logic as plain functions, and the token-cap check failing and blocking for real."""

import numpy as np
from dagster import AssetCheckSeverity, AssetKey, DagsterEventType, Definitions, in_process_executor
from pydantic import BaseModel, ConfigDict

from assets.checks import (
    check_coverage,
    check_embeddings,
    check_model_max_sequence,
    check_no_empty_chunks,
    check_token_cap,
    uncovered_characters,
)
from assets.documents import parsed_documents, raw_documents
from assets.strategies import build_strategy_assets
from chunking.model import Chunk
from chunking.strategies import StrategySpec
from orchestration.definitions import build_project


def test_token_cap_outcomes():
    assert check_token_cap("c", [10, 20], [False, False], 20).passed
    failed = check_token_cap("c", [10, 21, 30], [False, False, True], 20)
    assert not failed.passed and failed.severity == AssetCheckSeverity.ERROR
    assert failed.metadata["over_cap_chunks"] == [1]  # the exempt figure chunk (30) is not counted
    assert check_token_cap("c", [10_000], [False], None).passed


def test_no_empty_chunks():
    assert check_no_empty_chunks("c", ["a", "b"]).passed
    assert check_no_empty_chunks("c", ["a", " \n"]).metadata["empty_chunks"] == [1]


def test_coverage_finds_lost_text_and_ignores_whitespace():
    text = "abc  def\n\nghi"
    assert check_coverage("c", text, [(0, 3), (5, 8), (10, 13)]).passed
    lost = check_coverage("c", text, [(0, 3), (10, 13)])
    assert not lost.passed and lost.metadata["lost_characters"] == 3
    assert lost.metadata["first_gap_text"].strip() == "def"
    assert uncovered_characters(text, [(0, 13)]) == []
    assert uncovered_characters("abc", []) == [(0, 3)]


def test_embedding_outcomes():
    good = [np.ones(4, dtype=np.float32)] * 2
    assert check_embeddings("c", 2, good, 4).passed
    assert not check_embeddings("c", 3, good, 4).passed
    assert not check_embeddings("c", 2, [np.ones(3, dtype=np.float32)] * 2, 4).passed
    assert not check_embeddings("c", 1, [np.array([np.nan, 0, 0, 0], dtype=np.float32)], 4).passed


def test_max_sequence_is_a_warning():
    ok = check_model_max_sequence("c", [10, 256], 256)
    assert ok.passed
    warn = check_model_max_sequence("c", [10, 300, 257], 256)
    assert not warn.passed and warn.severity == AssetCheckSeverity.WARN
    assert warn.metadata["truncated_chunks"] == 2


class OversizedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    token_cap: int = 5


def chunk_whole_document_ignoring_cap(doc, config, tokenizer, embedder=None):
    # A deliberately broken strategy: one chunk with the whole text, whatever the cap.
    return [Chunk(text=doc.text.strip(), char_start=0, char_end=len(doc.text), token_count=len(tokenizer.encode(doc.text)),
                  verbatim=False)]


def test_token_cap_check_fails_and_blocks_embedding(settings, instance):
    spec = StrategySpec("oversized", OversizedConfig, chunk_whole_document_ignoring_cap, "test: ignores its cap")
    project = build_project(settings)
    resources = project.defs.resources
    defs = Definitions(
        assets=[raw_documents, parsed_documents, *build_strategy_assets(spec, OversizedConfig(), "test-model")],
        resources=resources,
        executor=in_process_executor,
    )
    instance.add_dynamic_partitions("documents", ["alpha.md"])
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance, partition_key="alpha.md", raise_on_error=False)
    assert not result.success
    evaluation = next(
        e.event_specific_data for e in result.all_events
        if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION and e.event_specific_data.check_name == "token_cap"
    )
    assert not evaluation.passed
    assert evaluation.severity == AssetCheckSeverity.ERROR
    assert evaluation.partition == "alpha.md"
    # Blocking: the embeddings of the over-cap chunks were never computed.
    assert instance.get_materialized_partitions(AssetKey("embeddings_oversized")) == set()
    assert instance.get_materialized_partitions(AssetKey("parsed_documents")) == {"alpha.md"}


def test_markup_check_finds_cut_tables_and_figures():
    from assets.checks import check_markup, cut_tags

    assert cut_tags('<table id="t" format="json">[["a"]]</table> and <figure>x</figure>') == set()
    assert cut_tags('text <table id="t">[["a"],') == {"table"}
    assert cut_tags('["b"]]</table> tail') == {"table"}
    assert cut_tags('<figure src="x" /> self-closing') == set()
    whole = ['<table id="t">[["a"]]</table>', "plain"]
    assert check_markup("m", whole, [False, False], ("table",)).passed
    cut = ['<table id="t">[["a"],', '["b"]]</table>']
    promised = check_markup("m", cut, [False, False], ("table",))
    assert not promised.passed and promised.severity == AssetCheckSeverity.ERROR
    unaware = check_markup("m", cut, [False, False], ())
    assert not unaware.passed and unaware.severity == AssetCheckSeverity.WARN
    assert check_markup("m", cut, [True, True], ("table",)).passed  # documented degradation
