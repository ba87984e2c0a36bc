"""One synth of the project's app per test session, with cdk-nag enforcing as in `make synth`.

``stream_synthesized`` is a second one, of a topology with stream rules on one of two tables,
built only in sessions that ask for it. Under pytest-xdist the tests using each run on one worker
(an xdist_group per synth), so each is still built once per run. With ``$CONVEYOR_CDK_OUT`` set
(`make test` sets it), the project's synth is written there, for cfn-lint to lint afterwards.
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Template

from conveyor.contract.outputs import STACK_NAME
from conveyor.contract.relay_settings import SOURCE_ENV
from conveyor.contract.settings import WorkerSettings
from conveyor.contract.topology import Topology
from conveyor.sdk.outbox import OUTBOX_TABLE_ENV
from functions.topology import TOPOLOGY
from infra.app import build_app
from tests.fixtures.stream_topology import TOPOLOGY as STREAM_TOPOLOGY

TOPOLOGY_SPEC = "functions.topology:TOPOLOGY"
CDK_OUT_ENV = "CONVEYOR_CDK_OUT"
SYNTH_GROUP = "cdk-synth"
SESSION_SYNTHS = {"synthesized", "stream_synthesized"}
STREAM_TOPOLOGY_SPEC = "tests.fixtures.stream_topology:TOPOLOGY"


@dataclass(frozen=True)
class QueueResources:
    """Logical ids of one declared queue's resources, found through its worker's environment."""

    queue: str
    dlq: str
    function: str


@dataclass(frozen=True)
class RelayResources:
    """Logical ids of one stream relay's resources, found through its function's environment."""

    function: str
    role: str
    log_group: str
    mapping: str
    # The table whose stream it reads, and the DLQ its mapping sends given-up batches to.
    table: str
    dlq: str


def render(value: Any) -> str:
    """A CloudFormation value as one readable string: ``{"Ref": "X"}`` -> ``${X}``, GetAtt -> ``${X.Attr}``."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return f"${{{value['Ref']}}}"
    if "Fn::GetAtt" in value:
        return "${" + ".".join(value["Fn::GetAtt"]) + "}"
    separator, parts = value["Fn::Join"]
    return str(separator).join(render(part) for part in parts)


def as_list(value: Any) -> list[Any]:
    """A policy's Action or Resource, which CloudFormation allows as one value or a list."""
    return value if isinstance(value, list) else [value]


@dataclass(frozen=True)
class Synthesized:
    template: Template
    outdir: Path
    topology: Topology

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.template.to_json()["Resources"]
        return resources

    def _functions(self) -> dict[str, dict[str, Any]]:
        """Each function's logical id -> its environment variables."""
        return {
            logical_id: resource["Properties"].get("Environment", {}).get("Variables", {})
            for logical_id, resource in self.resources.items()
            if resource["Type"] == "AWS::Lambda::Function"
        }

    def of_queue(self, name: str) -> QueueResources:
        for logical_id, variables in self._functions().items():
            if variables.get("CONVEYOR_QUEUE") == name:
                return QueueResources(
                    queue=variables["CONVEYOR_QUEUE_URL"]["Ref"],
                    dlq=variables["CONVEYOR_DLQ_URL"]["Ref"],
                    function=logical_id,
                )
        raise AssertionError(f"no worker function for queue {name!r}")

    def of_relay(self, source: str) -> RelayResources:
        (function,) = [logical_id for logical_id, env in self._functions().items() if env.get(SOURCE_ENV) == source]
        properties = self.properties(function)
        (mapping,) = [
            logical_id
            for logical_id, resource in self.resources.items()
            if resource["Type"] == "AWS::Lambda::EventSourceMapping"
            and resource["Properties"]["FunctionName"] == {"Ref": function}
        ]
        mapping_properties = self.properties(mapping)
        return RelayResources(
            function=function,
            role=properties["Role"]["Fn::GetAtt"][0],
            log_group=properties["LoggingConfig"]["LogGroup"]["Ref"],
            mapping=mapping,
            table=mapping_properties["EventSourceArn"]["Fn::GetAtt"][0],
            dlq=mapping_properties["DestinationConfig"]["OnFailure"]["Destination"]["Fn::GetAtt"][0],
        )

    def relay_sources(self) -> set[str]:
        return {env[SOURCE_ENV] for env in self._functions().values() if SOURCE_ENV in env}

    def table(self, key_attribute: str) -> str:
        """The logical id of the one table keyed on ``key_attribute`` that the workers' environment names.

        Only the workers' tables: the ops audit table shares the idempotency table's key
        attribute, and so does the outbox (the workers' producer table, not their own): both
        are found through their stack outputs instead.
        """
        named: set[str] = {
            value["Ref"]
            for variables in self._functions().values()
            for name, value in variables.items()
            if isinstance(value, dict) and "Ref" in value and name != OUTBOX_TABLE_ENV
        }
        (logical_id,) = [
            logical_id
            for logical_id in named
            if self.resources[logical_id]["Type"] == "AWS::DynamoDB::Table"
            and self.resources[logical_id]["Properties"]["KeySchema"]
            == [{"AttributeName": key_attribute, "KeyType": "HASH"}]
        ]
        return logical_id

    def own_table(self, setting: str) -> str:
        """The logical id of the Conveyor table every worker's ``WorkerSettings.<setting>`` names.

        For tables whose key attribute others share (the idempotency and schedule-run tables
        are both keyed on ``id``), which ``table`` cannot tell apart.
        """
        found = set()
        for variables in self._functions().values():
            if "CONVEYOR_QUEUE" in variables:
                settings = WorkerSettings.from_environment(
                    {key: value if isinstance(value, str) else json.dumps(value) for key, value in variables.items()}
                )
                found.add(json.loads(getattr(settings, setting))["Ref"])
        (logical_id,) = found
        return str(logical_id)

    def output_ref(self, key: str) -> str:
        """The logical id of the resource whose ``Ref`` the stack output ``key`` carries."""
        ref: str = self.template.to_json()["Outputs"][key]["Value"]["Ref"]
        return ref

    def role_statements(self, role_id: str) -> list[dict[str, Any]]:
        """The statements of the one inline policy CDK attached to the role (grants land there)."""
        (statements,) = [
            policy["Properties"]["PolicyDocument"]["Statement"]
            for policy in self.template.find_resources("AWS::IAM::Policy").values()
            if policy["Properties"]["Roles"] == [{"Ref": role_id}]
        ]
        return list(statements)

    def properties(self, logical_id: str) -> dict[str, Any]:
        properties: dict[str, Any] = self.resources[logical_id]["Properties"]
        return properties


def synthesize(topology: Topology, spec: str, outdir: Path) -> Synthesized:
    app = build_app(topology, topology_spec=spec, outdir=str(outdir))
    app.synth()  # raises if cdk-nag finds an unacknowledged error
    template = Template.from_json(json.loads((outdir / f"{STACK_NAME}.template.json").read_text()))
    return Synthesized(template=template, outdir=outdir, topology=topology)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of one synth share one worker, which synthesizes once; each synth has its own group.

    A module that defines its own ``synthesized`` (a topology of its own, built once per module)
    is a group of its own too.
    """
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        for name in SESSION_SYNTHS & set(item.fixturenames):
            owner = item.module.__name__ if name in vars(item.module) else "session"
            item.add_marker(pytest.mark.xdist_group(f"{SYNTH_GROUP}:{owner}:{name}"))


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = os.environ.get(CDK_OUT_ENV)
    return synthesize(TOPOLOGY, TOPOLOGY_SPEC, Path(outdir) if outdir else tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def stream_synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(STREAM_TOPOLOGY, STREAM_TOPOLOGY_SPEC, tmp_path_factory.mktemp("cdk.out.stream"))
