"""Find the project's objects by ``module:attribute``: its topology, its demo scenario."""

import importlib
import os

from conveyor.declarations import DeclarationError, Topology

TOPOLOGY_ENV = "CONVEYOR_TOPOLOGY"
DEFAULT_TOPOLOGY = "functions.topology:TOPOLOGY"


def load_attribute(spec: str, what: str) -> object:
    """Import ``module:attribute`` and return the attribute; DeclarationError says what went wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise DeclarationError(f"{what} {spec!r}: expected 'module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise DeclarationError(f"{what} {spec!r}: cannot import {module_name!r} ({error})") from error
    return getattr(module, attribute, None)


def load_topology(spec: str | None = None) -> Topology:
    """The Topology at ``spec`` (default ``$CONVEYOR_TOPOLOGY``, else functions.topology:TOPOLOGY)."""
    spec = spec or os.environ.get(TOPOLOGY_ENV) or DEFAULT_TOPOLOGY
    topology = load_attribute(spec, "topology")
    if not isinstance(topology, Topology):
        attribute = spec.partition(":")[2]
        raise DeclarationError(
            f"topology {spec!r}: {attribute!r} is {type(topology).__name__}, not a conveyor Topology"
        )
    return topology
