"""raw_documents -> parsed_documents: read the bytes, then parse them into pages,
blocks and tables (stored in DuckDB, sidecars exported beside the database).

A document that cannot be read or parsed fails alone: in a single-partition run
its step fails with a message naming the file and the cause; in a batched
(partition-range) run it is recorded as an error, its check fails for that
partition and its partition's metadata carries the cause (``error``), and the
other documents of the batch go on. Run alone, its failed check (with the cause)
is recorded on the partition before the step fails. Rows stored by an earlier
successful parse are kept, never half-replaced.
"""


import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AutomationCondition,
    DataVersion,
    Failure,
    asset,
)

from assets.checks import CheckDef, CheckOutcome, check_specs, emit_partition_results, record_failed_partition
from assets.costs import StageCost, ingest_id_of, record_stage_costs, share_out
from assets.partitions import DOCUMENT_ASSET_ARGS
from chunking.limits import DocumentLimits, LimitExceeded
from chunking.model import ParsedDocument
from chunking.parsers import DocumentError
from chunking.parsers.worker import parse_in_worker
from resources.documents import (
    DocumentsFolder, SourceFile, data_version, is_inside, sidecars_digest, source_fingerprint, unreadable_fingerprint,
)
from resources.store import ChunkStore, StoreResource, Write


RAW = AssetKey("raw_documents")
PARSED = AssetKey("parsed_documents")
RAW_CHECKS = (CheckDef("readable", "The file exists, is within the size limit and could be read."),)
PARSED_CHECKS = (CheckDef("parsed", "The document parsed into pages and blocks (else: the cause, naming the file)."),)


@dataclass(frozen=True)
class ReadOutcome:
    """What reading one document found. ``sha256`` is set whenever the file exists,
    refused or not, so a refusal is recorded for the bytes it refused (an unchanged
    refused file is then not re-run); ``error`` is why it is refused, if it is."""

    doc_id: str
    sha256: str | None
    size_bytes: int
    error: str | None


def read_source(doc_id: str, sources: dict[str, SourceFile], limits: DocumentLimits) -> ReadOutcome:
    """Hash one document's bytes (streamed, whatever their size), then say whether
    and why it is refused: a link out of the folder, or over ``limits.max_bytes``."""
    source = sources.get(doc_id)
    if source is None:
        return ReadOutcome(doc_id, None, 0, f"{doc_id}: the file no longer exists in the documents folder")
    try:
        sha = source_fingerprint(source)
    except OSError as exc:
        # Recorded under the fingerprint the next scan gives it, so an unchanged folder is a no-op.
        return ReadOutcome(doc_id, unreadable_fingerprint(exc), source.size_bytes,
                           f"{source.relative_path}: cannot be read: {exc.strerror or exc}")
    if source.refusal is not None:
        return ReadOutcome(doc_id, sha, source.size_bytes, source.refusal)
    if source.size_bytes > limits.max_bytes:
        return ReadOutcome(doc_id, sha, source.size_bytes, str(LimitExceeded(
            source.relative_path, "max_bytes", "file size", f"{source.size_bytes} bytes", f"{limits.max_bytes} bytes")))
    return ReadOutcome(doc_id, sha, source.size_bytes, None)


def parse_source(source: SourceFile, limits: DocumentLimits, root: str) -> ParsedDocument:
    """Parse one listed document in a memory- and time-limited worker process.
    Raises DocumentError (naming the file and the rule or limit) for anything refused.

    The real path is resolved again here, just before the worker opens it: a file
    swapped for a link out of ``root`` since the folder was scanned is refused too."""
    if source.refusal is not None:
        raise DocumentError("", source.refusal)
    real = Path(os.path.realpath(source.readable_path))
    if not is_inside(Path(root).resolve(), real):
        raise DocumentError("", f"{source.relative_path}: refused: it now resolves outside the documents folder")
    return parse_in_worker(real, source.doc_id, limits)


def _fail_single(
    context: AssetExecutionContext, asset_key: AssetKey, errors: dict[str, str], outcomes: dict[str, list[CheckOutcome]]
) -> None:
    """One document in this run and it failed: record its failed check (with the cause) on
    its partition, then fail the step so Dagster marks the partition failed."""
    if errors and len(context.partition_keys) == 1:
        doc_id, error = next(iter(errors.items()))
        for outcome in outcomes.get(doc_id, []):
            record_failed_partition(context, asset_key, outcome)
        raise Failure(description=error, metadata={"document": doc_id, "error": error})


@asset(
    **DOCUMENT_ASSET_ARGS,
    group_name="documents",
    check_specs=check_specs(RAW, RAW_CHECKS),
    description="The bytes of each document in the documents folder; data version = sha256 of the bytes "
    "(+ a digest of the LightRAG sidecars beside it, when it has any).",
)
def raw_documents(
    context: AssetExecutionContext, documents: DocumentsFolder, store: StoreResource
) -> Iterator[object]:
    sources = documents.scan()
    chunk_store = store.store()
    outcomes: dict[str, list[CheckOutcome]] = {}
    errors: dict[str, str] = {}
    hashes: dict[str, str] = {}
    metadata: dict[str, dict] = {}
    limits = documents.document_limits()
    writes: dict[str, tuple[str, tuple]] = {}  # doc_id -> (what to record: read, parsed or error, its values)
    seconds: dict[str, float] = {}  # doc_id -> seconds spent reading it
    for doc_id in context.partition_keys:
        started = time.perf_counter()
        read = read_source(doc_id, sources, limits)
        if read.error:
            errors[doc_id] = read.error
            context.log.error(read.error)
            if read.sha256 is not None:
                # Recorded with its real hash and size: the same bytes are not re-run.
                writes[doc_id] = ("error", (sources[doc_id].relative_path, read.sha256, read.size_bytes, read.error))
            outcomes[doc_id] = [CheckOutcome("readable", False, description=read.error)]
            metadata[doc_id] = {"error": read.error, "bytes": read.size_bytes}
        else:
            writes[doc_id] = ("read", (sources[doc_id].relative_path, read.sha256, read.size_bytes))
            hashes[doc_id] = read.sha256
            outcomes[doc_id] = [CheckOutcome("readable", True, metadata={"sha256": read.sha256, "bytes": read.size_bytes})]
            metadata[doc_id] = {"sha256": read.sha256, "bytes": read.size_bytes, "dagster/row_count": 1}
        seconds[doc_id] = time.perf_counter() - started
    store_seconds = _write_all(chunk_store, documents.root_path, writes, errors, outcomes, metadata, "readable",
                               context)
    hashes = {d: sha for d, sha in hashes.items() if d not in errors}
    costs = [StageCost(d, "read", "", seconds[d] + store_seconds.get(d, 0.0), store_seconds.get(d, 0.0))
             for d in context.partition_keys]
    for cost in costs:
        metadata[cost.doc_id].update(cost.metadata())
    record_stage_costs(chunk_store, context.run.run_id, ingest_id_of(context), costs)
    _fail_single(context, RAW, errors, outcomes)
    # A step has one data version for all its partitions: set it only when it is this document's.
    single_sha = next(iter(hashes.values())) if len(context.partition_keys) == 1 and hashes else None
    yield from emit_partition_results(
        context, RAW, RAW_CHECKS, outcomes, metadata,
        data_version=DataVersion(single_sha) if single_sha else None,
    )


@asset(
    **DOCUMENT_ASSET_ARGS,
    group_name="documents",
    deps=[raw_documents],
    check_specs=check_specs(PARSED, PARSED_CHECKS),
    automation_condition=AutomationCondition.eager(),
    description="Pages (page number, char offset, text), heading blocks and tables of each document; "
    "LightRAG .blocks.jsonl/.tables.json sidecars are exported beside the database.",
)
def parsed_documents(
    context: AssetExecutionContext, documents: DocumentsFolder, store: StoreResource
) -> Iterator[object]:
    sources = documents.scan()
    chunk_store = store.store()
    sidecar_dir = store.sidecar_path()
    limits = documents.document_limits()
    outcomes: dict[str, list[CheckOutcome]] = {}
    errors: dict[str, str] = {}
    metadata: dict[str, dict] = {}
    writes: dict[str, tuple[str, tuple]] = {}  # doc_id -> (what to record: read, parsed or error, its values)
    parsed: dict[str, ParsedDocument] = {}
    seconds: dict[str, float] = {}  # doc_id -> seconds spent parsing it
    for doc_id in context.partition_keys:
        started = time.perf_counter()
        source = sources.get(doc_id)
        error = None
        if source is None:
            error = f"{doc_id}: the file no longer exists in the documents folder"
        else:
            # Taken before the parse reads them: a sidecar edited meanwhile makes the next scan
            # see a change (parsed again), never a stale parse recorded as current.
            sidecars = sidecars_digest(source.readable_path) if source.refusal is None else None
            try:
                doc = parse_source(source, limits, documents.root_path)
            except DocumentError as exc:
                error = str(exc)
            except Exception as exc:  # a parser bug must fail this document only
                error = f"{source.relative_path}: internal parser error ({type(exc).__name__}: {exc})"
                # The trace in the run's event log (the terminal shows one line per failure).
                context.log.debug(f"parser crashed on {source.relative_path}:\n{''.join(traceback.format_exception(exc))}")
        if error is not None:
            errors[doc_id] = error
            context.log.error(error)
            if source is not None:
                # raw_documents hashed these bytes already: keep its sha; hash only if it did not.
                read_sha = (chunk_store.document(doc_id) or {}).get("sha256") or _fingerprint_or_empty(source)
                writes[doc_id] = ("error", (source.relative_path, read_sha, source.size_bytes, error))
            outcomes[doc_id] = [CheckOutcome("parsed", False, description=error)]
            # A refusal's cost counts too: a parse killed at its time limit is the slowest.
            metadata[doc_id] = {"error": error}
        else:
            writes[doc_id] = ("parsed", (doc, source.relative_path, source.size_bytes,
                                         data_version(doc.sha256, sidecars)))
            parsed[doc_id] = doc
            shape = {"format": doc.format, "encoding": doc.encoding or "", "pages": len(doc.pages),
                     "blocks": len(doc.blocks), "tables": len(doc.tables), "chars": len(doc.text),
                     **({"sidecar_ignored": doc.metadata["sidecar_ignored"]} if doc.metadata.get("sidecar_ignored")
                        else {})}
            outcomes[doc_id] = [CheckOutcome("parsed", True, metadata=shape)]
            metadata[doc_id] = {**shape, "dagster/row_count": len(doc.pages)}
        seconds[doc_id] = time.perf_counter() - started
    store_seconds = _write_all(chunk_store, documents.root_path, writes, errors, outcomes, metadata, "parsed",
                               context)
    for doc_id, doc in parsed.items():
        if doc_id not in errors:  # exported once its rows are stored: the sidecars never run ahead of the store
            exported = time.perf_counter()
            _export_sidecars(doc, sidecar_dir, context)
            seconds[doc_id] += time.perf_counter() - exported
    costs = [StageCost(d, "parse", "", seconds[d] + store_seconds.get(d, 0.0), store_seconds.get(d, 0.0))
             for d in context.partition_keys]
    for cost in costs:
        metadata[cost.doc_id].update(cost.metadata())
    record_stage_costs(chunk_store, context.run.run_id, ingest_id_of(context), costs)
    _fail_single(context, PARSED, errors, outcomes)
    yield from emit_partition_results(context, PARSED, PARSED_CHECKS, outcomes, metadata)


def _write_all(
    chunk_store: ChunkStore, source_root: str, writes: dict[str, tuple[str, tuple]], errors: dict[str, str],
    outcomes: dict[str, list[CheckOutcome]], metadata: dict[str, dict], check: str, context: AssetExecutionContext,
) -> dict[str, float]:
    """Store this step's documents (doc_id -> ("read" | "parsed" | "error", values)) in one
    transaction (``ChunkStore.write_documents``); a document whose rows could not be stored gets
    the cause as its error, failed check and metadata. Returns each document's share of the
    write's seconds (equal shares)."""
    builders = {"read": chunk_store.recording_reads, "parsed": chunk_store.replacing_parsed,
                "error": chunk_store.recording_errors}

    def write_of(items: Mapping[str, tuple[str, tuple]]) -> Write:
        parts = [builder(source_root, {d: values for d, (kind, values) in items.items() if kind == name})
                 for name, builder in builders.items() if any(kind == name for kind, _ in items.values())]

        def write(con) -> None:
            for part in parts:
                part(con)

        return write

    started = time.perf_counter()
    failures = chunk_store.write_documents(writes, write_of)
    shares = share_out(time.perf_counter() - started, dict.fromkeys(writes, 1.0))
    for doc_id, exc in failures.items():
        error = f"{doc_id}: could not be stored (nothing of it was): {type(exc).__name__}: {exc}"
        errors[doc_id] = error
        context.log.error(error)
        outcomes[doc_id] = [CheckOutcome(check, False, description=error)]
        metadata[doc_id] = {"error": error}
    return shares


def _fingerprint_or_empty(source: SourceFile) -> str:
    try:
        return source_fingerprint(source)
    except OSError:
        return ""


def _export_sidecars(doc, directory, context: AssetExecutionContext) -> None:
    """Write LightRAG-format sidecars so other tools can read our parse."""
    from chunking.sidecar import write_sidecars

    try:
        write_sidecars(doc, directory)
    except OSError as exc:
        # The database holds the parse; a failed export must not lose it.
        context.log.warning(f"could not write sidecars for {doc.doc_id} to {directory}: {exc}")
