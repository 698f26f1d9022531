"""The shipped chunkyard.toml fits the default embedding model: on examples/docs
every per-document check passes, WARN ones (within_model_max_sequence) included."""

from orchestration.definitions import build_project
from orchestration.settings import load_settings
from resources.documents import DocumentsFolder
from tests.assets.test_pipeline import check_evaluations, register, run_range
from tests.conftest import REPO_ROOT


def test_the_shipped_config_passes_every_check_on_the_examples(instance, tmp_path):
    shipped = load_settings(REPO_ROOT / "chunkyard.toml")
    settings = shipped.model_copy(update={
        "docs_root": str(REPO_ROOT / "examples" / "docs"),
        "db_path": str(tmp_path / "chunkyard.duckdb"),
        "sidecar_dir": str(tmp_path / "parsed"),
    })
    # Every registered strategy is configured for the model, not left at its seed's size.
    project = build_project(settings)
    assert set(shipped.strategies) == set(project.config_hashes)

    docs = sorted(DocumentsFolder(root=settings.docs_root).scan())
    assert len(docs) >= 4
    register(instance, *docs)
    result = run_range(project, instance, docs[0], docs[-1])
    assert result.success

    evaluations = check_evaluations(result)
    expected = {
        (key.asset_key.to_user_string(), key.name, doc)
        for assets_def in project.defs.assets if assets_def.partitions_def is not None  # per document
        for key in assets_def.check_keys for doc in docs
    }
    assert set(evaluations) == expected
    failed = sorted(k for k, passed in evaluations.items() if not passed)
    assert not failed, failed
