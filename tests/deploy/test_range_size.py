"""CHUNKYARD_DOCUMENTS_PER_RUN: the backfill range size every document asset is defined with."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from assets.partitions import DEFAULT_DOCUMENTS_PER_RUN, DOCUMENTS_PER_RUN_ENV, documents_per_run

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_unset_or_empty_is_the_default():
    assert documents_per_run(None) == documents_per_run("") == documents_per_run("  ") == DEFAULT_DOCUMENTS_PER_RUN == 25


def test_a_positive_integer_is_taken():
    assert documents_per_run("2") == 2
    assert documents_per_run(" 100 ") == 100


@pytest.mark.parametrize("value", ["0", "-3", "two", "2.5"])
def test_anything_else_is_refused_by_name(value):
    with pytest.raises(ValueError, match=f"{DOCUMENTS_PER_RUN_ENV}='{value}'"):
        documents_per_run(value)


def test_every_document_asset_gets_the_range_size_from_the_environment():
    # A fresh interpreter: the policy is fixed when the asset modules are imported.
    probe = (
        "from orchestration.definitions import defs, project\n"
        "graph = defs.resolve_asset_graph()\n"
        "print(sorted({graph.get(k).backfill_policy.max_partitions_per_run for k in project.graph_order}))\n"
    )
    env = {**os.environ, DOCUMENTS_PER_RUN_ENV: "3"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[3]"
