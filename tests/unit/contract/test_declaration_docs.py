"""The declaring examples of docs/declarations.md and docs/contracts.md run as written and declare what they say."""

from datetime import timedelta

import boto3

from conveyor.contract.declarations import Queue
from conveyor.contract.envelope import Envelope
from conveyor.contract.reasons import Reason
from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import Job
from conveyor.testing import run_jobs
from tests.docs_examples import python_blocks, run_blocks


def test_the_declarations_page_builds_its_topology() -> None:
    namespace = run_blocks(python_blocks("docs/declarations.md", "# Declaring queues and job types")[:1])
    topology = namespace["TOPOLOGY"]
    assert isinstance(topology, Topology)
    assert [job.name for job in topology.job_types] == ["charge_order"]
    assert topology.job_type("charge_order").retry.max_attempts == 8


def test_the_contracts_page_declares_a_callable_job_typed_by_its_annotation() -> None:
    namespace = run_blocks(python_blocks("docs/contracts.md", "## Declaring a job type"))
    charge_order = namespace["charge_order"]
    assert isinstance(charge_order, Job)
    assert (charge_order.name, charge_order.queue, charge_order.model) == (
        "charge_order",
        "critical",
        namespace["ChargeOrder"],
    )
    assert charge_order.idempotency_key == "{order_id}#charge_v1"


def test_the_versions_example_runs_an_old_message_through_its_upcaster_and_refuses_a_newer_one() -> None:
    namespace = run_blocks(python_blocks("docs/contracts.md", "## Versions and upcasters"))
    welcome = namespace["send_welcome_email"]
    assert (welcome.version, welcome.supported_versions) == (2, range(1, 3))
    assert welcome.load_payload({"user": "u-1"}, 1) == namespace["WelcomeEmail"](user_id="u-1", locale="en")

    topology = Topology(queues=(Queue("default", age_objective=timedelta(minutes=5)),), job_types=(welcome,))
    with run_jobs(topology) as jobs:
        sqs = boto3.client("sqs")
        for job_id, version, data in (("old", 1, {"user": "u-1"}), ("newer", 3, {"user_id": "u-2", "locale": "de"})):
            envelope = Envelope(type=welcome.name, v=version, id=job_id, created_at=jobs.now(), data=data)
            sqs.send_message(QueueUrl=jobs.provisioned.queues["default"].url, MessageBody=envelope.to_json())

        jobs.drain()

        assert jobs.succeeded(welcome) == 1
        assert [(entry.job_id, entry.reason) for entry in jobs.dead_lettered()] == [
            ("newer", Reason.UNSUPPORTED_VERSION)
        ]
