"""The age controller's settings, carried in environment variables the stack sets on its function.

Like RelaySettings, one class owns the variable names on both sides (infra/scale_on_age.py writes
them, conveyor.worker.scale_on_age reads them).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass

from conveyor.contract.errors import DeclarationError
from conveyor.contract.settings import AUDIT_TABLE_ENV

MAPPINGS_ENV = "CONVEYOR_SCALE_MAPPINGS"
QUEUE_NAMES_ENV = "CONVEYOR_SCALE_QUEUE_NAMES"


@dataclass(frozen=True)
class ScaleSettings:
    audit_table: str
    # Declared queue name -> its event source mapping's UUID, for every queue that scales on age.
    mappings: Mapping[str, str]
    # Declared queue name -> its SQS queue name (the QueueName dimension of its metrics).
    queue_names: Mapping[str, str]

    def to_environment(self) -> dict[str, str]:
        return {
            AUDIT_TABLE_ENV: self.audit_table,
            MAPPINGS_ENV: json.dumps(dict(self.mappings), sort_keys=True),
            QUEUE_NAMES_ENV: json.dumps(dict(self.queue_names), sort_keys=True),
        }

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "ScaleSettings":
        missing = [name for name in (AUDIT_TABLE_ENV, MAPPINGS_ENV, QUEUE_NAMES_ENV) if not environ.get(name)]
        if missing:
            raise DeclarationError(f"scale-on-age environment: missing {', '.join(missing)}")
        return cls(
            audit_table=environ[AUDIT_TABLE_ENV],
            mappings=_names(environ, MAPPINGS_ENV),
            queue_names=_names(environ, QUEUE_NAMES_ENV),
        )


def _names(environ: Mapping[str, str], variable: str) -> dict[str, str]:
    try:
        value = json.loads(environ[variable])
    except ValueError as error:
        raise DeclarationError(f"scale-on-age environment: {variable} is not JSON: {error}") from error
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise DeclarationError(f"scale-on-age environment: {variable} must map queue names to strings")
    return value
