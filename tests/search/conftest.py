"""Fixtures for the search tests (helpers live in fixture_store.py)."""

import shutil
from pathlib import Path

import pytest

from fixture_store import DOCS, put_document
from resources.store import ChunkStore


@pytest.fixture(scope="session")
def store_template(tmp_path_factory) -> Path:
    # Written once (a dozen small transactions), then copied: each test gets its own file.
    path = tmp_path_factory.mktemp("template") / "store.duckdb"
    s = ChunkStore(path)
    for doc_id, text in DOCS.items():
        put_document(s, doc_id, text)
    return path


@pytest.fixture
def store(tmp_path: Path, store_template: Path) -> ChunkStore:
    path = tmp_path / "store.duckdb"
    shutil.copyfile(store_template, path)
    return ChunkStore(path)
