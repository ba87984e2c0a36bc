"""Build the CDK app: context from cdk.json, the stack from the topology, cdk-nag as a validation."""

import json
import re
from pathlib import Path
from typing import Any

from aws_cdk import App, Validations
from aws_cdk import aws_logs as logs
from cdk_nag import AwsSolutionsChecks

from conveyor.contract.errors import DeclarationError
from conveyor.contract.outputs import STACK_NAME
from conveyor.contract.topology import Topology
from infra.stack import ConveyorStack

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"
POWERTOOLS_LAYER_CONTEXT = "conveyor:powertools-layer-version"
PREFIX_CONTEXT = "conveyor:prefix"
PREFIX_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
LOG_RETENTION_CONTEXT = "conveyor:log-retention"


def project_context() -> dict[str, Any]:
    """cdk.json's context, read here too so `python app.py` and tests synth like the CLI does."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text())["context"]
    return context


def _log_retention(name: object) -> logs.RetentionDays:
    try:
        return logs.RetentionDays[str(name)]
    except KeyError as error:
        valid = ", ".join(r.name for r in logs.RetentionDays)
        raise DeclarationError(f"cdk.json {LOG_RETENTION_CONTEXT}={name!r}: not one of {valid}") from error


def _layer_version(version: object) -> int:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise DeclarationError(f"cdk.json {POWERTOOLS_LAYER_CONTEXT}={version!r}: expected a positive integer")
    return version


def _prefix(value: object) -> str:
    if not isinstance(value, str) or not PREFIX_PATTERN.match(value):
        raise DeclarationError(f"cdk.json {PREFIX_CONTEXT}={value!r}: must match {PREFIX_PATTERN.pattern}")
    return value


def build_app(topology: Topology, *, topology_spec: str, outdir: str | None = None) -> App:
    """The app with its one stack and AwsSolutions checks that fail synth on any unacknowledged error.

    ``topology_spec`` (``module:attribute``) is where the functions find ``topology`` at run time.
    """
    app = App(outdir=outdir, context=project_context())
    ConveyorStack(
        app,
        STACK_NAME,
        topology=topology,
        topology_spec=topology_spec,
        prefix=_prefix(app.node.try_get_context(PREFIX_CONTEXT)),
        powertools_layer_version=_layer_version(app.node.try_get_context(POWERTOOLS_LAYER_CONTEXT)),
        log_retention=_log_retention(app.node.try_get_context(LOG_RETENTION_CONTEXT)),
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def is_validation_failure(error: RuntimeError) -> bool:
    """jsii surfaces a failed validation plugin (cdk-nag) as a RuntimeError naming ValidationFailed."""
    return "ValidationFailed" in str(error)
