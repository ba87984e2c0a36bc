"""The declaring examples of docs/declarations.md and docs/contracts.md run as written and declare what they say."""

from conveyor.contract.topology import Topology
from conveyor.sdk.jobs import Job
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
