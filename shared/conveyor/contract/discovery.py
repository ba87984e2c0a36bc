"""Find a project's job types: every job declared at module level in its jobs package.

``Topology(job_types=discover_jobs("functions.jobs"), ...)`` makes a new job module all it
takes to add a job type, with nothing to list elsewhere. Declarations stay explicit: a job is
whatever a module of the package binds to a declared job type; nothing is registered as a side
effect of importing.
"""

import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from conveyor.contract.declarations import JobType
from conveyor.contract.errors import DeclarationError


def discover_jobs(package: str) -> tuple[JobType[Any], ...]:
    """The job types the modules of ``package`` (and its subpackages) bind, module by module in name order.

    A module that fails to import, or two different job types of one name, fail with one line
    naming the file(s).
    """
    root = _import(package, f"jobs package {package!r}")
    found: dict[str, tuple[JobType[Any], str]] = {}
    for module in (root, *_modules(root)):
        for value in vars(module).values():
            if not isinstance(value, JobType):
                continue
            first = found.setdefault(value.name, (value, module.__name__))
            if first[0] is not value:
                raise DeclarationError(
                    f"job type {value.name!r} is declared twice: in {first[1]} and in {module.__name__}"
                )
    return tuple(job_type for job_type, _ in found.values())


def _modules(package: ModuleType) -> Iterator[ModuleType]:
    """The package's modules, depth first, in name order; each imported once, named by its file on failure."""
    path = getattr(package, "__path__", None)
    if path is None:
        raise DeclarationError(f"jobs package {package.__name__!r} is a module ({package.__file__}), not a package")
    for info in sorted(pkgutil.iter_modules(path, prefix=f"{package.__name__}."), key=lambda info: info.name):
        spec = importlib.util.find_spec(info.name)
        origin = spec.origin if spec is not None and spec.origin else info.name
        module = _import(info.name, origin)
        yield module
        if info.ispkg:
            yield from _modules(module)


def _import(name: str, where: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except DeclarationError as error:  # a declaration the module makes, already named: add where it is
        raise DeclarationError(f"{where}: {error}") from error
    except Exception as error:  # any error of a user's module: one line, the cause chained
        raise DeclarationError(f"{where}: cannot import {name}: {type(error).__name__}: {error}") from error
