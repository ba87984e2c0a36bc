"""Find the project's objects by ``module:attribute``: its topology, its demo scenario.

The library never names the application. A project says where its declarations are, in this
order of precedence:

1. an argument (``--topology``, ``JobClient(topology=...)``, ``load_topology(spec)``);
2. the environment: ``CONVEYOR_TOPOLOGY=module:attribute`` (the stack sets it on every function);
3. ``topology = "module:attribute"`` under ``[tool.conveyor]`` in the nearest ``pyproject.toml``,
   searched from the working directory up. Its directory goes on ``sys.path``, so the module
   is found from anywhere inside the project.

Nothing set fails with one line naming the setting and where it was looked for.

``[tool.conveyor] worker-requirements`` is read here too: the distributions the Lambda bundle
installs for the job code (``worker_requirements``).
"""

import importlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from conveyor.contract.errors import DeclarationError
from conveyor.contract.topology import Topology

TOPOLOGY_ENV = "CONVEYOR_TOPOLOGY"
PYPROJECT = "pyproject.toml"
TOOL_TABLE = "conveyor"  # [tool.conveyor]
TOPOLOGY_KEY = "topology"
WORKER_REQUIREMENTS_KEY = "worker-requirements"
# A distribution's name as PEP 508 spells it, with nothing after it (no version, no extras).
_DISTRIBUTION_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class ProjectSetting:
    """A ``[tool.conveyor]`` value and the pyproject.toml it came from."""

    value: str
    pyproject: Path


def nearest_pyproject(start: Path | None = None) -> Path | None:
    """The project's pyproject.toml: the nearest one from ``start`` (the working directory) up."""
    here = (start or Path.cwd()).resolve()
    return next((folder / PYPROJECT for folder in (here, *here.parents) if (folder / PYPROJECT).is_file()), None)


def _tool_value(key: str, pyproject: Path) -> object:
    """``[tool.conveyor] <key>`` in ``pyproject`` as TOML parsed it, or None if it does not set it."""
    import tomllib  # here, not at the top: a Lambda cold start names its topology in the environment

    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise DeclarationError(f"{pyproject}: not valid TOML ({error})") from error
    value: object = document.get("tool", {}).get(TOOL_TABLE, {}).get(key)
    return value


def project_setting(key: str, pyproject: Path) -> ProjectSetting | None:
    """``[tool.conveyor] <key>`` in ``pyproject``, or None if it does not set it.

    Only the nearest pyproject.toml counts: a parent directory's settings never leak into a
    project nested inside it.
    """
    value = _tool_value(key, pyproject)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DeclarationError(f"{pyproject}: [tool.{TOOL_TABLE}] {key} must be a 'module:attribute' string")
    return ProjectSetting(value, pyproject)


def worker_requirements(pyproject: Path) -> tuple[str, ...]:
    """``[tool.conveyor] worker-requirements``: what the job code imports beyond the Lambda runtime and layer.

    Distribution names only, none if unset: each is pinned once, in the project's dependencies,
    and the bundle ships the version installed beside the tests.
    """
    value = _tool_value(WORKER_REQUIREMENTS_KEY, pyproject)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(name, str) and _DISTRIBUTION_NAME.match(name) for name in value
    ):
        raise DeclarationError(
            f"{pyproject}: [tool.{TOOL_TABLE}] {WORKER_REQUIREMENTS_KEY} must be a list of distribution names "
            f"(no versions: they are pinned in [project] dependencies), not {value!r}"
        )
    return tuple(value)


def resolve(key: str, spec: str | None, env: str) -> str:
    """The ``module:attribute`` for ``key``: the argument, else ``$env``, else ``[tool.conveyor] key``."""
    if spec:
        return spec
    if os.environ.get(env):
        return os.environ[env]
    pyproject = nearest_pyproject()
    setting = project_setting(key, pyproject) if pyproject else None
    if setting is None:
        found = f"{pyproject} sets none" if pyproject else f"no {PYPROJECT} from {Path.cwd()} up"
        raise DeclarationError(
            f'no {key} set: pass --{key}, set {env}=module:attribute, or add {key} = "module:attribute" '
            f"under [tool.{TOOL_TABLE}] in {PYPROJECT} ({found})"
        )
    root = str(setting.pyproject.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return setting.value


def load_attribute(spec: str, what: str) -> object:
    """Import ``module:attribute`` and return the attribute; DeclarationError says what went wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise DeclarationError(f"{what} {spec!r}: expected 'module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise DeclarationError(f"{what} {spec!r}: cannot import {module_name!r} ({error})") from error
    if not hasattr(module, attribute):
        raise DeclarationError(f"{what} {spec!r}: module {module_name!r} has no attribute {attribute!r}")
    return getattr(module, attribute)


def topology_spec(spec: str | None = None) -> str:
    """Where the topology is, by the precedence above."""
    return resolve(TOPOLOGY_KEY, spec, TOPOLOGY_ENV)


def load_topology(spec: str | None = None) -> Topology:
    """The project's Topology (see the module docstring for where it is looked for)."""
    spec = topology_spec(spec)
    topology = load_attribute(spec, "topology")
    if not isinstance(topology, Topology):
        attribute = spec.partition(":")[2]
        raise DeclarationError(
            f"topology {spec!r}: {attribute!r} is {type(topology).__name__}, not a conveyor Topology"
        )
    return topology
