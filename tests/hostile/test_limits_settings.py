"""The [limits] table of chunkyard.toml reaches the documents resource the assets read."""

from __future__ import annotations

import pytest

from chunking.limits import DocumentLimits
from orchestration.definitions import build_project
from orchestration.settings import SettingsError, load_settings


def test_limits_table_reaches_the_documents_resource(tmp_path, monkeypatch):
    monkeypatch.delenv("CHUNKYARD_DOCS", raising=False)
    monkeypatch.delenv("CHUNKYARD_DB", raising=False)
    config = tmp_path / "chunkyard.toml"
    config.write_text('db_path = "%s"\n[limits]\nmax_chars = 1234\nparse_timeout_s = 7\n'
                      "trust_unhashed_sidecars = true\n" % (tmp_path / "db.duckdb"), encoding="utf-8")
    settings = load_settings(config)
    limits = build_project(settings).defs.resources["documents"].document_limits()
    assert limits == DocumentLimits(max_chars=1234, parse_timeout_s=7, trust_unhashed_sidecars=True)
    assert limits.max_bytes == DocumentLimits().max_bytes  # unset keys keep their defaults


def test_unknown_or_unsafe_limit_values_are_rejected(tmp_path):
    config = tmp_path / "chunkyard.toml"
    config.write_text("[limits]\nmax_char = 10\n", encoding="utf-8")
    # One line naming the key (SettingsError, a ValueError).
    with pytest.raises(SettingsError, match=r"limits\.max_char: Extra inputs are not permitted"):
        load_settings(config)
    config.write_text("[limits]\nparse_memory_mb = 0\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"limits\.parse_memory_mb: Input should be greater than or equal to 128"):
        load_settings(config)


def test_the_shipped_chunkyard_toml_states_the_defaults():
    from pathlib import Path

    shipped = load_settings(Path(__file__).resolve().parents[2] / "chunkyard.toml")
    assert shipped.limits == DocumentLimits()
