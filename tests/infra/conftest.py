"""One synth of the project's app per test session, with cdk-nag enforcing as in `make synth`."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template

from conveyor.declarations import Topology
from conveyor.outputs import STACK_NAME
from functions.topology import TOPOLOGY
from infra.app import build_app


@dataclass(frozen=True)
class QueueResources:
    """Logical ids of one declared queue's resources, found through its worker's environment."""

    queue: str
    dlq: str
    function: str


@dataclass(frozen=True)
class Synthesized:
    template: Template
    outdir: Path
    topology: Topology

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.template.to_json()["Resources"]
        return resources

    def of_queue(self, name: str) -> QueueResources:
        for logical_id, resource in self.resources.items():
            if resource["Type"] != "AWS::Lambda::Function":
                continue
            variables = resource["Properties"]["Environment"]["Variables"]
            if variables["CONVEYOR_QUEUE"] == name:
                return QueueResources(
                    queue=variables["CONVEYOR_QUEUE_URL"]["Ref"],
                    dlq=variables["CONVEYOR_DLQ_URL"]["Ref"],
                    function=logical_id,
                )
        raise AssertionError(f"no worker function for queue {name!r}")

    def table(self, key_attribute: str) -> str:
        """The logical id of the one table keyed on ``key_attribute`` that the workers' environment names.

        Only the workers' tables: the ops audit table shares the idempotency table's key
        attribute, and is found through its stack output instead.
        """
        named: set[str] = {
            value["Ref"]
            for resource in self.resources.values()
            if resource["Type"] == "AWS::Lambda::Function"
            for value in resource["Properties"]["Environment"]["Variables"].values()
            if isinstance(value, dict) and "Ref" in value
        }
        (logical_id,) = [
            logical_id
            for logical_id in named
            if self.resources[logical_id]["Type"] == "AWS::DynamoDB::Table"
            and self.resources[logical_id]["Properties"]["KeySchema"]
            == [{"AttributeName": key_attribute, "KeyType": "HASH"}]
        ]
        return logical_id

    def output_ref(self, key: str) -> str:
        """The logical id of the resource whose ``Ref`` the stack output ``key`` carries."""
        ref: str = self.template.to_json()["Outputs"][key]["Value"]["Ref"]
        return ref

    def properties(self, logical_id: str) -> dict[str, Any]:
        properties: dict[str, Any] = self.resources[logical_id]["Properties"]
        return properties


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = build_app(TOPOLOGY, outdir=str(outdir))
    app.synth()  # raises if cdk-nag finds an unacknowledged error
    template = Template.from_json(json.loads((outdir / f"{STACK_NAME}.template.json").read_text()))
    return Synthesized(template=template, outdir=outdir, topology=TOPOLOGY)
