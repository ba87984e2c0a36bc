"""The harness CPU benchmark's stubs behave as Powertools expects DynamoDB to, and both sides make the same I/O."""

import pytest
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from bench import harness_cpu
from bench.stubs import MemoryDynamoDB
from conveyor.local.lambda_context import LocalLambdaContext

RUNS: list[str] = []


def config() -> IdempotencyConfig:
    """Keyed by ``key``, its in-progress lock tied to an invocation, as the harness's are."""
    made = IdempotencyConfig(event_key_jmespath="key")
    made.register_lambda_context(LocalLambdaContext().as_lambda_context())
    return made


def _record(job: dict[str, str]) -> None:
    RUNS.append(job["key"])


def test_powertools_runs_once_per_key_on_the_in_memory_table() -> None:
    RUNS.clear()
    table = MemoryDynamoDB()
    persistence = DynamoDBPersistenceLayer(table_name="t", key_attr="id", boto3_client=table)
    run = idempotent_function(
        _record,
        data_keyword_argument="job",
        persistence_store=persistence,
        config=config(),
    )
    run(job={"key": "a"})
    run(job={"key": "a"})
    run(job={"key": "b"})
    assert RUNS == ["a", "b"]
    assert table.calls == {"PutItem": 3, "UpdateItem": 2}


def test_a_failed_run_frees_its_key_on_the_in_memory_table() -> None:
    table = MemoryDynamoDB()
    persistence = DynamoDBPersistenceLayer(table_name="t", key_attr="id", boto3_client=table)
    attempts: list[int] = []

    def fail_once(job: dict[str, str]) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")

    run = idempotent_function(fail_once, data_keyword_argument="job", persistence_store=persistence, config=config())
    with pytest.raises(RuntimeError):
        run(job={"key": "a"})
    run(job={"key": "a"})
    assert len(attempts) == 2
    assert table.calls == {"PutItem": 2, "DeleteItem": 1, "UpdateItem": 1}


def test_both_sides_make_the_same_idempotency_calls_in_every_scenario() -> None:
    row = harness_cpu.measure(rounds=1, batches=1)
    observed = "against an anchor that logs and meters as the harness does"
    assert [figure.name for figure in row.figures] == [
        *(f"CPU per job, {s}" for s in ("fresh", "duplicate", "failing")),
        *(f"CPU per job, {s}, {observed}" for s in ("fresh", "duplicate")),
    ]
    calls = row.data["stub_calls_per_job"]
    idempotency = {
        "fresh": {"dynamodb.PutItem": 1.0, "dynamodb.UpdateItem": 1.0},
        "duplicate": {"dynamodb.PutItem": 1.0},
        "failing": {"dynamodb.PutItem": 1.0, "dynamodb.DeleteItem": 1.0},
    }
    for scenario, made in idempotency.items():
        assert calls[scenario]["raw Powertools"] == made, scenario
        if scenario != "failing":
            assert calls[scenario]["raw Powertools, observed"] == made, scenario
        backoff = {"sqs.ChangeMessageVisibility": 1.0} if scenario == "failing" else {}
        assert calls[scenario]["Conveyor harness"] == made | backoff, scenario
