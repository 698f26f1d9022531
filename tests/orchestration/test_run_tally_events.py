"""The CLI's summary counts what a run stored, not only what its result object carries.

A one-document run whose step fails records the failed check first with
``context.log_event`` (assets/checks.py ``record_failed_partition``); Dagster stores that
event, but ``execute_job``'s result does not list it. The summary read the result and
left the failed ``parsed_documents.parsed`` row out; it now reads the instance.
"""

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetCheckSpec,
    DagsterInstance,
    Definitions,
    Failure,
    StaticPartitionsDefinition,
    asset,
    define_asset_job,
    execute_job,
    in_process_executor,
    reconstructable,
)

from orchestration.run_report import FAILED, RunTally, run_events

PARTITIONS = StaticPartitionsDefinition(["broken.pdf"])


@asset(partitions_def=PARTITIONS, check_specs=[AssetCheckSpec("parsed", asset="parsed_documents")])
def parsed_documents(context):
    context.log_event(AssetCheckEvaluation(
        asset_key=context.asset_key, check_name="parsed", passed=False, partition=context.partition_key,
        severity=AssetCheckSeverity.ERROR, description="broken.pdf: PDF is truncated"))
    raise Failure(description="broken.pdf: PDF is truncated", metadata={"document": "broken.pdf"})


def failing_job():
    return Definitions(assets=[parsed_documents],
                       jobs=[define_asset_job("parse", selection=[parsed_documents], partitions_def=PARTITIONS,
                                              executor_def=in_process_executor)]
                       ).resolve_job_def("parse")


def test_a_failed_check_logged_before_the_step_fails_is_counted(tmp_path):
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        result = execute_job(reconstructable(failing_job), instance=instance,
                             tags={"dagster/partition": "broken.pdf"}, raise_on_error=False)
        assert not result.success
        tally = RunTally()
        tally.add_run(result, run_events(instance, result.run_id))
    assert tally.check_counts()["parsed_documents.parsed"] == {FAILED: 1}
    assert [f.line() for f in tally.all_failures()] == ["broken.pdf  [parse]  PDF is truncated"]


def test_a_cause_repeated_by_a_later_stage_is_listed_once():
    # A file refused when read is refused again by its parse, with the same words: one line.
    tally = RunTally()
    tally.note_failure("big.txt", "read", "big.txt: file size 52428801 bytes is over the limit of 52428800 bytes")
    tally.note_failure("big.txt", "parse", "big.txt: file size 52428801 bytes is over the limit of 52428800 bytes")
    # Two causes of one document (chunked, then refused by the model) each keep their line; so does
    # a stage's second report of itself, which adds nothing.
    tally.note_failure("slow.txt", "chunk semantic", "slow.txt: semantic failed: too slow")
    tally.note_failure("slow.txt", "embed recursive", "slow.txt: recursive embedding time is over the limit")
    tally.note_failure("slow.txt", "embed recursive", "slow.txt: recursive vectors could not be stored")
    # Two strategies' checks failing in the same words (a check's description need not name its
    # strategy) are two failures: both listed.
    tally.note_failure("gap.txt", "chunk recursive", "gap.txt: 12 non-whitespace character(s) are in no chunk")
    tally.note_failure("gap.txt", "chunk paragraph", "gap.txt: 12 non-whitespace character(s) are in no chunk")
    assert [f.line() for f in tally.all_failures()] == [
        "big.txt  [read]  file size 52428801 bytes is over the limit of 52428800 bytes",
        "gap.txt  [chunk recursive]  12 non-whitespace character(s) are in no chunk",
        "gap.txt  [chunk paragraph]  12 non-whitespace character(s) are in no chunk",
        "slow.txt  [chunk semantic]  semantic failed: too slow",
        "slow.txt  [embed recursive]  recursive embedding time is over the limit",
    ]
