"""The stack and the worker agree on the environment through one class."""

from conveyor.contract.settings import WorkerSettings


def test_settings_survive_the_trip_through_the_environment() -> None:
    settings = WorkerSettings(
        queue="bulk",
        queue_url="q",
        dlq_url="d",
        idempotency_table="t",
        checkpoints_table="c",
        schedule_runs_table="r",
        leases_table="l",
        limits_table="lim",
        ledger_table="led",
    )
    environment = settings.to_environment()
    assert WorkerSettings.from_environment(environment) == settings
    assert environment["POWERTOOLS_SERVICE_NAME"] == "conveyor"
    assert environment["POWERTOOLS_METRICS_NAMESPACE"] == "Conveyor"
