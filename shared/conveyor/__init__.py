"""Conveyor: production background jobs for Python on SQS, Lambda and DynamoDB.

What a project declares and calls, in one import: ``from conveyor import Queue, job, JobClient``.
The packages by side hold the rest: ``conveyor.contract`` (declarations, envelope, errors),
``conveyor.sdk`` (producing), ``conveyor.worker`` (Lambda), ``conveyor.ops`` (operating),
``conveyor.cli`` (the `conveyor` command) and ``conveyor.local`` (the local runtime). docs/api.md
lists the public names.
"""

from conveyor import contract, sdk
from conveyor.contract import *  # noqa: F403 - the contract's public names, as its __all__ lists them
from conveyor.sdk import *  # noqa: F403 - the SDK's public names, as its __all__ lists them

__all__ = [*contract.__all__, *sdk.__all__]
