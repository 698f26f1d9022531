"""Declarative automation: once the sensor's run updates raw_documents, the rest follows."""

from dagster import AssetKey, evaluate_automation_conditions

from orchestration.definitions import build_project


def test_downstream_assets_follow_a_new_raw_document(settings, instance):
    project = build_project(settings)
    instance.add_dynamic_partitions("documents", ["alpha.md"])
    # The automation sensor's previous tick: it only looks at what changed since.
    baseline = evaluate_automation_conditions(defs=project.defs, instance=instance)
    # What the sensor's run does: materialize raw_documents for the new document.
    job = project.defs.resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(
        instance=instance, partition_key="alpha.md", asset_selection=[AssetKey("raw_documents")]
    ).success

    result = evaluate_automation_conditions(defs=project.defs, instance=instance, cursor=baseline.cursor)
    # The whole chain below raw_documents, in one tick, for exactly that document.
    downstream = project.graph_order[1:]
    for key in downstream:
        assert result.get_requested_partitions(key) == {"alpha.md"}, key
    assert result.get_requested_partitions(AssetKey("raw_documents")) == set()
    assert result.total_requested == len(downstream)
