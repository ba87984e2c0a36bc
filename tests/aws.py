"""Moto-backed AWS for in-process tests, provisioned by the local runtime's own provisioner."""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
from moto import mock_aws

from conveyor.contract.settings import WorkerSettings
from conveyor.contract.topology import Topology
from conveyor.local.provision import Provisioned, provision


@dataclass
class Aws:
    sqs: Any
    dynamodb: Any
    topology: Topology
    provisioned: Provisioned

    def queue_url(self, name: str) -> str:
        return self.provisioned.queues[name].url

    def dlq_url(self, name: str) -> str:
        return self.provisioned.queues[name].dlq_url

    def settings(self, name: str) -> WorkerSettings:
        return self.provisioned.worker_settings(name)

    def receive(self, url: str, *, max_messages: int = 10, visibility: int = 30) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=max_messages,
            VisibilityTimeout=visibility,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        return messages


FunctionEnvironment = Callable[[Aws], Mapping[str, str]]
"""The environment variables a deployed function is given, read off what was provisioned (tests/conftest.py)."""


def moto_aws(topology: Topology) -> Iterator[Aws]:
    """Moto with ``topology`` provisioned while the generator is open: the ``aws`` fixture, and a second topology's."""
    with mock_aws():
        sqs = boto3.client("sqs")
        dynamodb = boto3.client("dynamodb")
        provisioned = provision(topology, sqs=sqs, dynamodb=dynamodb)
        yield Aws(sqs=sqs, dynamodb=dynamodb, topology=topology, provisioned=provisioned)
