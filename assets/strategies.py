"""One factory, driven by the strategy registry: a ``chunks_<strategy>`` and an
``embeddings_<strategy>`` asset per strategy, each partitioned by document.

Each strategy is its own lineage branch with its own checks, metadata and code
version (the hash of its config, so a config change marks its chunks stale). All
of them write the shared ``chunks`` / ``embeddings`` tables, keyed by strategy.
"""


import time
import traceback
from typing import Iterator, Mapping

import numpy as np
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    Failure,
    asset,
)
from pydantic import BaseModel

from assets.checks import (
    CheckDef,
    CheckOutcome,
    check_coverage,
    check_markup,
    check_embeddings,
    check_model_max_sequence,
    check_no_empty_chunks,
    check_specs,
    check_token_cap,
    emit_partition_results,
    record_failed_partition,
)
from assets.costs import StageCost, Stopwatch, ingest_id_of, record_stage_costs, share_out
from assets.documents import parsed_documents
from assets.embed_groups import embed_in_groups
from assets.partitions import DOCUMENT_ASSET_ARGS
from chunking.embedding import RecordingEmbedder
from chunking.limits import LimitExceeded, check_chunk_count, check_time_budget, time_budget
from chunking.model import Chunk
from chunking.strategies import DEFAULT_TOKENIZER_ENCODING, StrategySpec, config_hash, token_cap
from resources.documents import DocumentsFolder
from resources.embedding import EmbeddingModelResource
from resources.store import ChunkStore, StoreResource, Write
from resources.tokenizer import TokenizerResource
from search.context import EmbedContext, embed_rows, with_context


CHUNK_CHECKS = (
    CheckDef("token_cap", "Every chunk is within the strategy's hard token cap (figure chunks exempt).", blocking=True),
    CheckDef("no_empty_chunks", "No chunk is empty or whitespace only."),
    CheckDef("coverage", "No text lost: every non-whitespace character of the parsed text is in some chunk's span."),
    CheckDef("markup_intact", "No <table>/<figure> cut by a chunk boundary (ERROR for tags the strategy keeps whole)."),
)
EMBEDDING_CHECKS = (
    CheckDef("embeddings_complete", "One finite vector of the model's dimension per chunk."),
    CheckDef("within_model_max_sequence", "WARN when a chunk is longer than the model's max sequence (truncated)."),
)


def chunk_outcomes(text: str, chunks: list[Chunk], cap: int | None, atomic: tuple[str, ...]) -> list[CheckOutcome]:
    return [
        check_token_cap("token_cap", [c.token_count for c in chunks],
                        [bool(c.metadata.get("cap_exempt")) for c in chunks], cap),
        check_no_empty_chunks("no_empty_chunks", [c.text for c in chunks]),
        check_coverage("coverage", text, [(c.char_start, c.char_end) for c in chunks]),
        check_markup("markup_intact", [c.text for c in chunks],
                     [bool(c.metadata.get("table_fragment")) for c in chunks], atomic),
    ]


def chunking_failed(error: str, stored: tuple[str, str] | None, doc_sha256: str, cfg_hash: str) -> CheckOutcome:
    """The check a document whose chunks could not be made or stored fails: the cause, and what
    of it stays stored (``stored``: the (doc sha256, config hash) of its chunks in the store).

    ``coverage``, because this run put none of its text in a chunk. The other checks are not
    evaluated: there are no new chunks to evaluate them on. Search reads the chunks of a
    document's current text (``current_chunks``), the embeddings step only those made under
    the current configuration as well, so what the earlier chunks still serve depends on them.
    """
    if stored is None:
        kept = "No chunks of it are stored for this strategy."
    elif stored == (doc_sha256, cfg_hash):
        kept = ("Its chunks from an earlier run, of this same text and configuration, are kept: search "
                "and the embeddings step still use them.")
    elif stored[0] == doc_sha256:
        kept = ("Its chunks made under an earlier configuration are kept: search still reads them, "
                "the embeddings step does not.")
    else:
        kept = "Its stored chunks are of its earlier text: kept, but neither searched nor embedded."
    return CheckOutcome("coverage", False, description=f"{error}. {kept}", metadata={"error": error})


def chunk_metadata(token_counts: list[int]) -> dict[str, int | float]:
    """One document's chunk numbers, as its partition's materialization metadata."""
    if not token_counts:
        return {"dagster/row_count": 0, "tokens_max": 0, "tokens_mean": 0.0, "tokens_p50": 0}
    return {
        "dagster/row_count": len(token_counts),
        "tokens_max": max(token_counts),
        "tokens_mean": round(float(np.mean(token_counts)), 1),
        "tokens_p50": int(np.percentile(token_counts, 50, method="lower")),
    }


def _chunks_write_of(
    chunk_store: ChunkStore, strategy: str, cfg_hash: str, model_id: str, seeded: dict[str, int],
):
    """For ``ChunkStore.write_documents``: the write of some documents' chunks (doc_id -> (chunks,
    doc_sha256, vectors its chunking computed)), the vectors included. The vectors each document
    added to the cache are counted in ``seeded[doc_id]`` (a text two documents share counts on
    the first), set afresh whenever the write runs."""
    def write_of(items: Mapping[str, tuple[list[Chunk], str, dict[str, np.ndarray]]]) -> Write:
        replace = chunk_store.replacing_chunks(strategy, {d: (chunks, sha) for d, (chunks, sha, _) in items.items()},
                                               config_hash=cfg_hash)
        known = {sha: v for _, _, vectors in items.values() for sha, v in vectors.items()}
        cache = chunk_store.caching_embeddings(model_id, known) if known else None

        def write(con) -> None:
            replace(con)
            added = cache(con) if cache is not None else set()
            for doc_id, (_, _, vectors) in items.items():
                seeded[doc_id] = len(added & set(vectors))
                added = added - set(vectors)

        return write

    return write_of


def build_strategy_assets(
    spec: StrategySpec, config: BaseModel, embedding_model_id: str, embed_context: EmbedContext | bool = False,
    name: str | None = None, tokenizer_encoding: str = DEFAULT_TOKENIZER_ENCODING,
) -> list[AssetsDefinition]:
    """The two assets of one strategy, configured with ``config``; ``embed_context``: embed each chunk
    with its document title and heading path prepended and/or its neighbouring text, or late-chunked
    in a window of its neighbours (an EmbedContext;
    ``True`` means the title and heading path only; search/context.py). ``name`` (default: the
    strategy's) names the assets ``chunks_<name>`` / ``embeddings_<name>`` and is the ``strategy``
    their rows carry in the store, so a variant of a strategy is a strategy of its own downstream.
    ``tokenizer_encoding``: the tokenizer resource's, part of the chunks' code version (``config_hash``)."""
    strategy_name = name or spec.name
    embed_context = EmbedContext.of(embed_context)
    chunks_key = AssetKey(f"chunks_{strategy_name}")
    embeddings_key = AssetKey(f"embeddings_{strategy_name}")
    cfg_hash = config_hash(config, tokenizer_encoding)
    # The embedder as the embeddings asset's code version names it: what a recorded embedding
    # failure is for (a new model or context is another try).
    embed_version = embedding_model_id + embed_context.code_version_suffix()
    cap = token_cap(config)

    def nothing_to_embed(document: dict | None, doc_id: str) -> str:
        """Why a document has no chunks to embed; the cause is reported where it happened."""
        if (document or {}).get("status") != "parsed":
            return (document or {}).get("error") or "not parsed"
        return (f"no {strategy_name} chunks of its current text and configuration "
                f"(see {chunks_key.to_user_string()}[{doc_id}])")

    @asset(
        name=chunks_key.path[-1],
        **DOCUMENT_ASSET_ARGS,
        group_name="chunks",
        deps=[parsed_documents],
        code_version=cfg_hash,
        check_specs=check_specs(chunks_key, CHUNK_CHECKS),
        automation_condition=AutomationCondition.eager(),
        description=f"Chunks of each document by `{strategy_name}`"
        + (f" (a variant of `{spec.name}`)" if strategy_name != spec.name else "") + f": {spec.description}",
        metadata={"strategy": spec.name, "config": config.model_dump(mode="json"), "config_hash": cfg_hash,
                  "token_cap": cap if cap is not None else "none"},
    )
    def chunks_asset(
        context: AssetExecutionContext,
        tokenizer: TokenizerResource,
        embedding: EmbeddingModelResource,
        store: StoreResource,
        documents: DocumentsFolder,
    ) -> Iterator[object]:
        step_started = time.perf_counter()
        chunk_store = store.store()
        tok = tokenizer.get_tokenizer()
        embedder = embedding.get_embedder() if spec.needs_embedder else None
        # A chunk whose text the strategy itself embedded (e.g. a one-sentence semantic
        # chunk) has its vector already: it seeds the cache the embeddings step reads.
        # Not when that step embeds the chunk with its context: the text differs.
        reuse_vectors = embedder is not None and not embed_context
        outcomes: dict[str, list[CheckOutcome]] = {}
        errors: dict[str, str] = {}
        metadata: dict[str, dict] = {}
        computed: dict[str, tuple] = {}  # doc_id -> (doc, chunks, seconds to compute them)
        to_write: dict[str, tuple] = {}  # doc_id -> (chunks, doc sha256, vectors from chunking)
        seeded: dict[str, int] = {}  # doc_id -> vectors this strategy's chunking added to the cache
        failed: dict[str, str] = {}  # doc_id -> its sha256: chunks not made or not stored
        failed_seconds = 0.0  # spent on documents whose chunks were not made or not stored
        limits = documents.document_limits()
        # Read once for the step (in lake mode every query costs catalog round trips).
        parses = chunk_store.load_parsed_of(context.partition_keys)
        unparsed = chunk_store.documents_of([d for d in context.partition_keys if d not in parses])
        for doc_id in context.partition_keys:
            started = time.perf_counter()
            doc = parses.get(doc_id)
            if doc is None:
                row = unparsed.get(doc_id) or {}
                errors[doc_id] = f"{doc_id}: no parsed text to chunk: {row.get('error') or 'it has not been parsed'}"
                # A parse failure was reported where it happened; here it is only context.
                (context.log.info if row.get("status") == "error" else context.log.warning)(errors[doc_id])
                metadata[doc_id] = {"error": errors[doc_id]}
                continue
            doc_embedder = RecordingEmbedder(embedder, limit=limits.max_chunks) if reuse_vectors else embedder
            source = doc.source_name or doc_id
            try:
                with time_budget(source, "chunk_timeout_s", f"{strategy_name} chunking time", limits.chunk_timeout_s):
                    chunks = spec.chunk(doc, config, tok, doc_embedder)
                    # Strategies without a model check nowhere inside (they run in multiples of one
                    # encode): held to the limit when they return, before anything is stored.
                    check_time_budget()
                check_chunk_count(len(chunks), limits.max_chunks, source)
            except Exception as exc:  # one document's failure must not stop the batch
                errors[doc_id] = f"{doc.source_name or doc_id}: {strategy_name} failed: {type(exc).__name__}: {exc}"
                context.log.error(errors[doc_id])
                if not isinstance(exc, LimitExceeded):  # a bug: its trace in the run's event log, not the terminal
                    context.log.debug(f"{strategy_name} on {doc_id}:\n{''.join(traceback.format_exception(exc))}")
                metadata[doc_id] = {"error": errors[doc_id]}
                failed[doc_id] = doc.sha256
                failed_seconds += time.perf_counter() - started  # its own, not the others' overhead
                continue
            # The vectors this strategy already computed for whole chunk texts go to the cache,
            # so the embeddings step counts them as hits; the run report adds them up.
            known = doc_embedder.vectors_for({c.text_sha256: c.text for c in chunks}) if reuse_vectors else {}
            to_write[doc_id] = (chunks, doc.sha256, known)
            computed[doc_id] = (doc, chunks, time.perf_counter() - started)
        # Every computed document's rows in one transaction: one commit per step, not per document.
        written = time.perf_counter()
        write_failures = chunk_store.write_documents(
            to_write, _chunks_write_of(chunk_store, strategy_name, cfg_hash, embedding.model_id, seeded))
        store_share = share_out(time.perf_counter() - written, {d: len(computed[d][1]) for d in computed})
        own_seconds: dict[str, float] = {}  # chunking, storing and checking one document
        for doc_id, (doc, chunks, compute_seconds) in computed.items():
            if doc_id in write_failures:
                exc = write_failures[doc_id]
                errors[doc_id] = (f"{doc.source_name or doc_id}: {strategy_name} chunks could not be stored "
                                  f"(nothing of them was): {type(exc).__name__}: {exc}")
                context.log.error(errors[doc_id])
                metadata[doc_id] = {"error": errors[doc_id]}
                failed[doc_id] = doc.sha256
                continue
            checked = time.perf_counter()
            outcomes[doc_id] = chunk_outcomes(doc.text, chunks, cap, spec.atomic_markup)
            own_seconds[doc_id] = compute_seconds + store_share[doc_id] + time.perf_counter() - checked
        # What the step did for no document in particular (loading the model, the tokenizer, the
        # parses) is shared equally, so the documents' seconds of one step add up to its work.
        failed_seconds += sum(computed[d][2] + store_share[d] for d in write_failures if d in computed)
        overhead = share_out(max(time.perf_counter() - step_started - sum(own_seconds.values()) - failed_seconds, 0.0),
                             dict.fromkeys(own_seconds, 1.0))
        costs: list[StageCost] = []
        for doc_id, seconds in own_seconds.items():
            doc, chunks, _ = computed[doc_id]
            cost = StageCost(doc_id, "chunk", strategy_name, seconds + overhead[doc_id], store_share[doc_id])
            costs.append(cost)
            from_chunking = {"vectors_from_chunking": seeded.get(doc_id, 0)} if reuse_vectors else {}
            metadata[doc_id] = {**chunk_metadata([c.token_count for c in chunks]), **cost.metadata(), **from_chunking}
        record_stage_costs(chunk_store, context.run.run_id, ingest_id_of(context), costs)
        stored = chunk_store.chunk_state(strategy_name) if failed else {}
        for doc_id, doc_sha256 in failed.items():
            outcomes[doc_id] = [chunking_failed(errors[doc_id], stored.get(doc_id), doc_sha256, cfg_hash)]
        # In the store too: what the next run retries (a limit since raised) or leaves (the same
        # failure again), whether this ran in a batch or alone, and what `status` lists. Not a
        # write the store refused: that may be the store's passing trouble, so it is retried.
        recorded = {doc_id: (sha, cfg_hash, errors[doc_id]) for doc_id, sha in failed.items() if doc_id not in write_failures}
        # Chunks stored but refused by a blocking check (over the cap: a strategy's bug): recorded as its
        # failure too, so `status` lists it and no plan asks again for what the check will skip again
        # (its embeddings, which the failed check blocks, and in a range run its batch-mates' too).
        blocking = {d.name for d in CHUNK_CHECKS if d.blocking}
        for doc_id, checks in outcomes.items():
            refused = [o for o in checks if o.name in blocking and not o.passed]
            if refused and doc_id in computed and doc_id not in recorded:
                source = computed[doc_id][0].source_name or doc_id
                recorded[doc_id] = (computed[doc_id][0].sha256, cfg_hash,
                                    f"{source}: {strategy_name} chunks refused by the {refused[0].name} check: "
                                    f"{refused[0].description}")
        chunk_store.record_strategy_failures(strategy_name, recorded)
        if errors and len(context.partition_keys) == 1:
            doc_id, error = next(iter(errors.items()))
            if doc_id in outcomes:  # not an unparsed document: its parse check already says why
                record_failed_partition(context, chunks_key, outcomes[doc_id][0])
            raise Failure(description=error, metadata={"document": doc_id, "error": error})
        yield from emit_partition_results(
            context, chunks_key, CHUNK_CHECKS, outcomes, metadata, shared_metadata={"config_hash": cfg_hash}
        )

    @asset(
        name=embeddings_key.path[-1],
        **DOCUMENT_ASSET_ARGS,
        group_name="embeddings",
        deps=[chunks_asset],
        code_version=embed_version,
        check_specs=check_specs(embeddings_key, EMBEDDING_CHECKS),
        automation_condition=AutomationCondition.eager(),
        description=f"Vectors of the `{strategy_name}` chunks; cached by (model id, sha256 of chunk text).",
        metadata={"strategy": spec.name},
    )
    def embeddings_asset(
        context: AssetExecutionContext, embedding: EmbeddingModelResource, store: StoreResource,
        documents: DocumentsFolder,
    ) -> Iterator[object]:
        step_started = time.perf_counter()
        chunk_store = store.store()
        model_id = embedding.model_id
        # What the store records as the embedder of these vectors: as configured, host-independent.
        stored_version = embedding.embedder_identity + embed_context.code_version_suffix()
        per_doc, store_watch = Stopwatch(), Stopwatch()  # work done for one document: its own seconds
        # A document that failed to parse has nothing to embed and nothing to check.
        # Read once for the step (in lake mode every query costs catalog round trips).
        document_rows = chunk_store.documents_of(context.partition_keys)
        # Only chunks of the current parse and configuration: a document whose latest chunking
        # failed keeps its earlier chunks in the store, and vectors of those would pass its check
        # untruthfully.
        rows_by_doc = {
            d: rows for d, rows in chunk_store.load_chunks_of(
                [d for d in context.partition_keys if (document_rows.get(d) or {}).get("status") == "parsed"],
                strategy_name, config_hash=cfg_hash).items()
            if rows
        }
        embedder = embedding.get_embedder()
        if embed_context:  # the embedded text (and so its cache key) gains the headings and/or neighbours
            rows_by_doc = {d: with_context(chunk_store, d, strategy_name, rows, embed_context, embedder)
                           for d, rows in rows_by_doc.items()}
        all_hashes = [c.text_sha256 for rows in rows_by_doc.values() for c in rows]
        cached = chunk_store.cached_embeddings(model_id, all_hashes)
        limits = documents.document_limits()
        outcomes: dict[str, list[CheckOutcome]] = {}
        metadata: dict[str, dict] = {
            doc_id: {"error": f"{doc_id}: nothing to embed: {nothing_to_embed(document_rows.get(doc_id), doc_id)}"}
            for doc_id in context.partition_keys if doc_id not in rows_by_doc
        }
        # Small documents share a model call (throughput), large ones get their own; every call
        # runs under the time budget, and a document over it fails alone (assets/embed_groups.py).
        needs = {doc_id: {c.text_sha256: c for c in rows} for doc_id, rows in rows_by_doc.items()}
        fresh, model_seconds_of, refused = embed_in_groups(
            needs, set(cached), lambda rows: embed_rows(embedder, rows),
            lambda label: time_budget(label, "embed_timeout_s", f"{strategy_name} embedding time",
                                      limits.embed_timeout_s),
            lambda row: row.text)
        vector_of: dict[str, np.ndarray] = {**cached, **fresh}
        new_by_doc: dict[str, set[str]] = {}
        to_write: dict[str, tuple] = {}  # doc_id -> (rows, the vectors embedded for it)
        # doc_id -> (its data version, chunk config hash, embedder, error): recorded with the write, so
        # the next run leaves it (the same refusal again) or retries it (a limit since raised).
        refusals: dict[str, tuple[str, str, str, str]] = {}
        counted_fresh: set[str] = set()  # a text embedded once for the batch counts on its first document
        for doc_id, rows in list(rows_by_doc.items()):
            if doc_id in refused:  # this document alone
                context.log.error(refused[doc_id])
                metadata[doc_id] = {"error": refused[doc_id], "model_seconds": round(model_seconds_of[doc_id], 3)}
                outcomes[doc_id] = [CheckOutcome("embeddings_complete", False, description=refused[doc_id])]
                # Its earlier vectors are removed, not kept: they belong to its earlier chunks (the
                # chunk step has replaced them), and search pairs vectors with chunks by position.
                to_write[doc_id] = ([], {})
                refusals[doc_id] = ((document_rows.get(doc_id) or {}).get("sha256") or "", cfg_hash, stored_version,
                                    refused[doc_id])
                del rows_by_doc[doc_id]
                continue
            doc_fresh = {c.text_sha256: fresh[c.text_sha256] for c in rows if c.text_sha256 in fresh}
            to_write[doc_id] = ([(c.chunk_index, c.text_sha256, vector_of[c.text_sha256]) for c in rows], doc_fresh)
            new_by_doc[doc_id] = set(doc_fresh) - counted_fresh
            counted_fresh |= new_by_doc[doc_id]
        # Every document's vectors in one transaction: one commit per step, not per document;
        # each document's share of it follows its number of chunks.
        written = time.perf_counter()
        write_failures = chunk_store.write_documents(
            to_write, lambda items: chunk_store.replacing_embeddings(strategy_name, model_id, items, refusals,
                                                                stored_version))
        write_seconds = time.perf_counter() - written
        for doc_id, seconds in share_out(write_seconds, {d: len(rows) for d, rows in rows_by_doc.items()}).items():
            store_watch.add(doc_id, seconds)
            per_doc.add(doc_id, seconds)
        stored_vectors = chunk_store.load_embeddings_of([d for d in rows_by_doc if d not in write_failures], strategy_name)
        for doc_id, rows in rows_by_doc.items():
            if doc_id in write_failures:
                exc = write_failures[doc_id]
                refused[doc_id] = (f"{doc_id}: {strategy_name} vectors could not be stored (nothing of them "
                                   f"was): {type(exc).__name__}: {exc}")
                metadata[doc_id] = {"error": refused[doc_id]}
                outcomes[doc_id] = [CheckOutcome("embeddings_complete", False, description=refused[doc_id])]
                context.log.error(refused[doc_id])
                continue
            doc_started = time.perf_counter()
            stored = [v for _, v in stored_vectors[doc_id]]
            model_tokens = [embedder.count_model_tokens(c.text) for c in rows]
            outcomes[doc_id] = [
                check_embeddings("embeddings_complete", len(rows), stored, embedder.dimension),
                check_model_max_sequence("within_model_max_sequence", model_tokens, embedder.max_seq_length),
            ]
            metadata[doc_id] = {
                "dagster/row_count": len(stored),
                "new_embeddings": len(new_by_doc[doc_id]),
                "cache_hits": sum(1 for c in rows if c.text_sha256 in cached),
                "model_tokens_max": max(model_tokens, default=0),
            }
            per_doc.add(doc_id, time.perf_counter() - doc_started)
        # Model seconds: measured for a document alone in its call, shared by characters within a
        # group's call; what the step did for all documents at once (loading their chunks, the
        # cache lookup, loading the model) is shared equally.
        model_share = {d: model_seconds_of.get(d, 0.0) for d in rows_by_doc}
        # A refused document's model seconds are its own, not overhead of the others.
        unattributed = time.perf_counter() - step_started - sum(per_doc.seconds.values()) - sum(model_seconds_of.values())
        overhead = share_out(max(unattributed, 0.0), dict.fromkeys(rows_by_doc, 1.0))
        costs = [
            StageCost(d, "embed", strategy_name, per_doc.get(d) + model_share[d] + overhead[d], store_watch.get(d),
                      model_seconds=model_share[d], new_embeddings=metadata[d]["new_embeddings"],
                      cache_hits=metadata[d]["cache_hits"])
            for d in rows_by_doc if d not in write_failures
        ]
        for cost in costs:
            metadata[cost.doc_id].update(cost.metadata())
        record_stage_costs(chunk_store, context.run.run_id, ingest_id_of(context), costs)
        if refused and len(context.partition_keys) == 1:
            doc_id, error = next(iter(refused.items()))
            record_failed_partition(context, embeddings_key, outcomes[doc_id][0])
            raise Failure(description=error, metadata={"document": doc_id, "error": error})
        yield from emit_partition_results(
            context, embeddings_key, EMBEDDING_CHECKS, outcomes, metadata,
            shared_metadata={"model_id": model_id, "dimension": embedder.dimension},
        )

    return [chunks_asset, embeddings_asset]

