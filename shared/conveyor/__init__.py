"""Conveyor: production background jobs for Python on SQS, Lambda and DynamoDB.

What a project declares and calls, in one import: ``from conveyor import Queue, job, JobClient``.
The packages by side hold the rest: ``conveyor.contract`` (declarations, envelope, errors),
``conveyor.sdk`` (producing), ``conveyor.worker`` (Lambda), ``conveyor.ops`` (operating),
``conveyor.cli`` (the `conveyor` command) and ``conveyor.local`` (the local runtime). docs/api.md
lists the public names.
"""

# The names are loaded on first use (PEP 562): every ``import conveyor.<anything>`` runs this file,
# and a module as light as ``conveyor.contract.limits`` must not pull in boto3 and the whole SDK.

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor.contract import *  # noqa: F403 - the contract's public names, as its __all__ lists them
    from conveyor.sdk import *  # noqa: F403 - the SDK's public names, as its __all__ lists them

# The packages whose __all__ this one re-exports, in that order.
_EXPORTING = ("conveyor.contract", "conveyor.sdk")


def __getattr__(name: str) -> Any:
    packages = [importlib.import_module(package) for package in _EXPORTING]
    if name == "__all__":
        return [exported for package in packages for exported in package.__all__]
    for package in packages:
        if name in package.__all__:
            return getattr(package, name)
    raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
