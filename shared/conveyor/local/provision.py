"""Create the declared queues and tables with the settings the CDK stack gives them.

The stack and this module both derive every setting from the declarations; a test compares
the synthesized template with what this module creates, so the two cannot drift apart.
"""

import json
from dataclasses import dataclass
from typing import Any

from conveyor.contract import limits, naming
from conveyor.contract.declarations import Queue
from conveyor.contract.relay_settings import DEDUPE_TABLE_ENV, OUTBOX_SOURCE, RelaySettings
from conveyor.contract.settings import WorkerSettings
from conveyor.contract.topology import Topology
from conveyor.ops.audit import AUDIT_KEY, AUDIT_TTL
from conveyor.ops.event_sources import LOCAL_EVENT_SOURCES_KEY, LocalEventSources
from conveyor.sdk import dedupe
from conveyor.sdk.outbox import EXPIRES_AT as OUTBOX_TTL
from conveyor.sdk.outbox import KEY as OUTBOX_KEY
from conveyor.sdk.outbox import OUTBOX_TABLE_ENV
from conveyor.worker import checkpoints, effects, lease, schedule_runs
from conveyor.worker.destinations import state as limits_state
from conveyor.worker.idempotency import RECORD_KEY, RECORD_TTL


@dataclass(frozen=True)
class ProvisionedQueue:
    name: str
    url: str
    arn: str
    dlq_url: str


@dataclass(frozen=True)
class Provisioned:
    """Where the local resources are, and the environment the stack would give the workers."""

    queues: dict[str, ProvisionedQueue]
    idempotency_table: str
    checkpoints_table: str
    schedule_runs_table: str
    leases_table: str
    limits_table: str
    ledger_table: str
    tables: dict[str, str]
    audit_table: str
    event_sources_table: str
    outbox_table: str
    dedupe_table: str
    relay_dlq_url: str
    # Relay source (OUTBOX_SOURCE or a streamed table's declared name) -> its stream's ARN.
    streams: dict[str, str]
    # Where the local scheduler puts what it gave up delivering, as the stack's schedules DLQ; None without schedules.
    schedules_dlq_url: str | None = None

    def worker_settings(self, queue: str) -> WorkerSettings:
        provisioned = self.queues[queue]
        return WorkerSettings(
            queue=queue,
            queue_url=provisioned.url,
            dlq_url=provisioned.dlq_url,
            idempotency_table=self.idempotency_table,
            checkpoints_table=self.checkpoints_table,
            schedule_runs_table=self.schedule_runs_table,
            leases_table=self.leases_table,
            limits_table=self.limits_table,
            ledger_table=self.ledger_table,
        )

    def table_environment(self) -> dict[str, str]:
        """What the stack gives workers and producers: declared tables' names, and the outbox's."""
        environment = {naming.table_env(name): physical for name, physical in self.tables.items()}
        environment[OUTBOX_TABLE_ENV] = self.outbox_table
        environment[DEDUPE_TABLE_ENV] = self.dedupe_table
        return environment

    def relay_settings(self, source: str) -> RelaySettings:
        return RelaySettings(
            source=source,
            dlq_url=self.relay_dlq_url,
            queue_urls={name: queue.url for name, queue in self.queues.items()},
            dedupe_table=self.dedupe_table,
        )


def queue_attributes(queue: Queue, *, max_receive_count: int, dlq_arn: str) -> dict[str, str]:
    """The work queue's attributes, as JobQueue sets them."""
    attributes = {
        "MessageRetentionPeriod": str(int(queue.retention.total_seconds())),
        "VisibilityTimeout": str(int(queue.effective_visibility_timeout.total_seconds())),
        "SqsManagedSseEnabled": "true",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count}),
    }
    return {**attributes, **_fifo(queue)}


def event_source_settings(queue: Queue) -> dict[str, Any]:
    """The event source mapping's settings, in the template's terms, as the poller applies them."""
    settings: dict[str, Any] = {
        "BatchSize": queue.batch_size,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": queue.max_concurrency},
    }
    if queue.batching_window:
        settings["MaximumBatchingWindowInSeconds"] = int(queue.batching_window.total_seconds())
    return settings


def dlq_attributes(queue: Queue) -> dict[str, str]:
    """The DLQ's attributes, as JobQueue sets them: the longest retention SQS allows."""
    return {
        "MessageRetentionPeriod": str(int(limits.SQS_MAX_RETENTION.total_seconds())),
        "SqsManagedSseEnabled": "true",
        **_fifo(queue),
    }


def _fifo(queue: Queue) -> dict[str, str]:
    return {"FifoQueue": "true"} if queue.fifo else {}


def provision(topology: Topology, *, sqs: Any, dynamodb: Any, prefix: str | None = None) -> Provisioned:
    """Create (or find, if they exist) every declared queue, DLQ and table, and what `conveyor` operates with.

    Each queue's emulated event source mapping starts enabled at its declared concurrency,
    unless an earlier run left one (paused, say), which is kept.
    """
    queues = {}
    for queue in topology.queues:
        dlq_url = sqs.create_queue(
            QueueName=naming.dlq_name(queue.name, fifo=queue.fifo, prefix=prefix), Attributes=dlq_attributes(queue)
        )["QueueUrl"]
        dlq_arn = _arn(sqs, dlq_url)
        url = sqs.create_queue(
            QueueName=naming.queue_name(queue.name, fifo=queue.fifo, prefix=prefix),
            Attributes=queue_attributes(
                queue, max_receive_count=topology.max_receive_count(queue.name), dlq_arn=dlq_arn
            ),
        )["QueueUrl"]
        queues[queue.name] = ProvisionedQueue(name=queue.name, url=url, arn=_arn(sqs, url), dlq_url=dlq_url)
    idempotency = naming.table_name(naming.IDEMPOTENCY_TABLE, prefix=prefix)
    _create_table(dynamodb, idempotency, key=RECORD_KEY, ttl_attribute=RECORD_TTL)
    checkpoints_table = naming.table_name(naming.CHECKPOINTS_TABLE, prefix=prefix)
    _create_table(dynamodb, checkpoints_table, key=checkpoints.KEY, ttl_attribute=checkpoints.EXPIRES_AT)
    schedule_runs_table = naming.table_name(naming.SCHEDULE_RUNS_TABLE, prefix=prefix)
    _create_table(dynamodb, schedule_runs_table, key=schedule_runs.KEY, ttl_attribute=schedule_runs.EXPIRES_AT)
    # No TTL on leases: deleting an item would restart its fencing token (conveyor.worker.lease).
    leases_table = naming.table_name(naming.LEASES_TABLE, prefix=prefix)
    _create_table(dynamodb, leases_table, key=lease.KEY, ttl_attribute=None)
    limits_table = naming.table_name(naming.LIMITS_TABLE, prefix=prefix)
    _create_table(dynamodb, limits_table, key=limits_state.KEY, ttl_attribute=limits_state.EXPIRES_AT)
    ledger_table = naming.table_name(naming.EFFECTS_LEDGER_TABLE, prefix=prefix)
    _create_table(
        dynamodb,
        ledger_table,
        key=effects.KEY,
        ttl_attribute=effects.EXPIRES_AT,
        index=(effects.PENDING_INDEX, effects.PENDING, effects.INTENDED_AT),
    )
    tables = {}
    streamed = {table.name for table in topology.streamed_tables()}
    streams = {}
    for table in topology.tables:
        tables[table.name] = naming.table_name(table.name, prefix=prefix)
        _create_table(
            dynamodb,
            tables[table.name],
            key=table.key,
            ttl_attribute=table.ttl_attribute,
            stream=table.name in streamed,
        )
        if table.name in streamed:
            streams[table.name] = _stream_arn(dynamodb, tables[table.name])
    outbox = naming.table_name(naming.OUTBOX_TABLE, prefix=prefix)
    _create_table(dynamodb, outbox, key=OUTBOX_KEY, ttl_attribute=OUTBOX_TTL, stream=True)
    dedupe_table = naming.table_name(naming.DEDUPE_TABLE, prefix=prefix)
    _create_table(dynamodb, dedupe_table, key=dedupe.KEY, ttl_attribute=dedupe.EXPIRES_AT)
    streams[OUTBOX_SOURCE] = _stream_arn(dynamodb, outbox)
    relay_dlq_url = sqs.create_queue(
        QueueName=naming.queue_name(naming.RELAY_DLQ, prefix=prefix), Attributes=relay_dlq_attributes()
    )["QueueUrl"]
    audit = naming.table_name(naming.AUDIT_TABLE, prefix=prefix)
    _create_table(dynamodb, audit, key=AUDIT_KEY, ttl_attribute=AUDIT_TTL)
    event_sources = naming.table_name(naming.LOCAL_EVENT_SOURCES_TABLE, prefix=prefix)
    _create_table(dynamodb, event_sources, key=LOCAL_EVENT_SOURCES_KEY, ttl_attribute=None)
    LocalEventSources(dynamodb, event_sources).seed(topology)
    schedules_dlq_url = (
        sqs.create_queue(
            QueueName=naming.queue_name(naming.SCHEDULES_DLQ, prefix=prefix), Attributes=relay_dlq_attributes()
        )["QueueUrl"]
        if topology.schedules
        else None
    )
    return Provisioned(
        queues=queues,
        idempotency_table=idempotency,
        checkpoints_table=checkpoints_table,
        schedule_runs_table=schedule_runs_table,
        leases_table=leases_table,
        limits_table=limits_table,
        ledger_table=ledger_table,
        tables=tables,
        audit_table=audit,
        event_sources_table=event_sources,
        outbox_table=outbox,
        dedupe_table=dedupe_table,
        relay_dlq_url=relay_dlq_url,
        streams=streams,
        schedules_dlq_url=schedules_dlq_url,
    )


def _arn(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def relay_dlq_attributes() -> dict[str, str]:
    """The relay DLQ's attributes (and the schedules DLQ's): what lands there waits as long as SQS allows."""
    return {
        "MessageRetentionPeriod": str(int(limits.SQS_MAX_RETENTION.total_seconds())),
        "SqsManagedSseEnabled": "true",
    }


def _stream_arn(dynamodb: Any, table: str) -> str:
    return str(dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"])


def _create_table(
    dynamodb: Any,
    name: str,
    *,
    key: str,
    ttl_attribute: str | None,
    stream: bool = False,
    index: tuple[str, str, str] | None = None,
) -> None:
    """A table keyed by one string attribute; ``stream`` enables a NEW_IMAGE stream, as the relays read.

    ``index`` is (name, string partition key, number sort key) of a global secondary index projecting
    every attribute, as the effect ledger's pending index (conveyor.worker.effects) is.
    """
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": [{"AttributeName": key, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": key, "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if index is not None:
        index_name, partition, sort = index
        request["AttributeDefinitions"] += [
            {"AttributeName": partition, "AttributeType": "S"},
            {"AttributeName": sort, "AttributeType": "N"},
        ]
        request["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index_name,
                "KeySchema": [
                    {"AttributeName": partition, "KeyType": "HASH"},
                    {"AttributeName": sort, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ]
    if stream:
        request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}
    try:
        dynamodb.create_table(**request)
    except dynamodb.exceptions.ResourceInUseException:
        return
    if ttl_attribute:
        dynamodb.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl_attribute}
        )
