"""settings.executor picks the ingest job's executor; nothing else in the definitions changes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestration.definitions import CELERY_BACKEND_ENV, CELERY_BROKER_ENV, INGEST_JOB, build_project
from orchestration.settings import Settings, load_settings


def _ingest_executor(settings: Settings):
    return build_project(settings).defs.resolve_job_def(INGEST_JOB).executor_def


def test_default_is_in_process():
    assert _ingest_executor(Settings()).name == "in_process"


def test_multiprocess_and_celery_are_dagsters_own_executors(monkeypatch):
    assert _ingest_executor(Settings(executor="multiprocess")).name == "multiprocess"
    celery = _ingest_executor(Settings(executor="celery"))
    assert celery.name == "celery"
    # The broker and result backend come from the environment of whoever starts the run
    # (and the workers read the same variables, deploy/dagster_celery_config.py).
    monkeypatch.setenv(CELERY_BROKER_ENV, "sqla+postgresql+psycopg2://broker-here")
    monkeypatch.setenv(CELERY_BACKEND_ENV, "db+postgresql+psycopg2://backend-here")
    resolved = celery.config_schema.resolve_config({})
    assert resolved.success, resolved.errors
    assert resolved.value["config"]["broker"] == "sqla+postgresql+psycopg2://broker-here"
    assert resolved.value["config"]["backend"] == "db+postgresql+psycopg2://backend-here"


def test_only_the_executor_differs():
    plain = build_project(Settings()).defs.resolve_asset_graph()
    celery = build_project(Settings(executor="celery")).defs.resolve_asset_graph()
    assert plain.get_all_asset_keys() == celery.get_all_asset_keys()
    assert {k: plain.get(k).code_version for k in plain.get_all_asset_keys()} == {
        k: celery.get(k).code_version for k in celery.get_all_asset_keys()}


def test_environment_overrides_the_file_and_unknown_executors_are_refused(tmp_path, monkeypatch):
    config = tmp_path / "chunkyard.toml"
    config.write_text('executor = "multiprocess"\n')
    monkeypatch.delenv("CHUNKYARD_EXECUTOR", raising=False)
    assert load_settings(config).executor == "multiprocess"
    monkeypatch.setenv("CHUNKYARD_EXECUTOR", "celery")
    assert load_settings(config).executor == "celery"
    with pytest.raises(ValidationError, match="executor"):
        Settings(executor="k8s")
