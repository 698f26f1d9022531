"""Partitions shared by every document asset."""

import os

from dagster import BackfillPolicy, DynamicPartitionsDefinition

from orchestration.errors import SettingsError

DOCUMENTS_PARTITIONS_NAME = "documents"
documents_partitions = DynamicPartitionsDefinition(name=DOCUMENTS_PARTITIONS_NAME)

# A run costs seconds of overhead: a backfill of many documents runs in ranges of
# this many partitions, and every document asset loops over context.partition_keys.
DEFAULT_DOCUMENTS_PER_RUN = 25
DOCUMENTS_PER_RUN_ENV = "CHUNKYARD_DOCUMENTS_PER_RUN"


def documents_per_run(value: str | None) -> int:
    """The backfill range size from ``CHUNKYARD_DOCUMENTS_PER_RUN`` (unset or empty: 25).

    An environment variable, not a chunkyard.toml key: the backfill policy is fixed when
    the asset modules are imported, before any settings file is read. Every process of a
    deployment (webserver, daemon, runs) must see the same value, as with the other
    CHUNKYARD_* variables. Anything but a positive integer is refused with its name.
    """
    if value is None or not value.strip():
        return DEFAULT_DOCUMENTS_PER_RUN
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise SettingsError(f"{DOCUMENTS_PER_RUN_ENV}={value!r}: expected a positive number of documents per run")
    return size


DOCUMENTS_PER_RUN = documents_per_run(os.environ.get(DOCUMENTS_PER_RUN_ENV))
documents_backfill_policy = BackfillPolicy.multi_run(max_partitions_per_run=DOCUMENTS_PER_RUN)

# What every document asset shares: its partitions, batched backfills, and the
# "duckdb" pool. The instance sets the pool's limit: one holder at a time with the
# embedded file (dagster-instance.yaml: DuckDB allows one writing process), as many
# as the run coordinator starts in lake mode (dagster-instance-lake.yaml).
DOCUMENT_ASSET_ARGS = dict(
    partitions_def=documents_partitions,
    backfill_policy=documents_backfill_policy,
    pool="duckdb",
    kinds=frozenset({"duckdb"}),
)
