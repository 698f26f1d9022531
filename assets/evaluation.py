"""``retrieval_eval``: every strategy scored on an eval set, with history and a recall guard.

Depends on every ``embeddings_*`` asset. Reads the eval set (settings ``eval_set``),
searches each strategy's chunks in the store (search/engine.py), scores them at
k = 1, 3, 5, 10 (search/metrics.py), appends the rows to the ``retrieval_eval``
table and shows the k=5 table in the UI. Numeric metadata ``recall@5/<strategy>``
and ``iou@5/<strategy>`` is what Dagster plots over materializations. The check
``recall_at_5_stable`` warns when a strategy's recall@5 fell by more than 2 points
since the previous evaluation of the same eval set (the same content, by sha256, wherever
the file is: an edited set starts a history of its own), mode and model.
"""

from datetime import datetime, timezone
from typing import Iterator, Sequence

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from resources.embedding import EmbeddingModelResource
from resources.store import StoreResource
from search.engine import SearchIndex
from search.evaluation import (
    DEFAULT_KS,
    EvalSetError,
    evaluate,
    file_sha256,
    load_eval_set,
    leaders_line,
    markdown_table,
    mode_label,
    previous_recall,
    recall_drops,
    record_report,
)

RETRIEVAL_EVAL = "retrieval_eval"
RECALL_CHECK = "recall_at_5_stable"


def build_retrieval_eval_asset(
    embedding_keys: Sequence[AssetKey], *, eval_set: str, mode: str = "vector", ks: Sequence[int] = DEFAULT_KS,
    skip_covered: float | None = None, within: str | None = None, within_depth: int = 10, within_rank: str = "fine",
    configured: Sequence[str] | None = None,
) -> AssetsDefinition:
    """``skip_covered``: score the overlap-aware top k (settings ``search_skip_covered``); ``within``,
    ``within_depth``, ``within_rank``: coarse-to-fine search (settings ``search_within*``). The
    history's mode names them (``mode_label``), so the recall check compares like with like.
    ``configured``: the strategies and variants of the configuration; one stored from an earlier
    configuration is not scored."""
    options = {"skip_covered": skip_covered, "within": within, "within_depth": within_depth,
               "within_rank": within_rank}
    label = mode_label(mode, **options)

    @asset(
        name=RETRIEVAL_EVAL,
        deps=list(embedding_keys),
        pool="duckdb",
        kinds={"duckdb"},
        group_name="evaluation",
        check_specs=[AssetCheckSpec(
            RECALL_CHECK, asset=RETRIEVAL_EVAL,
            description="WARN when a strategy's recall@5 fell by more than 2 points since the previous evaluation.",
        )],
        description=f"Retrieval quality of every strategy on the eval set `{eval_set}` ({label} search): "
                    "character recall / precision / IoU, MRR and nDCG at k = " + ", ".join(map(str, ks)),
        metadata={"eval_set": eval_set, "mode": label},
    )
    def retrieval_eval(
        context: AssetExecutionContext, store: StoreResource, embedding: EmbeddingModelResource
    ) -> Iterator[object]:
        try:
            questions = load_eval_set(eval_set)
        except EvalSetError as exc:
            raise Failure(description=str(exc)) from exc
        chunk_store = store.store()
        model_id = embedding.model_id
        embed = (lambda texts: embedding.get_embedder().embed(texts)) if mode != "keyword" else None
        index = SearchIndex(store.path, model_id, embed=embed, lake=store.lake_config(), configured=configured)
        try:
            report = evaluate(index, questions, ks=ks, mode=mode, **options)
        finally:
            index.close()
        for qid, reason in report.skipped.items():
            context.log.warning(f"{eval_set}: question {qid} not scored: {reason}")
        # Why each left-out question was not scored, for the UI and `chunkyard eval` (which prints them).
        skipped = {"skipped": MetadataValue.json(report.skipped)} if report.skipped else {}
        if not report.rows or all(r.questions == 0 for r in report.rows):
            # The eval set is about documents this store does not hold (another folder, or
            # nothing ingested yet), or holds no question: say so on the asset rather than fail a
            # "Materialize all" of the user's own folder. Nothing is recorded in the history.
            note = not_evaluated_note(eval_set, len(questions), report.skipped, model_id)
            context.log.warning(note)
            yield MaterializeResult(asset_key=RETRIEVAL_EVAL, metadata={
                "questions": 0, "skipped_questions": len(report.skipped), "not_evaluated": note, **skipped})
            yield AssetCheckResult(asset_key=RETRIEVAL_EVAL, check_name=RECALL_CHECK, passed=True,
                                   severity=AssetCheckSeverity.WARN, description=f"not evaluated: {note}")
            return
        eval_set_sha256 = file_sha256(eval_set)
        previous = previous_recall(chunk_store, eval_set_sha256=eval_set_sha256, mode=label, model_id=model_id)
        record_report(
            chunk_store, report, run_id=context.run.run_id, eval_set=eval_set, eval_set_sha256=eval_set_sha256,
            model_id=model_id, evaluated_at=datetime.now(timezone.utc).replace(tzinfo=None),
        )
        at5 = report.at(5)
        drops = recall_drops(previous, {name: row.recall for name, row in at5.items()})
        metadata = {
            "table": MetadataValue.md(markdown_table(report, ks=(5,))),
            "table_all_k": MetadataValue.md(markdown_table(report, ks=ks)),
            "questions": max(r.questions for r in report.rows),
            "skipped_questions": len(report.skipped),
            **skipped,
            "model_id": model_id,
            # Which strategy, if any, retrieves best by recall and by IoU at once (unrounded).
            "leaders@5": leaders_line({name: (row.recall, row.iou) for name, row in at5.items()}, 5),
        }
        for name, row in sorted(at5.items()):
            metadata[f"recall@5/{name}"] = round(row.recall, 4)
            metadata[f"iou@5/{name}"] = round(row.iou, 4)
        yield MaterializeResult(asset_key=RETRIEVAL_EVAL, metadata=metadata)
        yield AssetCheckResult(
            asset_key=RETRIEVAL_EVAL,
            check_name=RECALL_CHECK,
            passed=not drops,
            severity=AssetCheckSeverity.WARN,
            description=("recall@5 fell: " + ", ".join(f"{n} {a:.3f} -> {b:.3f}" for n, (a, b) in drops.items()))
            if drops else "no strategy's recall@5 fell by more than 2 points",
            metadata={"previous": MetadataValue.json(previous),
                      "current": MetadataValue.json({n: r.recall for n, r in at5.items()})},
        )

    return retrieval_eval


def not_evaluated_note(eval_set: str, questions: int, skipped: dict[str, str], model_id: str = "") -> str:
    """Why no question of ``eval_set`` could be scored, from the reasons of the skipped ones."""
    if not questions:
        return f"{eval_set}: the eval set holds no question"
    if not skipped:  # every question resolved, but there is nothing to search with this model
        return (f"{eval_set}: no strategy of this store has chunks embedded by {model_id or 'the configured model'} "
                "(a new embedding_model, or nothing embedded yet): run `chunkyard run` first")
    absent = sum(1 for reason in skipped.values() if reason.startswith("document "))
    if absent == len(skipped):
        why = "their documents are not in this store"
    else:
        first_other = next(reason for reason in skipped.values() if not reason.startswith("document "))
        why = (f"{absent} of them about documents this store does not hold, "
               f"{len(skipped) - absent} unresolved in the stored text, e.g. {first_other}")
    return (f"{eval_set}: no question could be scored ({len(skipped)} skipped: {why}); set eval_set in "
            "chunkyard.toml to an eval set of this folder")
