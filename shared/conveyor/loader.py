"""Find the project's topology: the one set of declarations every tool reads."""

import importlib
import os

from conveyor.declarations import DeclarationError, Topology

TOPOLOGY_ENV = "CONVEYOR_TOPOLOGY"
DEFAULT_TOPOLOGY = "functions.topology:TOPOLOGY"


def load_topology(spec: str | None = None) -> Topology:
    """Import ``module:attribute`` (default from ``$CONVEYOR_TOPOLOGY``) and return its Topology."""
    spec = spec or os.environ.get(TOPOLOGY_ENV) or DEFAULT_TOPOLOGY
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise DeclarationError(f"topology {spec!r}: expected 'module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise DeclarationError(f"topology {spec!r}: cannot import {module_name!r} ({error})") from error
    topology = getattr(module, attribute, None)
    if not isinstance(topology, Topology):
        raise DeclarationError(
            f"topology {spec!r}: {attribute!r} is {type(topology).__name__}, not a conveyor Topology"
        )
    return topology
