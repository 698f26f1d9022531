"""Partitions shared by every document asset."""

from dagster import BackfillPolicy, DynamicPartitionsDefinition

DOCUMENTS_PARTITIONS_NAME = "documents"
documents_partitions = DynamicPartitionsDefinition(name=DOCUMENTS_PARTITIONS_NAME)

# A run costs seconds of overhead: a backfill of many documents runs in ranges of
# this many partitions, and every document asset loops over context.partition_keys.
DOCUMENTS_PER_RUN = 25
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
