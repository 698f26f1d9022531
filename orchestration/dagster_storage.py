"""Dagster's PostgreSQL storage (dagster-postgres) keeping one idle connection per process.

deploy/dagster.yaml names these classes as the instance's ``run_storage``,
``event_log_storage`` and ``schedule_storage``; every process that loads the instance
(webserver, daemon, run workers, celery workers; run workers through the instance ref,
which names the same classes) then uses them. Each is its dagster-postgres class (so
``isinstance(instance.run_storage, PostgresRunStorage)`` holds) with another engine.

Why: dagster-postgres creates its engines with SQLAlchemy's ``NullPool``, so every
storage call (storing an event, a check result, updating the asset index, reading a
run) opens a new PostgreSQL connection: a backend process forked, authenticated and
warmed up, then thrown away. A range run makes thousands of such calls. Measured with
``bench/bench_scale.py`` (one 4-document range run, lake mode, load ~9): 2,866 sessions
and 15.8 of the run's 40.0 CPU seconds in PostgreSQL; with one pooled connection per
storage, 73 sessions and 2.1 s (README "Scale out").

Invariants: the tables, queries and events are dagster-postgres's own (only the engines
differ); at most one idle connection per storage and process (``pool_size=1``); a burst
of concurrent calls never waits for a connection (``max_overflow=-1``: extra ones are
opened and closed as before); a connection the server dropped is replaced before use
(``pool_pre_ping``) and none is reused after ``POOL_RECYCLE_S``.
"""

from __future__ import annotations

from typing import Any

from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config

POOL_RECYCLE_S = 3600
POOL_OPTIONS = {"pool_size": 1, "max_overflow": -1, "pool_recycle": POOL_RECYCLE_S, "pool_pre_ping": True}


def pool_engine(storage: Any) -> None:
    """Replace ``storage``'s NullPool engine (a dagster-postgres run, event log or schedule storage)
    by a pooled one on the same URL, isolation level and credentials."""
    old = storage._engine
    storage._engine = create_pg_engine(storage.postgres_url, storage._token_provider, isolation_level="AUTOCOMMIT",
                                       **POOL_OPTIONS)
    old.dispose()


class _Pooled:
    """Mixin: the dagster-postgres storage it precedes, its engine pooled (config unchanged:
    ``postgres_url`` or ``postgres_db``)."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True, inst_data=None,
                 token_provider=None) -> None:
        super().__init__(postgres_url, should_autocreate_tables, inst_data=inst_data, token_provider=token_provider)
        pool_engine(self)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )


class PooledPostgresRunStorage(_Pooled, PostgresRunStorage):
    """Runs (dagster-postgres's PostgresRunStorage), one pooled connection per process."""


class PooledPostgresEventLogStorage(_Pooled, PostgresEventLogStorage):
    """Events (dagster-postgres's PostgresEventLogStorage), one pooled connection per process."""


class PooledPostgresScheduleStorage(_Pooled, PostgresScheduleStorage):
    """Schedules and sensors (dagster-postgres's PostgresScheduleStorage), one pooled connection per process."""
