"""retrieval_eval in a real materialization: after ingest, with history and the recall guard."""

import json

import duckdb
import pytest
from dagster import AssetCheckSeverity, AssetKey, DagsterEventType, materialize

from orchestration.definitions import INGEST_JOB, build_project
from search.evaluation import leaders_line

pytestmark = pytest.mark.model

STRATEGIES = ["recursive", "sentence_window"]


@pytest.fixture
def eval_project(settings, tmp_path):
    eval_set = tmp_path / "eval.jsonl"
    eval_set.write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in [
        {"id": "a1", "question": "Which strategy prefers paragraph boundaries over spaces?",
         "references": [{"doc": "alpha.md", "excerpt": "recursive\nstrategy has paragraph boundaries to prefer"}]},
        {"id": "b1", "question": "When do the boats come back?",
         "references": [{"doc": "sub/beta.txt", "excerpt": "the boats come back before dark"}]},
        {"id": "gone", "question": "Not there", "references": [{"doc": "missing.md", "excerpt": "x"}]},
    ]) + "\n", encoding="utf-8")
    s = settings.model_copy(update={"eval_set": str(eval_set), "enabled_strategies": STRATEGIES})
    return build_project(s), s


def materialize_eval(project, instance):
    defs = project.defs
    return materialize(
        [defs.get_assets_def(AssetKey("retrieval_eval"))], instance=instance, resources=defs.resources,
        raise_on_error=False,
    )


def test_retrieval_eval_depends_on_every_embeddings_asset(eval_project):
    project, _ = eval_project
    node = project.defs.get_assets_def(AssetKey("retrieval_eval"))
    deps = {k.path[-1] for k in node.asset_deps[AssetKey("retrieval_eval")]}
    assert deps == {f"embeddings_{s}" for s in STRATEGIES}


def test_retrieval_eval_materializes_scores_history_and_warns_on_a_recall_drop(eval_project, instance):
    project, settings = eval_project
    instance.add_dynamic_partitions("documents", ["alpha.md", "sub/beta.txt"])
    job = project.defs.resolve_job_def(INGEST_JOB)
    ingest = job.execute_in_process(instance=instance, raise_on_error=False, tags={
        "dagster/asset_partition_range_start": "alpha.md", "dagster/asset_partition_range_end": "sub/beta.txt"})
    assert ingest.success

    first = materialize_eval(project, instance)
    assert first.success
    mat = first.asset_materializations_for_node("retrieval_eval")[0]
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert meta["questions"] == 2 and meta["skipped_questions"] == 1
    for s in STRATEGIES:
        assert 0.0 <= meta[f"recall@5/{s}"] <= 1.0 and 0.0 <= meta[f"iou@5/{s}"] <= 1.0
        assert f"| {s} | 5 |" in meta["table"]
    with duckdb.connect(settings.db_path, read_only=True) as con:
        rows = con.execute("SELECT strategy, k, questions FROM retrieval_eval ORDER BY 1, 2").fetchall()
        assert rows == [(s, k, 2) for s in sorted(STRATEGIES) for k in (1, 3, 5, 10)]
        at5 = con.execute("SELECT strategy, recall, iou FROM retrieval_eval WHERE k = 5 ORDER BY 1").fetchall()
    # Who leads on recall@5 and IoU@5 at once, from the unrounded scores the history holds.
    assert meta["leaders@5"] == leaders_line({s: (recall, iou) for s, recall, iou in at5}, 5)
    best = max(recall for _, recall, _ in at5)
    tied = ", ".join(s for s, recall, _ in at5 if recall == best)  # every strategy at the best, named
    assert f"best recall@5: {tied} {best:.4f}" in meta["leaders@5"]
    checks = [e.event_specific_data for e in first.all_events
              if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION]
    assert [(c.check_name, c.passed) for c in checks] == [("recall_at_5_stable", True)]

    # Fake a previous evaluation 0.5 above this one: the same store now scores 0.5 lower on recall@5.
    with duckdb.connect(settings.db_path) as con:
        con.execute("UPDATE retrieval_eval SET recall = recall + 0.5")
    second = materialize_eval(project, instance)
    assert second.success  # a WARN check does not fail the run
    check = [e.event_specific_data for e in second.all_events
             if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION][0]
    assert check.passed is False and check.severity == AssetCheckSeverity.WARN
    assert all(f"{s} " in check.description for s in STRATEGIES)
    with duckdb.connect(settings.db_path, read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT run_id) FROM retrieval_eval").fetchone()[0] == 2


def test_an_eval_set_about_other_documents_is_reported_not_failed(eval_project, instance):
    # "Materialize all" in the UI includes retrieval_eval: on a folder the eval set does not
    # cover, it says so on the asset instead of failing the user's run.
    project, settings = eval_project
    instance.add_dynamic_partitions("documents", ["alpha.md"])
    job = project.defs.resolve_job_def(INGEST_JOB)
    assert job.execute_in_process(instance=instance, partition_key="alpha.md").success
    with duckdb.connect(settings.db_path) as con:  # nothing the eval set asks about is stored now
        con.execute("UPDATE documents SET status = 'error'")
    result = materialize_eval(project, instance)
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("retrieval_eval")[0].metadata.items()}
    assert meta["questions"] == 0 and meta["skipped_questions"] > 0
    assert "not in this store" in meta["not_evaluated"] and "eval_set" in meta["not_evaluated"]
    with duckdb.connect(settings.db_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM retrieval_eval").fetchone()[0] == 0  # no history row


def test_the_not_evaluated_note_tells_its_causes_apart():
    from assets.evaluation import not_evaluated_note

    assert not_evaluated_note("e.jsonl", 0, {}) == "e.jsonl: the eval set holds no question"
    assert "2 skipped: their documents are not in this store" in not_evaluated_note(
        "e.jsonl", 2, {"a": "document 'x' is not in the store", "b": "document 'y' is not in the store"})
    # Every question resolved, nothing to search with this model (embedding_model changed): not "0 skipped".
    note = not_evaluated_note("e.jsonl", 3, {}, "new-model:float32")
    assert note.startswith("e.jsonl: no strategy of this store has chunks embedded by new-model:float32") and "skipped" not in note
