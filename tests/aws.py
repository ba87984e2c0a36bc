"""Moto-backed AWS for in-process tests: the declared queues and tables, created as the stack does."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from moto import mock_aws

from conveyor import naming
from conveyor.declarations import Topology
from conveyor.settings import WorkerSettings
from functions.providers.effects import DEFAULT_EFFECTS_TABLE, KEY_ATTRIBUTE

IDEMPOTENCY_TABLE = "conveyor-idempotency"


@dataclass
class Aws:
    sqs: Any
    dynamodb: Any
    topology: Topology

    def queue_url(self, name: str) -> str:
        fifo = self.topology.queue(name).fifo
        return str(self.sqs.get_queue_url(QueueName=naming.queue_name(name, fifo=fifo))["QueueUrl"])

    def dlq_url(self, name: str) -> str:
        fifo = self.topology.queue(name).fifo
        return str(self.sqs.get_queue_url(QueueName=naming.dlq_name(name, fifo=fifo))["QueueUrl"])

    def settings(self, name: str) -> WorkerSettings:
        return WorkerSettings(
            queue=name,
            queue_url=self.queue_url(name),
            dlq_url=self.dlq_url(name),
            idempotency_table=IDEMPOTENCY_TABLE,
        )

    def receive(self, url: str, *, max_messages: int = 10, visibility: int = 30) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=max_messages,
            VisibilityTimeout=visibility,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        return messages


def create_topology(sqs: Any, dynamodb: Any, topology: Topology) -> None:
    for queue in topology.queues:
        fifo = {"FifoQueue": "true"} if queue.fifo else {}
        dlq_url = sqs.create_queue(QueueName=naming.dlq_name(queue.name, fifo=queue.fifo), Attributes=fifo)["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sqs.create_queue(
            QueueName=naming.queue_name(queue.name, fifo=queue.fifo),
            Attributes={
                **fifo,
                "VisibilityTimeout": str(int(queue.effective_visibility_timeout.total_seconds())),
                "RedrivePolicy": (
                    f'{{"deadLetterTargetArn": "{dlq_arn}", '
                    f'"maxReceiveCount": "{topology.max_receive_count(queue.name)}"}}'
                ),
            },
        )
    for table, key in ((IDEMPOTENCY_TABLE, "id"), (DEFAULT_EFFECTS_TABLE, KEY_ATTRIBUTE)):
        dynamodb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )


def moto_aws(topology: Topology) -> Iterator[Aws]:
    with mock_aws():
        sqs = boto3.client("sqs")
        dynamodb = boto3.client("dynamodb")
        create_topology(sqs, dynamodb, topology)
        yield Aws(sqs=sqs, dynamodb=dynamodb, topology=topology)
