"""Shared fixtures: a small documents folder, settings pointing at temp paths, a test instance."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_CORPUS = REPO_ROOT.parent / "shared" / "corpus"


def load_bench(name: str):
    """The script ``bench/<name>.py`` as a module (bench/ is not a package; its scripts run on their own)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def chunking_log_level():
    """The CLI's ``quiet_libraries`` raises the ``chunking`` logger to ERROR for its process; a
    test calling ``main`` in-process must not leave it so for the tests after it (caplog)."""
    import logging

    logger = logging.getLogger("chunking")
    level = logger.level
    yield
    logger.setLevel(level)


ALPHA_MD = """# Alpha

Alpha is the first document. It has a heading, two paragraphs and enough words
to be cut into a few chunks when the cap is small.

## Alpha details

The second section repeats the idea with other words, so that the recursive
strategy has paragraph boundaries to prefer over spaces and characters.
"""

BETA_TXT = """Beta is plain text without headings.

It talks about something else entirely: the weather on a small island, where
the wind turns every afternoon and the boats come back before dark.

分块之间的重叠是一种廉价的保险。当一个事实恰好位于边界上时，重叠可以保证它完整出现。
"""


@pytest.fixture
def docs_dir(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "alpha.md").write_text(ALPHA_MD, encoding="utf-8")
    (docs / "sub" / "beta.txt").write_text(BETA_TXT, encoding="utf-8")
    return docs


@pytest.fixture
def settings(tmp_path: Path, docs_dir: Path):
    from orchestration.settings import Settings

    return Settings(
        docs_root=str(docs_dir),
        db_path=str(tmp_path / "db" / "chunkyard.duckdb"),
        strategies={"recursive": {"chunk_token_size": 40, "chunk_overlap_token_size": 8}},
    )


@pytest.fixture
def instance():
    from dagster import instance_for_test

    with instance_for_test() as inst:
        yield inst
