"""Where the declared resources are: a deployed stack in AWS, or a local endpoint.

In AWS the stack's outputs are the truth (they name what was deployed, tables included).
Against ``AWS_ENDPOINT_URL`` (the local runtime, or any emulator) there is no stack: queues
and tables have the fixed names the local runtime provisions from the same declarations.
"""

import getpass
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import boto3

from conveyor.contract import naming, outputs
from conveyor.contract.errors import ConveyorError
from conveyor.contract.topology import Topology
from conveyor.ops.audit import AuditLog
from conveyor.ops.event_sources import (
    EventSources,
    LambdaEventSources,
    LocalEventSources,
    ResumeSchedules,
)
from conveyor.worker.idempotency import IdempotentRunner

ENDPOINT_ENV = "AWS_ENDPOINT_URL"
STACK_ENV = "CONVEYOR_STACK"


class TargetNotFoundError(ConveyorError, LookupError):
    """The stack, an output or a queue is missing: the message says which, in one line."""


@dataclass(frozen=True)
class QueueTarget:
    name: str
    url: str
    dlq_url: str
    fifo: bool
    # Where its worker logs (`conveyor tail` reads it); None for a stack deployed before the output existed.
    log_group: str | None = None


class Clients:
    """One boto3 client per service, made on first use with the ambient configuration."""

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}

    def __call__(self, service: str) -> Any:
        if service not in self._made:
            self._made[service] = boto3.client(service)  # type: ignore[call-overload]
        return self._made[service]


@dataclass
class Target:
    """Where operator commands act: the queues' URLs, the tables and the event sources, in AWS or locally."""

    kind: str
    queues: dict[str, QueueTarget]
    audit_table: str
    idempotency_table: str
    limits_table: str
    ledger_table: str
    event_sources: EventSources
    clients: Clients
    # The run audit (conveyor.worker.schedule_runs), where a queue's pause is marked for its schedules; None without.
    schedule_runs_table: str | None = None
    # The stack's own DLQs (`conveyor dlq ... relay|schedules`); a schedules DLQ only where schedules are declared.
    relay_dlq_url: str | None = None
    schedules_dlq_url: str | None = None
    # Where a relayed job claims its dedupe key (conveyor.sdk.dedupe): `conveyor dlq redrive relay` claims as the relay.
    dedupe_table: str | None = None

    def queue(self, name: str) -> QueueTarget:
        return self.queues[name]

    @cached_property
    def actor(self) -> str:
        """Who is acting, for the audit: the AWS identity, and the login that used it."""
        identity = self.clients("sts").get_caller_identity()
        return f"{identity['Arn']} ({_login()})"

    def audit(self) -> AuditLog:
        return AuditLog(self.clients("dynamodb"), self.audit_table, actor=self.actor)

    def idempotency(self, topology: Topology, job_type: str) -> IdempotentRunner:
        return IdempotentRunner(
            topology.job_type(job_type), table_name=self.idempotency_table, dynamodb_client=self.clients("dynamodb")
        )


def _login() -> str:
    """The OS login, where there is one (a container may have no user entry)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown login"


def is_local() -> bool:
    return bool(os.environ.get(ENDPOINT_ENV))


def local_target(topology: Topology, clients: Clients) -> Target:
    """The fixed-name resources the local runtime provisions from the declarations."""
    queues = {}
    for queue in topology.queues:
        try:
            url = clients("sqs").get_queue_url(QueueName=naming.queue_name(queue.name, fifo=queue.fifo))["QueueUrl"]
            dlq = clients("sqs").get_queue_url(QueueName=naming.dlq_name(queue.name, fifo=queue.fifo))["QueueUrl"]
        except clients("sqs").exceptions.QueueDoesNotExist as error:
            raise TargetNotFoundError(
                f"queue {queue.name!r} does not exist at {os.environ.get(ENDPOINT_ENV)}; "
                "is `conveyor local up` running?"
            ) from error
        queues[queue.name] = QueueTarget(
            name=queue.name, url=url, dlq_url=dlq, fifo=queue.fifo, log_group=naming.local_worker_log_group(queue.name)
        )
    return Target(
        kind="local",
        queues=queues,
        audit_table=naming.table_name(naming.AUDIT_TABLE),
        idempotency_table=naming.table_name(naming.IDEMPOTENCY_TABLE),
        limits_table=naming.table_name(naming.LIMITS_TABLE),
        ledger_table=naming.table_name(naming.EFFECTS_LEDGER_TABLE),
        event_sources=LocalEventSources(
            clients("dynamodb"),
            naming.table_name(naming.LOCAL_EVENT_SOURCES_TABLE),
            audit_table=naming.table_name(naming.AUDIT_TABLE),
        ),
        clients=clients,
        schedule_runs_table=naming.table_name(naming.SCHEDULE_RUNS_TABLE) if topology.schedules else None,
        relay_dlq_url=_local_queue_url(clients, naming.RELAY_DLQ),
        schedules_dlq_url=_local_queue_url(clients, naming.SCHEDULES_DLQ) if topology.schedules else None,
        dedupe_table=naming.table_name(naming.DEDUPE_TABLE),
    )


def _local_queue_url(clients: Clients, name: str) -> str | None:
    try:
        return str(clients("sqs").get_queue_url(QueueName=naming.queue_name(name))["QueueUrl"])
    except clients("sqs").exceptions.QueueDoesNotExist:
        return None


def stack_target(topology: Topology, clients: Clients, stack_name: str) -> Target:
    """The deployed resources, read from the stack's outputs."""
    try:
        stacks = clients("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except clients("cloudformation").exceptions.ClientError as error:
        if "does not exist" in str(error):
            raise TargetNotFoundError(f"stack {stack_name!r} not found; deploy it, or pass --stack") from error
        raise
    found = {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}

    def output(key: str) -> str:
        if key not in found:
            raise TargetNotFoundError(f"stack {stack_name!r} has no output {key}; deploy this version of the stack")
        return str(found[key])

    queues = {
        queue.name: QueueTarget(
            name=queue.name,
            url=output(outputs.queue_output_key(queue.name, outputs.QUEUE_URL)),
            dlq_url=output(outputs.queue_output_key(queue.name, outputs.DLQ_URL)),
            fifo=queue.fifo,
            log_group=found.get(outputs.queue_output_key(queue.name, outputs.WORKER_LOG_GROUP)),
        )
        for queue in topology.queues
    }
    mappings = {
        queue.name: output(outputs.queue_output_key(queue.name, outputs.EVENT_SOURCE_MAPPING))
        for queue in topology.queues
    }
    schedules = ResumeSchedules(
        group=output(outputs.RESUME_SCHEDULE_GROUP),
        role_arn=output(outputs.RESUME_SCHEDULE_ROLE),
        prefix=output(outputs.PREFIX),
        function_arn=output(outputs.RESUME_FUNCTION),
    )
    return Target(
        kind="aws",
        queues=queues,
        audit_table=output(outputs.OPS_AUDIT_TABLE),
        idempotency_table=output(outputs.IDEMPOTENCY_TABLE),
        limits_table=output(outputs.LIMITS_TABLE),
        ledger_table=output(outputs.LEDGER_TABLE),
        event_sources=LambdaEventSources(
            clients("lambda"), clients("scheduler"), mappings=mappings, schedules=schedules
        ),
        clients=clients,
        schedule_runs_table=found.get(outputs.SCHEDULE_RUNS_TABLE),
        relay_dlq_url=found.get(outputs.RELAY_DLQ_URL),
        schedules_dlq_url=found.get(outputs.SCHEDULES_DLQ_URL),
        dedupe_table=found.get(outputs.DEDUPE_TABLE),
    )


def find_target(topology: Topology, stack_name: str | None) -> Target:
    """The local runtime's resources when AWS_ENDPOINT_URL is set, else the deployed stack's, by its outputs."""
    clients = Clients()
    if is_local():
        return local_target(topology, clients)
    return stack_target(topology, clients, stack_name or os.environ.get(STACK_ENV) or outputs.STACK_NAME)
