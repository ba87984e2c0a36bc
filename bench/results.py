"""What a run of the suite found, and bench/results.json: the rows, the job profiles, the machine and versions."""

import json
import os
import platform
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.figures import Row

# The distributions whose versions decide the figures.
DISTRIBUTIONS = ("boto3", "botocore", "moto", "aws-lambda-powertools", "pydantic")


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def versions() -> dict[str, str]:
    return {name: version(name) for name in DISTRIBUTIONS}


@dataclass(frozen=True)
class Results:
    measured_at: datetime
    command: str
    quick: bool
    seconds: float
    rows: tuple[Row, ...]
    # Job type name -> its profile (bench.profiles.job_profile), which `conveyor cost` reads.
    job_profiles: dict[str, dict[str, Any]]
    machine: dict[str, Any]
    versions: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "measured_at": self.measured_at.date().isoformat(),
            "command": self.command,
            "quick": self.quick,
            "seconds": self.seconds,
            "machine": self.machine,
            "versions": self.versions,
            "rows": [row.to_json() for row in self.rows],
            "job_profiles": self.job_profiles,
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")
