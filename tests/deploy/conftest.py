"""Fixtures of the deploy/ tests (helpers that read a cluster back: cluster_checks.py)."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def cluster_root():
    """A fresh folder for a LocalCluster, removed afterwards.

    Not under pytest's temp root: run as root, pgserver runs PostgreSQL as its own user,
    and a pytest session starting meanwhile resets that root to 0700 (tests/store does the same).
    """
    root = Path(tempfile.mkdtemp(prefix="chunkyard-cluster-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)
