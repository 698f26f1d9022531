"""The DuckDB store: SQL is the interface, the DDL lives in ``resources.schema``.

``ChunkStore`` is plain Python so tests and the CLI use it without Dagster;
``StoreResource`` is the typed Dagster resource around it. DuckDB allows one
writing process, so connections are opened briefly (compute first, then write)
and a connection attempt that meets another process's lock is retried for a
while before failing with a one-line message naming the holder's pid.

A process that wants to read while an ingest runs must not hold the file open:
any DuckDB connection to it, even read-only, keeps the writer out. It reads a
snapshot instead (:meth:`ChunkStore.snapshot`: copied under a lock held only for
the copy) and may keep that open as long as it likes.

A database holds the documents of one folder (doc ids are paths inside it): the
first write claims the folder, a write from another folder is refused with
:class:`SourceRootConflict`, so one folder can never overwrite another's rows.

Two store modes, one code path (``[store]`` in chunkyard.toml): ``duckdb``, the
embedded file above, and ``ducklake`` (:class:`LakeConfig`: a DuckLake catalog in
PostgreSQL, SQLite or a DuckDB file, data files under ``data_path``), which many
processes on many machines write at once. The mode only decides how a connection
is opened (an in-memory DuckDB with the lake attached as the default catalog) and
how the DDL is rendered (``resources.schema.render``); every query is the same.
Each write is one transaction run by :meth:`ChunkStore.write_transaction`: when it
loses a commit conflict to another writer it is re-run whole, a bounded number of
times (``WRITE_ATTEMPTS``), so it lands entirely or not at all.
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
import threading
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import duckdb
import numpy as np
from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field

from chunking.model import Block, Chunk, Page, ParsedDocument
from chunking.sidecar import sidecar_paths
from resources.schema import MIGRATIONS, SCHEMA_INFO_DDL, SCHEMA_VERSION, render, rendered_ddl
from search.engine import extension_path

DEFAULT_DB_PATH = "data/chunkyard.duckdb"
T = TypeVar("T")
X = TypeVar("X")
# Rows written into an open write transaction (ChunkStore.write_documents).
Write = Callable[[duckdb.DuckDBPyConnection], Any]

# Column lists for bulk inserts, in the DDL's order (resources/schema.py).
PAGE_COLUMNS = (("doc_id", "VARCHAR"), ("page_num", "INTEGER"), ("char_offset", "BIGINT"), ("text", "VARCHAR"))
BLOCK_COLUMNS = (
    ("doc_id", "VARCHAR"), ("block_index", "INTEGER"), ("block_id", "VARCHAR"), ("heading", "VARCHAR"),
    ("level", "INTEGER"), ("parent_headings", "VARCHAR[]"), ("content", "VARCHAR"), ("session_type", "VARCHAR"),
    ("char_start", "BIGINT"), ("char_end", "BIGINT"), ("positions", "JSON"), ("is_title_block", "BOOLEAN"),
)
TABLE_COLUMNS = (
    ("doc_id", "VARCHAR"), ("table_id", "VARCHAR"), ("table_format", "VARCHAR"), ("table_header", "VARCHAR"),
    ("entry", "JSON"),
)
CHUNK_COLUMNS = (
    ("doc_id", "VARCHAR"), ("strategy", "VARCHAR"), ("chunk_index", "INTEGER"), ("text", "VARCHAR"),
    ("text_sha256", "VARCHAR"), ("token_count", "INTEGER"), ("char_start", "BIGINT"), ("char_end", "BIGINT"),
    ("page_start", "INTEGER"), ("page_end", "INTEGER"), ("heading_path", "VARCHAR[]"), ("block_ids", "VARCHAR[]"),
    ("verbatim", "BOOLEAN"), ("metadata", "JSON"), ("config_hash", "VARCHAR"), ("doc_sha256", "VARCHAR"),
)
CHUNK_EMBEDDING_COLUMNS = (
    ("doc_id", "VARCHAR"), ("strategy", "VARCHAR"), ("chunk_index", "INTEGER"), ("model_id", "VARCHAR"),
    ("text_sha256", "VARCHAR"), ("embed_version", "VARCHAR"),
)
VECTOR_COLUMNS = (("model_id", "VARCHAR"), ("text_sha256", "VARCHAR"), ("dim", "INTEGER"), ("embedding", "FLOAT[]"))
STAGE_COST_COLUMNS = (
    ("ingest_id", "VARCHAR"), ("run_id", "VARCHAR"), ("doc_id", "VARCHAR"), ("stage", "VARCHAR"),
    ("strategy", "VARCHAR"), ("seconds", "DOUBLE"), ("store_seconds", "DOUBLE"), ("model_seconds", "DOUBLE"),
    ("new_embeddings", "INTEGER"), ("cache_hits", "INTEGER"), ("recorded_at", "TIMESTAMP"),
)
STRATEGY_FAILURE_COLUMNS = (
    ("doc_id", "VARCHAR"), ("strategy", "VARCHAR"), ("doc_sha256", "VARCHAR"), ("config_hash", "VARCHAR"),
    ("error", "VARCHAR"), ("recorded_at", "TIMESTAMP"),
)
EMBEDDING_FAILURE_COLUMNS = (
    ("doc_id", "VARCHAR"), ("strategy", "VARCHAR"), ("doc_sha256", "VARCHAR"), ("config_hash", "VARCHAR"),
    ("embed_version", "VARCHAR"), ("error", "VARCHAR"), ("recorded_at", "TIMESTAMP"),
)

# A write transaction that loses a commit conflict is re-run whole, this many times at
# most, after a jittered pause growing from WRITE_RETRY_DELAY_S to WRITE_RETRY_MAX_DELAY_S.
WRITE_ATTEMPTS = 30
WRITE_RETRY_DELAY_S = 0.05
WRITE_RETRY_MAX_DELAY_S = 2.0

# Opening a new lake: attempts while another process creates its catalog at the same time.
LAKE_INIT_ATTEMPTS = 10

# DuckDB names the process holding a file lock: '... Conflicting lock is held in /usr/bin/python3 (PID 1234) ...'
_LOCK_HOLDER = re.compile(r"\(PID (\d+)\)")


class StoreLockedError(RuntimeError):
    """Another process holds the database file for longer than we waited."""


class SourceRootConflict(RuntimeError):
    """The database holds another folder's documents; writing this folder's would mix or overwrite them."""


class WriteConflictError(RuntimeError):
    """A write transaction lost its commit conflict ``WRITE_ATTEMPTS`` times in a row; nothing of it landed."""


def is_write_conflict(exc: BaseException) -> bool:
    """True for a transaction another writer made fail at commit (re-running it can succeed).

    DuckLake: 'Transaction conflict - attempting to ... but another transaction has ...'
    (its catalog retries the rest itself); DuckDB within one process: 'Conflict on ...'.
    """
    return isinstance(exc, duckdb.TransactionException) and "conflict" in str(exc).lower()


class ObjectStoreError(RuntimeError):
    """The lake's object storage could not be reached or refused us; raised before anything is written."""


# The store's own refusals: about the store or the run, never one document's rows.
_STORE_REFUSALS = (StoreLockedError, SourceRootConflict, WriteConflictError, ObjectStoreError)


def _rows_may_cause(exc: BaseException) -> bool:
    """True for a write error that one document's rows can cause, so the others may still be stored.

    Besides DuckDB's own errors, the Python binding raises plain ``RuntimeError`` ("Unable to
    cast Python instance ...") for a value it cannot convert (a string with a lone surrogate),
    and ``TypeError`` / ``ValueError`` / ``OverflowError`` are what a row's values raise while
    being prepared. The store's own refusals are about the store, not a row.
    """
    if isinstance(exc, _STORE_REFUSALS):
        return False
    return isinstance(exc, (duckdb.Error, RuntimeError, TypeError, ValueError, OverflowError))


# DuckDB's S3 URL styles: path (http://endpoint/bucket/key: MinIO, moto, most S3-compatible
# servers) and vhost (http://bucket.endpoint/key: AWS's default).
S3_URL_STYLES = ("path", "vhost")
# The name of the temporary DuckDB secret the store makes on each of its lake connections.
LAKE_SECRET = "chunkyard_lake"


@dataclass(frozen=True)
class S3Options:
    """How DuckDB's httpfs reaches an S3-compatible store (``[store] s3_*``); None: DuckDB's default.

    Invariant (:func:`s3_options`): ``endpoint`` is ``host[:port]`` without scheme or path,
    ``url_style`` one of ``S3_URL_STYLES``. Credentials are never held here: they are read
    from the environment when a connection makes its secret (:func:`s3_secret_sql`).
    """

    endpoint: str | None = None
    url_style: str | None = None
    use_ssl: bool | None = None
    region: str | None = None

    def is_default(self) -> bool:
        return self == S3Options()


def s3_options(data_path: str | None, endpoint: str | None = None, url_style: str | None = None,
               use_ssl: bool | None = None, region: str | None = None) -> S3Options:
    """``[store] s3_*`` checked and normalized; a ValueError naming the key otherwise.

    ``endpoint`` may carry its scheme (``http://127.0.0.1:9000``): it then decides ``use_ssl``
    (and must agree with it when both are given). An endpoint without ``url_style`` means
    ``path``: an S3-compatible server rarely has per-bucket host names.
    """
    given = {"s3_endpoint": endpoint, "s3_url_style": url_style, "s3_use_ssl": use_ssl, "s3_region": region}
    named = [key for key, value in given.items() if value is not None]
    if named and not (data_path or "").startswith("s3://"):
        raise ValueError(f"[store] {named[0]} is set but data_path = {data_path!r} is not an s3:// URL")
    if endpoint is not None:
        scheme, sep, rest = endpoint.strip().partition("://")
        if sep:
            if scheme not in ("http", "https"):
                raise ValueError(f"[store] s3_endpoint = {endpoint!r}: the scheme must be http:// or https://")
            scheme_ssl = scheme == "https"
            if use_ssl is not None and use_ssl != scheme_ssl:
                raise ValueError(f"[store] s3_endpoint = {endpoint!r} and s3_use_ssl = {str(use_ssl).lower()} "
                                 "disagree: drop one")
            use_ssl = scheme_ssl
        endpoint = rest.rstrip("/") if sep else scheme.rstrip("/")
        if not endpoint or "/" in endpoint or any(c.isspace() or c == "'" for c in endpoint):
            raise ValueError(f"[store] s3_endpoint = {given['s3_endpoint']!r}: expected host[:port] or "
                             "http(s)://host[:port], without a path")
        url_style = url_style or "path"
    if url_style is not None and url_style not in S3_URL_STYLES:
        raise ValueError(f"[store] s3_url_style = {url_style!r}: expected 'path' or 'vhost'")
    if region is not None and not region.strip():
        raise ValueError("[store] s3_region is empty: name a region (e.g. 'us-east-1') or leave it out")
    return S3Options(endpoint=endpoint, url_style=url_style, use_ssl=use_ssl, region=region)


def s3_secret_sql(data_path: str, options: S3Options, environ: Mapping[str, str]) -> str | None:
    """The ``CREATE SECRET`` a lake connection runs before it touches ``data_path``, or None.

    Credentials come from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (and
    ``AWS_SESSION_TOKEN``) in ``environ``, never from chunkyard.toml; the region from
    ``s3_region``, else ``AWS_REGION`` / ``AWS_DEFAULT_REGION``. None (no secret: DuckDB's
    own, e.g. a persistent ``CREATE PERSISTENT SECRET``, or anonymous access) when there
    are neither credentials in ``environ`` nor ``s3_*`` options. The secret's scope is
    ``data_path``, so it is used for the lake's files and nothing else.
    """
    key_id, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    if bool(key_id) != bool(secret):
        raise ObjectStoreError("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither "
                               f"(the credentials of the lake's data_path {data_path})")
    if not key_id and options.is_default():
        return None
    region = options.region or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    fields = {"KEY_ID": key_id, "SECRET": secret, "SESSION_TOKEN": environ.get("AWS_SESSION_TOKEN") or None,
              "REGION": region, "ENDPOINT": options.endpoint, "URL_STYLE": options.url_style}
    parts = ["TYPE s3"] + [f"{name} '{_sql_text(value)}'" for name, value in fields.items() if value]
    if options.use_ssl is not None:
        parts.append(f"USE_SSL {str(options.use_ssl).lower()}")
    parts.append(f"SCOPE '{_sql_text(data_path)}'")
    return f"CREATE OR REPLACE TEMPORARY SECRET {LAKE_SECRET} ({', '.join(parts)})"


def object_store_message(data_path: str, options: S3Options, duckdb_message: str) -> str:
    """One line naming the setting to fix for a failed first contact with the lake's object storage."""
    first = duckdb_message.strip().splitlines()[0] if duckdb_message.strip() else duckdb_message
    lowered = duckdb_message.lower()
    where = f"s3_endpoint = {options.endpoint!r}" if options.endpoint else "s3_endpoint unset (AWS's)"
    # Status codes as DuckDB words them ('(HTTP 403 Forbidden)'), not any '403' (a port, a key).
    if any(word in lowered for word in ("invalidaccesskeyid", "signaturedoesnotmatch", "accessdenied",
                                        "http 403", "authentication failure")):
        cause = ("the credentials were refused: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or your DuckDB "
                 "secret) and that they may list and write this prefix")
    elif "nosuchbucket" in lowered or "http 404" in lowered:
        bucket = data_path.removeprefix("s3://").split("/", 1)[0]
        cause = f"bucket {bucket!r} does not exist at {where}: check [store] data_path"
    elif any(word in lowered for word in ("could not connect", "resolve hostname", "connection", "timeout",
                                          "timed out", "ssl error", "ssl handshake", "certificate")):
        cause = f"the object store is unreachable at {where}: check [store] s3_endpoint and s3_use_ssl"
    else:
        cause = "check [store] data_path, s3_endpoint, s3_url_style, s3_region and the AWS_* credentials"
    return f"[store] data_path = {data_path!r}: {cause} (DuckDB: {first})"


def probe_object_store(con: duckdb.DuckDBPyConnection, data_path: str, options: S3Options) -> None:
    """List one unlikely name under ``data_path``: fails fast, with :class:`ObjectStoreError`,
    on a wrong endpoint, bucket or credentials, before the lake's catalog is attached or
    created (so a bad setting writes nothing anywhere). One small LIST request, whatever
    the lake's size (the listed prefix matches no data file)."""
    probe = data_path.rstrip("/") + "/.chunkyard-probe-*"
    try:
        con.execute(f"SELECT count(*) FROM glob('{_sql_text(probe)}')").fetchone()
    except duckdb.Error as exc:
        raise ObjectStoreError(object_store_message(data_path, options, str(exc))) from exc


def prepare_lake_connection(con: duckdb.DuckDBPyConnection, lake: "LakeConfig",
                            environ: Mapping[str, str] | None = None) -> None:
    """Everything a connection needs before ``ATTACH``-ing ``lake``: its extensions (offline),
    and for object storage the store's secret and a probe. The store and the search index both
    open lakes through this, so they reach the same bucket the same way."""
    for name in lake.extensions():
        con.execute(f"LOAD '{extension_path(name)}'")
    if lake.data_path.startswith("s3://"):
        secret = s3_secret_sql(lake.data_path, lake.s3, os.environ if environ is None else environ)
        if secret is not None:
            con.execute(secret)
        probe_object_store(con, lake.data_path, lake.s3)


@dataclass(frozen=True)
class LakeConfig:
    """Where a DuckLake store lives: its catalog database and its data files.

    ``catalog``: ``postgres:<libpq string>`` (or a bare libpq string such as
    ``dbname=chunkyard host=db.example user=chunkyard``), ``sqlite:<file>`` or
    ``duckdb:<file>`` (one process at a time: the DuckDB file lock). ``data_path``:
    a local folder, or object storage (``s3://bucket/prefix``, through the httpfs
    extension; ``s3`` says how to reach an S3-compatible endpoint, credentials come
    from the environment or a DuckDB secret: :func:`s3_secret_sql`).
    """

    catalog: str
    data_path: str
    s3: S3Options = S3Options()

    def __repr__(self) -> str:
        # Without s3 options, the repr of a lake before they existed: code that rebuilds a
        # LakeConfig from its repr in a subprocess needs S3Options only for an S3 lake.
        s3 = "" if self.s3.is_default() else f", s3={self.s3!r}"
        return f"LakeConfig(catalog={self.catalog!r}, data_path={self.data_path!r}{s3})"

    def catalog_kind(self) -> str:
        for kind in ("postgres", "sqlite", "duckdb"):
            if self.catalog.startswith(f"{kind}:"):
                return kind
        if "=" in self.catalog:
            return "postgres"
        raise ValueError(f"store catalog {self.catalog!r}: expected postgres:<libpq string>, sqlite:<file> "
                         f"or duckdb:<file>")

    def attach_target(self) -> str:
        """The ``ATTACH`` string: ``ducklake:postgres:...``, ``ducklake:sqlite:...``, ``ducklake:<file>``."""
        kind = self.catalog_kind()
        if kind == "postgres":
            libpq = self.catalog.removeprefix("postgres:")
            return f"ducklake:postgres:{libpq}"
        if kind == "sqlite":
            return f"ducklake:{self.catalog}"
        return f"ducklake:{self.catalog.removeprefix('duckdb:')}"

    def attach_sql(self, read_only: bool = False) -> str:
        """The statement that attaches this lake as ``lake`` (``READ_ONLY``: no statement can change it)."""
        options = f"DATA_PATH '{_sql_text(self.data_path)}'" + (", READ_ONLY" if read_only else "")
        return f"ATTACH '{_sql_text(self.attach_target())}' AS lake ({options})"

    def extensions(self) -> tuple[str, ...]:
        """The DuckDB extensions to load (offline, from their packages) before attaching."""
        by_kind = {"postgres": ("postgres_scanner",), "sqlite": ("sqlite_scanner",), "duckdb": ()}
        remote = ("httpfs",) if "://" in self.data_path else ()
        return ("ducklake", *by_kind[self.catalog_kind()], *remote)

    def describe(self) -> str:
        """For messages and the CLI: which lake, without any password in the catalog string."""
        endpoint = f" at {self.s3.endpoint}" if self.s3.endpoint else ""
        return "ducklake " + redact_passwords(self.catalog) + f" (data {self.data_path}{endpoint})"

    def catalog_file(self) -> Path | None:
        """The catalog's local file (``sqlite:`` and ``duckdb:`` catalogs); None for PostgreSQL."""
        kind = self.catalog_kind()
        if kind == "postgres":
            return None
        name = self.catalog.removeprefix(f"{kind}:")
        if not name.strip():
            raise ValueError(f"store catalog {self.catalog!r}: a {kind} catalog needs a file, e.g. {kind}:lake/catalog.db")
        return Path(name)


# A libpq password in either form: key=value (any case, spaces around "=", a quoted value with
# escaped quotes) and a URI's user:password@.
_LIBPQ_PASSWORD = re.compile(r"(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")
_URI_PASSWORD = re.compile(r"(?i)\b(postgres(?:ql)?://[^:/@\s]*:)([^@\s]*)(@)")


def redact_passwords(text: str) -> str:
    """``text`` with every catalog password in it shown as ``***`` (messages, errors that quote
    the catalog string)."""
    return _URI_PASSWORD.sub(r"\1***\3", _LIBPQ_PASSWORD.sub(r"\1***", text))


def lake_config(mode: str, catalog: str | None, data_path: str | None, *, s3_endpoint: str | None = None,
                s3_url_style: str | None = None, s3_use_ssl: bool | None = None,
                s3_region: str | None = None) -> LakeConfig | None:
    """The lake of ``[store]`` settings: None in ``duckdb`` mode; both locations required in ``ducklake``;
    the ``s3_*`` keys only with an ``s3://`` data_path (:func:`s3_options`)."""
    if mode == "duckdb":
        return None
    if mode != "ducklake":
        raise ValueError(f"[store] mode = {mode!r}: expected 'duckdb' or 'ducklake'")
    if not catalog or not data_path:
        raise ValueError("[store] mode = 'ducklake' needs catalog (postgres:<libpq string>, sqlite:<file> or "
                         "duckdb:<file>) and data_path (a folder, or s3://... with httpfs)")
    if data_path.startswith("s3://") and not data_path.removeprefix("s3://").split("/", 1)[0]:
        raise ValueError(f"[store] data_path = {data_path!r}: expected s3://<bucket>/<prefix>")
    options = s3_options(data_path, s3_endpoint, s3_url_style, s3_use_ssl, s3_region)
    config = LakeConfig(catalog=catalog, data_path=data_path, s3=options)
    config.catalog_file()  # an unknown catalog, or a file catalog without a file, fails here, not at the first write
    return config


class _LakeInstance:
    """One in-memory DuckDB per process and lake, with the lake attached; connections are its cursors.

    Attaching costs a catalog round trip and loading extensions: done once, not per query.
    """

    _instances: dict[tuple[int, LakeConfig], "_LakeInstance"] = {}
    _guard = threading.Lock()

    def __init__(self, lake: LakeConfig) -> None:
        con = duckdb.connect()
        try:
            prepare_lake_connection(con, lake)  # object storage: a wrong setting fails here, nothing attached
        except BaseException:
            con.close()
            raise
        if "://" not in lake.data_path:
            Path(lake.data_path).mkdir(parents=True, exist_ok=True)
        attach = lake.attach_sql()
        for attempt in range(1, LAKE_INIT_ATTEMPTS + 1):
            try:
                con.execute(attach)
                break
            except duckdb.Error as exc:
                # Processes opening a new lake at once all create its catalog tables; the losers
                # fail ('Failed to initialize DuckLake: ... already exists') and find them next time.
                if "initialize ducklake" not in str(exc).lower() or attempt == LAKE_INIT_ATTEMPTS:
                    raise
                time.sleep(0.2 * attempt * (0.5 + random.random()))
        self.con = con
        self.schema_ready = False

    @classmethod
    def of(cls, lake: LakeConfig) -> "_LakeInstance":
        key = (os.getpid(), lake)  # a forked child opens its own
        with cls._guard:
            if key not in cls._instances:
                cls._instances[key] = cls(lake)
            return cls._instances[key]

    @classmethod
    def close_all(cls) -> None:
        """Detach every lake this process opened (tests stop their catalog server after this)."""
        with cls._guard:
            for instance in cls._instances.values():
                instance.con.close()
            cls._instances.clear()


def close_lakes() -> None:
    _LakeInstance.close_all()


def lock_holder_pid(message: str) -> int | None:
    """The pid DuckDB's lock error names, or None when the message names none."""
    match = _LOCK_HOLDER.search(message)
    return int(match.group(1)) if match else None


def locked_message(path: Path, waited_s: float, duckdb_message: str) -> str:
    """One line: which file, who holds it (when DuckDB says), how long we waited, what to do."""
    pid = lock_holder_pid(duckdb_message)
    holder = f"process {pid}" if pid is not None else "another process"
    return (f"{path} is locked by {holder} (waited {waited_s:.0f} s); a DuckDB connection held open, even "
            f"read-only, blocks the writer: close it, or read a snapshot (ChunkStore.snapshot)")


@dataclass(frozen=True)
class StoredChunk:
    chunk_index: int
    text: str
    text_sha256: str
    token_count: int
    char_start: int
    char_end: int


class ChunkStore:
    """All reads and writes of the chunkyard database."""

    def __init__(
        self,
        path: str | Path,
        *,
        lock_timeout_s: float = 60.0,
        sidecar_dir: str | Path | None = None,
        lake: LakeConfig | None = None,
    ) -> None:
        # The DuckDB file; in lake mode only the anchor of local outputs (viewer, stats, sidecars).
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        # Where parsed sidecars are exported; deleting a document deletes its sidecars there.
        self.sidecar_dir = Path(sidecar_dir) if sidecar_dir is not None else None
        self.lake = lake

    @property
    def mode(self) -> str:
        return "duckdb" if self.lake is None else "ducklake"

    def describe(self) -> str:
        """Where the data lives, for messages: the file, or the lake's catalog and data path."""
        return str(self.path) if self.lake is None else self.lake.describe()

    def location(self) -> str:
        """The CLI's line naming the store: ``database: <file>``, or in lake mode ``store: ducklake
        <catalog> (data <path>)`` with any password hidden (the file is then only an anchor)."""
        return f"database: {self.path.resolve()}" if self.lake is None else f"store: {self.lake.describe()}"

    def exists(self) -> bool:
        """Whether there is a store to read. A lake is created on its first connection, so a lake
        whose catalog is a local file exists when that file does (a PostgreSQL catalog is taken
        to exist: asking would connect)."""
        if self.lake is None:
            return self.path.is_file()
        catalog = self.lake.catalog_file()
        return catalog is None or catalog.is_file()

    @contextmanager
    def query_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for a user's own SQL (``chunkyard sql``) that cannot change the store: the
        file opened read-only, or the lake attached ``READ_ONLY`` on a connection of its own (the
        process's shared lake connection writes)."""
        if self.lake is None:
            with self.connect(read_only=True) as con:
                yield con
            return
        con = duckdb.connect()
        try:
            prepare_lake_connection(con, self.lake)
            con.execute(self.lake.attach_sql(read_only=True))
            con.execute("USE lake")
            yield con
        finally:
            con.close()

    # -- connections ----------------------------------------------------------------

    @contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        if self.lake is not None:
            with self._connect_lake() as con:
                yield con
            return
        if read_only and not self.path.exists():
            # A read-only open of a missing file fails; an empty schema answers the same.
            read_only = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._connect_with_retry(read_only)
        try:
            if not read_only:
                self._ensure_schema(con, self.mode)
            yield con
        finally:
            con.close()

    @contextmanager
    def _connect_lake(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of this process's connection to the lake, its default catalog the lake.

        A DuckLake reader never blocks a writer (each transaction reads one snapshot),
        so read-only and read-write connections are the same here.
        """
        instance = _LakeInstance.of(self.lake)
        if not instance.schema_ready:
            # Concurrent first connections race to create the tables: a lost race is re-run.
            self._retry_conflicts(lambda: self._open_cursor_and_ensure_schema(instance))
            instance.schema_ready = True
        con = instance.con.cursor()
        try:
            con.execute("USE lake")
            yield con
        finally:
            con.close()

    def _open_cursor_and_ensure_schema(self, instance: _LakeInstance) -> None:
        with closing(instance.con.cursor()) as con:
            con.execute("USE lake")
            self._ensure_schema(con, self.mode)

    def _connect_with_retry(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        return self._retry_on_lock(lambda: duckdb.connect(str(self.path), read_only=read_only))

    def _retry_on_lock(self, open_file: Callable[[], T]) -> T:
        """``open_file()``, retried while another process holds the file, for ``lock_timeout_s`` at most."""
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                return open_file()
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise
                if time.monotonic() > deadline:
                    raise StoreLockedError(locked_message(self.path, self.lock_timeout_s, str(exc))) from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    @staticmethod
    def _ensure_schema(con: duckdb.DuckDBPyConnection, mode: str = "duckdb") -> None:
        """Create what is missing; migrate an older file first, all in one transaction.

        Invariant: after this, the store is at ``SCHEMA_VERSION`` or unchanged (a
        failed migration rolls back to the old version, whose data is intact). A store
        already at this version and complete is not written to (in lake mode a write
        would make every other writer's transaction conflict).
        """
        con.execute(render(SCHEMA_INFO_DDL, mode))
        row = con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else SCHEMA_VERSION  # no version: a new file
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"database schema version {version} is newer than this code's {SCHEMA_VERSION}")
        con.execute("BEGIN TRANSACTION")
        try:
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    con.execute(render(statement, mode))
            for statement in rendered_ddl(mode):
                con.execute(statement)
            if row is None or version != SCHEMA_VERSION:
                con.execute("DELETE FROM schema_info WHERE key = 'schema_version'")
                con.execute("INSERT INTO schema_info VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            if con.execute("SELECT count(*) FROM write_serial").fetchone()[0] == 0:
                con.execute("INSERT INTO write_serial VALUES (0)")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction: all of it lands, or none of it (rollback on error).

        It increments ``write_serial`` first, so in lake mode it conflicts at commit
        with any other write committed meanwhile (resources/schema.py). It is not
        re-run on a conflict: use :meth:`write_transaction` for that.
        """
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute("UPDATE write_serial SET writes = writes + 1")
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            # A commit that fails has already rolled back: nothing to undo here.
            con.execute("COMMIT")

    def write_transaction(self, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """``work(con)`` in one :meth:`transaction`; re-run whole when it loses a commit conflict.

        Invariant: either one run of ``work`` committed, or nothing did and this raises
        (``WriteConflictError`` after ``WRITE_ATTEMPTS`` conflicts; any other error at once).
        ``work`` must therefore compute nothing that depends on having run before.
        """
        def attempt() -> T:
            with self.transaction() as con:
                return work(con)

        return self._retry_conflicts(attempt)

    def write_documents(self, items: Mapping[str, X], write_of: Callable[[Mapping[str, X]], Write]) -> dict[str, Exception]:
        """Every document of ``items`` (doc_id -> what to write) stored by ``write_of(items)`` in ONE
        :meth:`write_transaction`, one statement per table for them all: in lake mode each statement
        costs catalog round trips and each commit a serial catalog write, so a step pays them once,
        not once per document.

        Invariant: each document's rows are committed whole or not at all, and a document whose
        own rows fail leaves the others stored. When the shared transaction fails with an error
        one document's rows can cause (:func:`_rows_may_cause`: a DuckDB error, or a value the
        binding cannot convert), it rolled back whole; each document is then written alone
        (``write_of({doc_id: item})``), and the documents whose own write fails are returned,
        doc_id -> the error. A single document's error of that kind is returned as its own:
        it is the only document to blame, and its step can then record it on its partition.
        When two or more documents all fail alone too (a cause that is no one document's, such
        as a full disk), the error is raised instead, as is any other exception
        (``WriteConflictError``, ``StoreLockedError``, ``SourceRootConflict``): nothing of the
        failed writes is stored.
        """
        if not items:
            return {}
        try:
            self.write_transaction(write_of(items))
            return {}
        except Exception as exc:
            if not _rows_may_cause(exc):
                raise
            if len(items) == 1:
                return {next(iter(items)): exc}
        failed: dict[str, Exception] = {}
        for doc_id, item in items.items():
            try:
                self.write_transaction(write_of({doc_id: item}))
            except Exception as exc:  # this document's own rows: reported for it, the others go on
                if not _rows_may_cause(exc):
                    raise
                failed[doc_id] = exc
        if len(failed) == len(items):
            raise next(iter(failed.values()))
        return failed

    def _retry_conflicts(self, attempt: Callable[[], T]) -> T:
        delay = WRITE_RETRY_DELAY_S
        for number in range(1, WRITE_ATTEMPTS + 1):
            try:
                return attempt()
            except duckdb.Error as exc:
                if not is_write_conflict(exc):
                    raise
                if number == WRITE_ATTEMPTS:
                    raise WriteConflictError(
                        f"{self.describe()}: a write lost {WRITE_ATTEMPTS} commit conflicts in a row to other "
                        f"writers; nothing of it was stored ({exc})") from exc
                time.sleep(delay * (0.5 + random.random()))  # jitter: two losers do not retry in step
                delay = min(delay * 2, WRITE_RETRY_MAX_DELAY_S)
        raise AssertionError("unreachable")

    def initialize(self) -> None:
        with self.connect():
            pass

    # -- the one documents folder -----------------------------------------------------

    def claim_source_root(self, source_root: str) -> None:
        """Make ``source_root`` this database's folder, or raise SourceRootConflict if it holds another's.

        The CLI calls it before anything runs; every document write checks it again.
        """
        self.write_transaction(lambda con: _claim_source_root(con, self.describe(), source_root))

    def source_root(self) -> str | None:
        """The folder this database holds documents of; None before the first write."""
        with self.connect(read_only=True) as con:
            return _claimed_root(con)

    def source_root_conflict(self, source_root: str) -> str | None:
        """Without writing: the message :meth:`claim_source_root` would raise, or None."""
        with self.connect(read_only=True) as con:
            claimed = _claimed_root(con)
            roots = [r for (r,) in con.execute("SELECT DISTINCT source_root FROM documents").fetchall()]
        return _conflict_message(self.describe(), source_root, claimed, roots)

    # -- documents ------------------------------------------------------------------

    def record_read(self, doc_id: str, source_root: str, source_path: str, sha256: str, size_bytes: int) -> None:
        """Record that the raw bytes were read. Parsed rows stay until a parse replaces them."""
        self.write_transaction(self.recording_reads(source_root, {doc_id: (source_path, sha256, size_bytes)}))

    def recording_reads(self, source_root: str, reads: Mapping[str, tuple[str, str, int]]) -> Write:
        """The write of :meth:`record_read` for many documents (doc_id -> (source_path, sha256,
        size_bytes)), one statement for them all, to run in an open transaction (``write_documents``)."""
        source = _document_rows([
            _document_row(doc_id, source_root, path, sha, size, status="read")
            for doc_id, (path, sha, size) in reads.items()
        ])

        def write(con: duckdb.DuckDBPyConnection) -> None:
            _claim_source_root(con, self.describe(), source_root)
            con.execute(
                f"""
                MERGE INTO documents USING ({_DOCUMENT_ROWS}) AS excluded ON documents.doc_id = excluded.doc_id
                WHEN MATCHED THEN UPDATE SET
                    source_root = excluded.source_root, source_path = excluded.source_path,
                    status = CASE WHEN documents.sha256 = excluded.sha256 THEN documents.status ELSE 'read' END,
                    error = CASE WHEN documents.sha256 = excluded.sha256 THEN documents.error ELSE NULL END,
                    sha256 = excluded.sha256,
                    size_bytes = excluded.size_bytes,
                    updated_at = excluded.updated_at
                WHEN NOT MATCHED THEN INSERT BY NAME
                """,
                source,
            )

        return write

    def record_error(
        self, doc_id: str, source_root: str, source_path: str, sha256: str, size_bytes: int, error: str
    ) -> None:
        """Mark a document failed. Rows from an earlier good parse are kept, marked by this row:
        the ``current_*`` views leave them out."""
        self.write_transaction(self.recording_errors(source_root, {doc_id: (source_path, sha256, size_bytes, error)}))

    def recording_errors(self, source_root: str, failures: Mapping[str, tuple[str, str, int, str]]) -> Write:
        """The write of :meth:`record_error` for many documents (doc_id -> (source_path, sha256,
        size_bytes, error)), one statement for them all, to run in an open transaction."""
        source = _document_rows([
            _document_row(doc_id, source_root, path, sha, size, status="error", error=error)
            for doc_id, (path, sha, size, error) in failures.items()
        ])

        def write(con: duckdb.DuckDBPyConnection) -> None:
            _claim_source_root(con, self.describe(), source_root)
            con.execute(
                f"""
                MERGE INTO documents USING ({_DOCUMENT_ROWS}) AS excluded ON documents.doc_id = excluded.doc_id
                WHEN MATCHED THEN UPDATE SET
                    source_root = excluded.source_root, source_path = excluded.source_path, sha256 = excluded.sha256,
                    size_bytes = excluded.size_bytes, status = 'error',
                    error = excluded.error, updated_at = excluded.updated_at
                WHEN NOT MATCHED THEN INSERT BY NAME
                """,
                source,
            )

        return write

    def replace_parsed(self, doc: ParsedDocument, source_root: str, source_path: str, size_bytes: int,
                       data_version: str | None = None) -> None:
        """Replace a document's pages, blocks and tables in one transaction. ``data_version``: what
        ``documents.sha256`` records (``resources.documents.data_version``), ``doc.sha256`` if None."""
        parse = (doc, source_path, size_bytes) + (() if data_version is None else (data_version,))
        self.write_transaction(self.replacing_parsed(source_root, {doc.doc_id: parse}))

    def replacing_parsed(self, source_root: str, parses: Mapping[str, tuple]) -> Write:
        """The write of :meth:`replace_parsed` for many documents (doc_id -> (parse, source_path,
        size_bytes[, data_version])), one statement per table for them all, to run in an open
        transaction. The data version (the document's sha256 with its sidecars' digest, when it
        has sidecars) is what ``documents.sha256`` records; without it, ``doc.sha256``."""
        docs = [doc for doc, *_ in parses.values()]
        page_rows = [(doc.doc_id, p.page_num, p.char_offset, p.text) for doc in docs for p in doc.pages]
        block_rows = [
            (
                doc.doc_id, b.index, b.block_id, b.heading, b.level, list(b.parent_headings), b.content,
                b.session_type, b.char_start, b.char_end, json.dumps(b.positions, ensure_ascii=False),
                bool(b.is_title_block),
            )
            for doc in docs for b in doc.blocks
        ]
        table_rows = [
            (doc.doc_id, table_id, entry.get("format"), entry.get("table_header"), json.dumps(entry, ensure_ascii=False))
            for doc in docs for table_id, entry in doc.tables.items()
        ]
        source = _document_rows([
            _document_row(doc.doc_id, source_root, path, version[0] if version else doc.sha256, size,
                          status="parsed", format=doc.format, encoding=doc.encoding, n_pages=len(doc.pages),
                          n_chars=len(doc.text))
            for doc, path, size, *version in parses.values()
        ])
        doc_ids = [doc.doc_id for doc in docs]

        def write(con: duckdb.DuckDBPyConnection) -> None:
            _claim_source_root(con, self.describe(), source_root)
            for table in ("pages", "blocks", "doc_tables"):
                con.execute(f"DELETE FROM {table} WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))", [doc_ids])
            insert_rows(con, "pages", PAGE_COLUMNS, page_rows)
            insert_rows(con, "blocks", BLOCK_COLUMNS, block_rows)
            insert_rows(con, "doc_tables", TABLE_COLUMNS, table_rows)
            con.execute(
                f"""
                MERGE INTO documents USING ({_DOCUMENT_ROWS}) AS excluded ON documents.doc_id = excluded.doc_id
                WHEN MATCHED THEN UPDATE SET
                    source_root = excluded.source_root, source_path = excluded.source_path, sha256 = excluded.sha256,
                    size_bytes = excluded.size_bytes, format = excluded.format,
                    encoding = excluded.encoding, n_pages = excluded.n_pages,
                    n_chars = excluded.n_chars, status = 'parsed', error = NULL,
                    updated_at = excluded.updated_at
                WHEN NOT MATCHED THEN INSERT BY NAME
                """,
                source,
            )

        return write

    def document(self, doc_id: str) -> dict[str, Any] | None:
        return self.documents_of([doc_id]).get(doc_id)

    def documents_of(self, doc_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """doc_id -> its documents row (column -> value), for those of ``doc_ids`` stored; one query
        (in lake mode each query costs catalog round trips: a step reads its documents at once)."""
        with self.connect(read_only=True) as con:
            cur = con.execute("SELECT * FROM documents WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))", [list(doc_ids)])
            columns = [d[0] for d in cur.description]
            return {row[0]: dict(zip(columns, row)) for row in cur.fetchall()}

    def document_hashes(self, source_root: str) -> dict[str, str]:
        """doc_id -> sha256 of every document read so far from ``source_root`` (seeds the sensor cursor)."""
        with self.connect(read_only=True) as con:
            return dict(
                con.execute("SELECT doc_id, sha256 FROM documents WHERE source_root = ?", [source_root]).fetchall()
            )

    def load_parsed(self, doc_id: str) -> ParsedDocument | None:
        """The stored parse of a document, or None when it has none (never parsed, or failed)."""
        return self.load_parsed_of([doc_id]).get(doc_id)

    def load_parsed_of(self, doc_ids: Sequence[str]) -> dict[str, ParsedDocument]:
        """doc_id -> its stored parse, for those of ``doc_ids`` that have one; one query per table."""
        ids = [list(doc_ids)]
        with self.connect(read_only=True) as con:
            doc_rows = {
                r[0]: r[1:] for r in con.execute(
                    "SELECT doc_id, sha256, format, encoding, source_path FROM documents "
                    "WHERE doc_id IN (SELECT unnest(?::VARCHAR[])) AND status = 'parsed'", ids).fetchall()
            }
            pages: dict[str, list[Page]] = {d: [] for d in doc_rows}
            for d, n, o, t in con.execute(
                "SELECT doc_id, page_num, char_offset, text FROM pages WHERE doc_id IN (SELECT unnest(?::VARCHAR[])) "
                "ORDER BY doc_id, page_num", ids).fetchall():
                if d in pages:
                    pages[d].append(Page(page_num=n, char_offset=o, text=t))
            blocks: dict[str, list[Block]] = {d: [] for d in doc_rows}
            for r in con.execute(
                """SELECT doc_id, block_index, block_id, heading, level, parent_headings, content,
                          session_type, char_start, char_end, positions, is_title_block
                   FROM blocks WHERE doc_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY doc_id, block_index""",
                ids).fetchall():
                if r[0] in blocks:
                    blocks[r[0]].append(Block(
                        index=r[1], block_id=r[2], heading=r[3], level=r[4], parent_headings=list(r[5]),
                        content=r[6], session_type=r[7], char_start=r[8], char_end=r[9],
                        positions=json.loads(r[10]) if r[10] else [], is_title_block=bool(r[11]),
                    ))
            tables: dict[str, dict[str, Any]] = {d: {} for d in doc_rows}
            for d, table_id, entry in con.execute(
                "SELECT doc_id, table_id, entry FROM doc_tables WHERE doc_id IN (SELECT unnest(?::VARCHAR[])) "
                "ORDER BY doc_id, table_id", ids).fetchall():
                if d in tables:
                    tables[d][table_id] = json.loads(entry)
        return {
            doc_id: ParsedDocument(
                doc_id=doc_id, source_name=source_path, format=fmt or "txt",
                text="".join(p.text for p in pages[doc_id]), pages=pages[doc_id], blocks=blocks[doc_id],
                tables=tables[doc_id], encoding=encoding, sha256=sha,
            )
            for doc_id, (sha, fmt, encoding, source_path) in doc_rows.items()
        }

    def delete_document(self, doc_id: str) -> None:
        """Remove every row of a document, then its exported sidecars and its viewer page.

        The vectors stay (``embedding_vectors`` is content-addressed: the same text
        elsewhere, or back later, embeds nothing). The rows go first: a failure
        there leaves the sidecars, which a retry removes.
        """
        def write(con: duckdb.DuckDBPyConnection) -> None:
            for table in ("chunk_embeddings", "chunks", "strategy_failures", "embedding_failures", "doc_tables",
                          "blocks", "pages", "documents"):
                con.execute(f"DELETE FROM {table} WHERE doc_id = ?", [doc_id])

        self.write_transaction(write)
        if self.sidecar_dir is not None:
            for sidecar in sidecar_paths(doc_id, self.sidecar_dir):
                sidecar.unlink(missing_ok=True)
        # And its viewer page where `chunkyard show` writes it by default: it holds the whole text.
        from orchestration.viewer import viewer_path

        viewer_path(self.path, doc_id).unlink(missing_ok=True)

    # -- chunks ---------------------------------------------------------------------

    def replace_chunks(
        self, doc_id: str, strategy: str, chunks: Sequence[Chunk], *, config_hash: str, doc_sha256: str
    ) -> None:
        self.write_transaction(self.replacing_chunks(strategy, {doc_id: (chunks, doc_sha256)}, config_hash=config_hash))

    def replacing_chunks(
        self, strategy: str, chunk_sets: Mapping[str, tuple[Sequence[Chunk], str]], *, config_hash: str
    ) -> Write:
        """The write of :meth:`replace_chunks` for many documents (doc_id -> (chunks, doc_sha256)),
        one DELETE and one INSERT for them all, to run in an open transaction (``write_documents``)."""
        rows = [
            (
                doc_id, strategy, i, c.text, c.text_sha256, c.token_count, c.char_start, c.char_end,
                c.page_start, c.page_end, list(c.heading_path), list(c.block_ids), c.verbatim,
                json.dumps(c.metadata, ensure_ascii=False, default=str), config_hash, doc_sha256,
            )
            for doc_id, (chunks, doc_sha256) in chunk_sets.items()
            for i, c in enumerate(chunks)
        ]
        doc_ids = list(chunk_sets)
        new_texts = {doc_id: [c.text_sha256 for c in chunks] for doc_id, (chunks, _) in chunk_sets.items()}

        def write(con: duckdb.DuckDBPyConnection) -> None:
            # The vector references of a document whose chunks change go with them: the embeddings
            # view pairs vectors with chunks by position, so a run stopped before its embeddings step
            # (or an embeddings step skipped by a blocking check) paired new chunks with the old
            # text's vectors; chunk_refresh plans the missing ones. Chunks made again the same keep theirs.
            stored = dict(con.execute(
                "SELECT doc_id, list(text_sha256 ORDER BY chunk_index) FROM chunks "
                "WHERE strategy = ? AND doc_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY doc_id",
                [strategy, doc_ids]).fetchall())
            changed = [d for d in doc_ids if stored.get(d) != new_texts[d]]
            con.execute("DELETE FROM chunk_embeddings WHERE strategy = ? AND doc_id IN (SELECT unnest(?::VARCHAR[]))",
                        [strategy, changed])
            # Stored now: no longer failed. (A recorded embedding failure stays until vectors are stored:
            # cleared here, a run stopped before its embeddings step would leave no trace of it.)
            for table in ("chunks", "strategy_failures"):
                con.execute(f"DELETE FROM {table} WHERE strategy = ? AND doc_id IN (SELECT unnest(?::VARCHAR[]))",
                            [strategy, doc_ids])
            insert_rows(con, "chunks", CHUNK_COLUMNS, rows)

        return write

    def prune_strategies(self, strategies: Sequence[str]) -> dict[str, int]:
        """Remove every row of the strategies not in ``strategies`` (those configured): their chunks,
        vector references and failures (the vectors stay: ``embedding_vectors`` is a cache). Returns
        strategy -> the chunks removed."""
        keep = list(strategies)
        with self.connect(read_only=True) as con:
            counts = dict(con.execute("SELECT strategy, count(*) FROM chunks WHERE NOT list_contains(?::VARCHAR[], "
                                      "strategy) GROUP BY 1", [keep]).fetchall())

        def write(con: duckdb.DuckDBPyConnection) -> None:
            for table in ("chunk_embeddings", "chunks", "strategy_failures", "embedding_failures"):
                con.execute(f"DELETE FROM {table} WHERE NOT list_contains(?::VARCHAR[], strategy)", [keep])

        self.write_transaction(write)
        return counts

    def forget_strategy_failures(self, strategies: Sequence[str]) -> None:
        """Drop the recorded failures of every strategy not in ``strategies`` (those configured):
        a strategy removed from the configuration has nothing left to retry or list."""
        def write(con: duckdb.DuckDBPyConnection) -> None:
            for table in ("strategy_failures", "embedding_failures"):
                con.execute(f"DELETE FROM {table} WHERE NOT list_contains(?::VARCHAR[], strategy)", [list(strategies)])

        self.write_transaction(write)

    def record_strategy_failures(self, strategy: str, failures: Mapping[str, tuple[str, str, str]]) -> None:
        """Record each document's failure of ``strategy`` (doc_id -> (doc sha256, config hash,
        error)), replacing its earlier one; its stored chunks are left as they are."""
        if not failures:
            return
        doc_ids = list(failures)
        now = _now()
        rows = [(doc_id, strategy, sha, cfg, error, now) for doc_id, (sha, cfg, error) in failures.items()]

        def write(con: duckdb.DuckDBPyConnection) -> None:
            con.execute("DELETE FROM strategy_failures WHERE strategy = ? AND doc_id IN (SELECT unnest(?::VARCHAR[]))",
                        [strategy, doc_ids])
            insert_rows(con, "strategy_failures", STRATEGY_FAILURE_COLUMNS, rows)

        self.write_transaction(write)

    def strategy_failures(self) -> dict[str, dict[str, tuple[str, str, str]]]:
        """strategy -> doc_id -> (doc sha256, config hash, error) of its recorded failures."""
        out: dict[str, dict[str, tuple[str, str, str]]] = {}
        with self.connect(read_only=True) as con:
            if not has_table(con, "strategy_failures"):  # a schema-3 file not yet opened for writing
                return out
            for doc_id, strategy, sha, cfg, error in con.execute(
                    "SELECT doc_id, strategy, doc_sha256, config_hash, error FROM strategy_failures").fetchall():
                out.setdefault(strategy, {})[doc_id] = (sha, cfg, error)
        return out

    def stored_embed_versions(self) -> dict[str, dict[str, set[str]]] | None:
        """strategy -> doc_id -> the embedders (embed versions) its stored vector references were
        made by: one, unless a document's vectors were stored in parts by different embedders.
        A document without vector references of a strategy is absent. None for a schema-5 file
        not yet opened for writing (nothing to compare with)."""
        out: dict[str, dict[str, set[str]]] = {}
        with self.connect(read_only=True) as con:
            if not has_column(con, "chunk_embeddings", "embed_version"):
                return None
            for strategy, doc_id, versions in con.execute(
                    "SELECT strategy, doc_id, list(DISTINCT coalesce(embed_version, model_id)) "
                    "FROM chunk_embeddings GROUP BY ALL").fetchall():
                out.setdefault(strategy, {})[doc_id] = set(versions)
        return out

    def embedding_failures(self) -> dict[str, dict[str, tuple[str, str, str, str]]]:
        """strategy -> doc_id -> (doc sha256, config hash, embed version, error) of its recorded
        embedding failures (``replacing_embeddings`` records and clears them)."""
        out: dict[str, dict[str, tuple[str, str, str, str]]] = {}
        with self.connect(read_only=True) as con:
            if not has_table(con, "embedding_failures"):  # a schema-4 file not yet opened for writing
                return out
            for doc_id, strategy, sha, cfg, version, error in con.execute(
                    "SELECT doc_id, strategy, doc_sha256, config_hash, embed_version, error "
                    "FROM embedding_failures").fetchall():
                out.setdefault(strategy, {})[doc_id] = (sha, cfg, version, error)
        return out

    def load_chunks(self, doc_id: str, strategy: str) -> list[StoredChunk]:
        return self.load_chunks_of([doc_id], strategy).get(doc_id, [])

    def load_chunks_of(
        self, doc_ids: Sequence[str], strategy: str, *, config_hash: str | None = None
    ) -> dict[str, list[StoredChunk]]:
        """doc_id -> its chunks of ``strategy`` in order (empty when none), for every one of ``doc_ids``; one query.

        ``config_hash``: only chunks of the document's current parse (``current_chunks``) made
        under that configuration, so a document whose latest chunking failed has none rather
        than those of its earlier text or configuration.
        """
        out: dict[str, list[StoredChunk]] = {doc_id: [] for doc_id in doc_ids}
        if config_hash is None:
            relation, params = "chunks WHERE true", []
        else:
            relation, params = "current_chunks WHERE config_hash = ?", [config_hash]
        with self.connect(read_only=True) as con:
            for doc_id, *row in con.execute(
                f"""SELECT doc_id, chunk_index, text, text_sha256, token_count, char_start, char_end
                   FROM {relation} AND doc_id IN (SELECT unnest(?::VARCHAR[])) AND strategy = ?
                   ORDER BY doc_id, chunk_index""",
                [*params, list(doc_ids), strategy],
            ).fetchall():
                out[doc_id].append(StoredChunk(*row))
        return out

    def chunk_state(self, strategy: str) -> dict[str, tuple[str, str]]:
        """doc_id -> (doc_sha256, config_hash) of the stored chunks of one strategy."""
        with self.connect(read_only=True) as con:
            return {
                doc_id: (sha, cfg)
                for doc_id, sha, cfg in con.execute(
                    "SELECT doc_id, any_value(doc_sha256), any_value(config_hash) FROM chunks "
                    "WHERE strategy = ? GROUP BY doc_id",
                    [strategy],
                ).fetchall()
            }

    # -- embeddings -----------------------------------------------------------------

    def cached_embeddings(self, model_id: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if not text_hashes:
            return {}
        with self.connect(read_only=True) as con:
            rows = con.execute(
                "SELECT text_sha256, embedding FROM embedding_vectors "
                "WHERE model_id = ? AND text_sha256 IN (SELECT unnest(?::VARCHAR[]))",
                [model_id, list(set(text_hashes))],
            ).fetchall()
        return {sha: np.asarray(vec, dtype=np.float32) for sha, vec in rows}

    def add_cached_embeddings(self, model_id: str, vectors: dict[str, np.ndarray]) -> int:
        """Store vectors (keyed by text sha256) in the embedding cache, leaving any
        already stored as they are; returns how many were added."""
        if not vectors:
            return 0
        return len(self.write_transaction(self.caching_embeddings(model_id, vectors)))

    def caching_embeddings(self, model_id: str, vectors: dict[str, np.ndarray]) -> Write:
        """The write of :meth:`add_cached_embeddings`; it returns the text hashes it added."""
        return lambda con: _insert_missing_vectors(con, model_id, vectors)

    def record_stage_costs(self, rows: Sequence[tuple[Any, ...]], *, recorded_at: Any) -> None:
        """Append one step's ``stage_costs`` rows (ingest_id, run_id, doc_id, stage, strategy,
        seconds, store_seconds, model_seconds, new_embeddings, cache_hits) in one transaction,
        replacing the rows a retried step wrote before under the same key."""
        # One DELETE per (run, stage, strategy), i.e. per step, not one per document: in lake
        # mode every statement costs catalog round trips (the reason for write_documents).
        doc_ids_by_step: dict[tuple[Any, Any, Any], list[Any]] = {}
        for _, run_id, doc_id, stage, strategy, *_ in rows:
            doc_ids_by_step.setdefault((run_id, stage, strategy), []).append(doc_id)

        def write(con: duckdb.DuckDBPyConnection) -> None:
            for (run_id, stage, strategy), doc_ids in doc_ids_by_step.items():
                con.execute("DELETE FROM stage_costs WHERE run_id = ? AND stage = ? AND strategy = ? "
                            "AND doc_id IN (SELECT unnest(?::VARCHAR[]))", [run_id, stage, strategy, doc_ids])
            insert_rows(con, "stage_costs", STAGE_COST_COLUMNS, [(*row, recorded_at) for row in rows])

        self.write_transaction(write)

    def replace_embeddings(
        self,
        doc_id: str,
        strategy: str,
        model_id: str,
        rows: Sequence[tuple[int, str, np.ndarray]],
        new_cache_entries: dict[str, np.ndarray],
    ) -> None:
        """Replace one partition's vector references, storing each vector not yet stored, atomically.

        ``rows`` are (chunk_index, text_sha256, vector). Every referenced vector is
        stored once in ``embedding_vectors`` (``new_cache_entries`` are the freshly
        embedded ones; a vector of ``rows`` that is missing, e.g. pruned since it was
        read from the cache, is stored too), so the ``embeddings`` view never loses a row.
        """
        self.write_transaction(self.replacing_embeddings(strategy, model_id, {doc_id: (rows, new_cache_entries)}))

    def replacing_embeddings(
        self,
        strategy: str,
        model_id: str,
        embedding_sets: Mapping[str, tuple[Sequence[tuple[int, str, np.ndarray]], dict[str, np.ndarray]]],
        failures: Mapping[str, tuple[str, str, str, str]] | None = None,
        embed_version: str | None = None,
    ) -> Write:
        """The write of :meth:`replace_embeddings` for many documents (doc_id -> (rows,
        new_cache_entries)), one statement per table for them all, to run in an open transaction.

        ``failures``: documents of the batch whose embedding was refused (doc_id -> (doc sha256,
        config hash, embed version, error)); their rows are empty, and the refusal is recorded in
        the same transaction. Every other document of the batch has its recorded failure cleared.
        ``embed_version`` (default: ``model_id``) names the embedder on each reference
        (:meth:`stored_embed_versions`)."""
        failure_rows = [(doc_id, strategy, sha, cfg, version, error, _now())
                        for doc_id, (sha, cfg, version, error) in (failures or {}).items() if doc_id in embedding_sets]
        vectors: dict[str, np.ndarray] = {}
        for rows, new_cache_entries in embedding_sets.values():
            vectors.update({sha: v for _, sha, v in rows})
            vectors.update(new_cache_entries)
        version = embed_version or model_id
        references = [(doc_id, strategy, i, model_id, sha, version)
                      for doc_id, (rows, _) in embedding_sets.items() for i, sha, _ in rows]
        doc_ids = list(embedding_sets)

        def write(con: duckdb.DuckDBPyConnection) -> None:
            if vectors:
                # Another step or run may have stored the same text already.
                _insert_missing_vectors(con, model_id, vectors)
            for table in ("chunk_embeddings", "embedding_failures"):
                con.execute(f"DELETE FROM {table} WHERE strategy = ? AND doc_id IN (SELECT unnest(?::VARCHAR[]))",
                            [strategy, doc_ids])
            insert_rows(con, "chunk_embeddings", CHUNK_EMBEDDING_COLUMNS, references)
            insert_rows(con, "embedding_failures", EMBEDDING_FAILURE_COLUMNS, failure_rows)

        return write

    def load_embeddings(self, doc_id: str, strategy: str) -> list[tuple[int, np.ndarray]]:
        return self.load_embeddings_of([doc_id], strategy).get(doc_id, [])

    def load_embeddings_of(self, doc_ids: Sequence[str], strategy: str) -> dict[str, list[tuple[int, np.ndarray]]]:
        """doc_id -> its (chunk_index, vector) of ``strategy`` in order (empty when none); one query."""
        out: dict[str, list[tuple[int, np.ndarray]]] = {doc_id: [] for doc_id in doc_ids}
        with self.connect(read_only=True) as con:
            for doc_id, i, v in con.execute(
                "SELECT doc_id, chunk_index, embedding FROM embeddings "
                "WHERE doc_id IN (SELECT unnest(?::VARCHAR[])) AND strategy = ? ORDER BY doc_id, chunk_index",
                [list(doc_ids), strategy],
            ).fetchall():
                out[doc_id].append((i, np.asarray(v, dtype=np.float32)))
        return out

    # -- reporting ------------------------------------------------------------------

    def summary(self, source_root: str | None = None) -> dict[str, Any]:
        """Counts of the documents of ``source_root`` (default: all), of their current chunks and
        embeddings (``current_*`` views: rows kept from an earlier parse are not counted) and
        of stored vectors (``embedding_cache``: every model and folder, the cache's size)."""
        docs = "SELECT doc_id FROM documents WHERE source_root = $root OR $root IS NULL"
        params = {"root": source_root}
        with self.connect(read_only=True) as con:
            statuses = dict(con.execute(
                "SELECT status, count(*) FROM documents WHERE source_root = $root OR $root IS NULL GROUP BY status",
                params).fetchall())
            chunks = dict(con.execute(
                f"SELECT strategy, count(*) FROM current_chunks WHERE doc_id IN ({docs}) GROUP BY strategy",
                params).fetchall())
            embeddings = dict(con.execute(
                f"SELECT strategy, count(*) FROM current_embeddings WHERE doc_id IN ({docs}) GROUP BY strategy",
                params).fetchall())
            cache = con.execute("SELECT count(*) FROM embedding_vectors").fetchone()[0]
            # Documents that failed to read or parse, and parsed ones a strategy failed on (their bytes).
            failures = "".join(
                f"UNION ALL SELECT f.doc_id, f.error FROM {table} f JOIN documents d "
                "ON d.doc_id = f.doc_id AND d.sha256 = f.doc_sha256 AND d.status = 'parsed' "
                "WHERE d.source_root = $root OR $root IS NULL "
                for table in ("strategy_failures", "embedding_failures") if has_table(con, table))
            errors = con.execute(
                "SELECT doc_id, error FROM documents WHERE status = 'error' AND (source_root = $root OR $root IS NULL) "
                f"{failures}ORDER BY ALL", params).fetchall()
        return {"documents": statuses, "chunks": chunks, "embeddings": embeddings,
                "embedding_cache": cache, "errors": errors}

    # -- readers beside a running ingest --------------------------------------------

    @contextmanager
    def snapshot(self, *, lock_timeout_s: float = 10.0) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection to a consistent copy of the database, for as long as you like.

        The copy is made under a read lock held only while copying (the writer, which
        retries, waits that long and no longer) and deleted on exit. Use it to query
        while an ingest runs; a connection to the live file would stop the ingest.

        In lake mode nothing is copied: the connection reads in one read-only
        transaction, which DuckLake pins to the snapshot current when it began, and
        writers are never blocked by it.
        """
        if self.lake is not None:
            with self.connect(read_only=True) as con:
                con.execute("BEGIN TRANSACTION READ ONLY")
                # DuckLake takes the transaction's snapshot at its first read: read now, so the
                # caller sees the lake as it is when snapshot() returns, however late it queries.
                con.execute("SELECT count(*) FROM schema_info").fetchall()
                try:
                    yield con
                finally:
                    con.execute("ROLLBACK")
            return
        with tempfile.TemporaryDirectory(prefix="chunkyard-snapshot-") as tmp:
            copy = Path(tmp) / self.path.name
            if self.path.exists():
                with closing(duckdb.connect()) as con:
                    con.execute(f"ATTACH '{_sql_string(copy)}' AS snapshot")
                    reader = ChunkStore(self.path, lock_timeout_s=lock_timeout_s)
                    # Attached read-only, the live file cannot change while it is copied.
                    reader._retry_on_lock(
                        lambda: con.execute(f"ATTACH '{_sql_string(self.path)}' AS live (READ_ONLY)"))
                    con.execute("COPY FROM DATABASE live TO snapshot")
                    # Detached at once: the writer waits only for the copy.
                    con.execute("DETACH live")
            else:
                with ChunkStore(copy).connect():
                    pass
            con = duckdb.connect(str(copy), read_only=True)
            try:
                yield con
            finally:
                con.close()


def _insert_missing_vectors(
    con: duckdb.DuckDBPyConnection, model_id: str, vectors: dict[str, np.ndarray]
) -> set[str]:
    """Insert the vectors (by text sha256) not yet in ``embedding_vectors``; returns their hashes."""
    present = {
        sha for (sha,) in con.execute(
            "SELECT text_sha256 FROM embedding_vectors WHERE model_id = ? "
            "AND text_sha256 IN (SELECT unnest(?::VARCHAR[]))",
            [model_id, list(vectors)],
        ).fetchall()
    }
    rows = [
        (model_id, sha, len(v), np.asarray(v, dtype=np.float32).tolist())
        for sha, v in vectors.items() if sha not in present
    ]
    insert_rows(con, "embedding_vectors", VECTOR_COLUMNS, rows)
    return {sha for _, sha, _, _ in rows}


def insert_rows(
    con: duckdb.DuckDBPyConnection, table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
) -> None:
    """Insert ``rows`` with one statement and one parameter: the rows as one JSON array, which
    DuckDB's ``from_json`` turns back into typed columns (``columns``: name, SQL type).

    Binding a Python list per column costs ~0.15 s per column whatever its length (3 s for a
    step's 600 chunk rows); one JSON string costs ~0.04 s for the same rows. A JSON column
    travels as its text (typed VARCHAR here, cast on insert) so its text is stored unchanged.
    """
    if not rows:
        return
    names = [name for name, _ in columns]
    structure = ", ".join(f'"{name}": "{"VARCHAR" if sql_type == "JSON" else sql_type}"' for name, sql_type in columns)
    payload = json.dumps([dict(zip(names, row)) for row in rows], ensure_ascii=False, default=_json_value)
    con.execute(f"INSERT INTO {table} ({', '.join(names)}) "
                f"SELECT unnest(from_json($1::VARCHAR, '[{{{structure}}}]'), recursive := true)", [payload])


def _json_value(value: Any) -> Any:
    """What ``json.dumps`` cannot write itself: numpy arrays and scalars, timestamps."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    raise TypeError(f"cannot store a {type(value).__name__} in a row")


# The source of a MERGE INTO documents: one row per document, every column by name (INSERT BY
# NAME); each parameter is the list of that column's values (``_document_rows``).
_DOCUMENT_ROWS = """
    SELECT unnest($doc_id::VARCHAR[]) AS doc_id, unnest($source_root::VARCHAR[]) AS source_root,
           unnest($source_path::VARCHAR[]) AS source_path, unnest($sha256::VARCHAR[]) AS sha256,
           unnest($size_bytes::BIGINT[]) AS size_bytes, unnest($format::VARCHAR[]) AS format,
           unnest($encoding::VARCHAR[]) AS encoding, unnest($n_pages::INTEGER[]) AS n_pages,
           unnest($n_chars::BIGINT[]) AS n_chars, unnest($status::VARCHAR[]) AS status,
           unnest($error::VARCHAR[]) AS error, unnest($updated_at::TIMESTAMP[]) AS updated_at
"""


def _document_rows(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """The parameters of ``_DOCUMENT_ROWS``: ``_document_row`` dicts as one list per column."""
    return {column: [row[column] for row in rows] for column in rows[0]}


def _document_row(
    doc_id: str, source_root: str, source_path: str, sha256: str, size_bytes: int, *, status: str,
    error: str | None = None, format: str | None = None, encoding: str | None = None,
    n_pages: int | None = None, n_chars: int | None = None,
) -> dict[str, Any]:
    """One documents row as written now (``_document_rows`` makes the MERGE's parameters)."""
    return {"doc_id": doc_id, "source_root": source_root, "source_path": source_path, "sha256": sha256,
            "size_bytes": size_bytes, "format": format, "encoding": encoding, "n_pages": n_pages,
            "n_chars": n_chars, "status": status, "error": error, "updated_at": _now()}


def _claimed_root(con: duckdb.DuckDBPyConnection) -> str | None:
    row = con.execute("SELECT value FROM schema_info WHERE key = 'source_root'").fetchone()
    return row[0] if row else None


def _conflict_message(db_path: Path | str, source_root: str, claimed: str | None, roots: Sequence[str]) -> str | None:
    """Why ``source_root`` may not write into this database, or None when it may.

    A database first written before claims existed may hold several folders: it is
    claimed only when all its documents come from ``source_root``.
    """
    others = sorted({claimed} if claimed is not None else set(roots) - {source_root})
    if not others or others == [source_root]:
        return None
    name = _folder_name(source_root)
    if Path("data", name, "chunkyard.duckdb").resolve() == Path(str(db_path)).resolve():
        # This very database was made for another folder of that name (an earlier advice
        # followed): naming it again would send the user back to it.
        name = f"{name}-2"
    return (f"{db_path} holds the documents of {', '.join(others)}; it will not take {source_root} too "
            f"(a document is its path inside one folder, so same-named files would overwrite each other). "
            f"Give this folder its own database, in a folder of its own, and its own Dagster instance, e.g. "
            f"CHUNKYARD_DB=data/{name}/chunkyard.duckdb DAGSTER_HOME=.dagster-{name} make run DOCS={source_root}")


def _folder_name(source_root: str) -> str:
    """A name for the folder's own database and instance, from its last path component."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(source_root).name).strip(".-")
    return name or "other"


def _claim_source_root(con: duckdb.DuckDBPyConnection, db_path: Path | str, source_root: str) -> None:
    claimed = _claimed_root(con)
    if claimed == source_root:
        return
    roots = [] if claimed else [r for (r,) in con.execute("SELECT DISTINCT source_root FROM documents").fetchall()]
    message = _conflict_message(db_path, source_root, claimed, roots)
    if message:
        raise SourceRootConflict(message)
    con.execute("INSERT INTO schema_info VALUES ('source_root', ?)", [source_root])


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the connected store has ``name`` (a file of an older schema read read-only lacks newer tables)."""
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND database_name = "
                            "current_database()", [name]).fetchone()[0])


def has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    """Whether the connected store's ``table`` has ``column`` (as :func:`has_table`, for a column)."""
    return bool(con.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = ? "
                            "AND database_name = current_database()", [table, column]).fetchone()[0])


def _sql_string(path: Path) -> str:
    return str(path).replace("'", "''")


def _sql_text(text: str) -> str:
    return text.replace("'", "''")


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class StoreResource(ConfigurableResource):
    """The chunkyard store (a DuckDB file, or a DuckLake) and the folder parsed sidecars are exported to."""

    path: str = Field(default=DEFAULT_DB_PATH, description="DuckDB file (lake mode: the folder of local outputs).")
    sidecar_dir: str | None = Field(
        default=None, description="Where .blocks.jsonl/.tables.json are written; default <db dir>/parsed."
    )
    mode: str = Field(default="duckdb", description="'duckdb' (the embedded file) or 'ducklake'.")
    catalog: str | None = Field(default=None, description="Lake mode: postgres:<libpq>, sqlite:<file>, duckdb:<file>.")
    data_path: str | None = Field(default=None, description="Lake mode: folder or object-storage URL of data files.")
    s3_endpoint: str | None = Field(default=None, description="s3:// data_path: host[:port] of an S3-compatible server.")
    s3_url_style: str | None = Field(default=None, description="s3:// data_path: 'path' or 'vhost'.")
    s3_use_ssl: bool | None = Field(default=None, description="s3:// data_path: https (true) or http (false).")
    s3_region: str | None = Field(default=None, description="s3:// data_path: the bucket's region.")

    def lake_config(self) -> LakeConfig | None:
        return lake_config(self.mode, self.catalog, self.data_path, s3_endpoint=self.s3_endpoint,
                           s3_url_style=self.s3_url_style, s3_use_ssl=self.s3_use_ssl, s3_region=self.s3_region)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """A run refuses, before any step writes, an instance or a folder of side outputs another
        database has claimed, and claims them otherwise (``resources.ownership``): whatever
        started it (the UI, a sensor, the schedule, the CLI), its materializations would land on
        the other database's partitions and its sidecars in the other's folder. A sensor's or
        schedule's tick (no run) checks on its own and skips with the same message."""
        if context.run is None or context.instance is None:
            return
        # Imported here: resources.ownership raises this module's SourceRootConflict.
        from resources.ownership import claim_for_store

        claim_for_store(context.instance, self)

    def store(self, *, lock_timeout_s: float = 60.0) -> ChunkStore:
        return ChunkStore(self.path, lock_timeout_s=lock_timeout_s, sidecar_dir=self.sidecar_path(),
                          lake=self.lake_config())

    def sidecar_path(self) -> Path:
        return Path(self.sidecar_dir) if self.sidecar_dir else Path(self.path).parent / "parsed"
