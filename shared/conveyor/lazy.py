"""A package's public names, imported on first use (PEP 562).

A package's ``__init__`` runs for every import of any of its modules. Eager re-exports would make
the worker's cold start load what it never calls (the relay, leases, the SDK's client and
transactions), and a producer's import load more than the client it asked for.
"""

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, origins: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` that serves each name from its module in ``origins`` (name -> module)."""

    def load(name: str) -> Any:
        module = origins.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return load
