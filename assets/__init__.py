"""Dagster assets and asset checks: thin; they call the library and the store."""

import warnings

# Two Dagster features this package relies on knowingly (see DESIGN.md): per-partition
# asset checks (preview) and backfill policies (beta). Their warnings would print once
# per asset definition on every load.
warnings.filterwarnings("ignore", message=r".*partitions_def on an AssetCheckSpec.*")
warnings.filterwarnings("ignore", message=r".*Parameter `backfill_policy` of function `asset`.*")
