"""A lease and its errors: what jobs and the harness know of leases, without the lease table's machinery.

The harness recognises a run whose lease was lost (``LeaseLostError``) by importing this module only,
so a worker's cold start does not load conveyor.worker.lease; that module re-exports these names.
"""

from dataclasses import dataclass
from datetime import datetime

from conveyor.contract.errors import ConveyorError


class LeaseError(ConveyorError):
    """Base of the lease helper's exceptions."""


class InvalidLeaseError(LeaseError, ValueError):
    """Misuse caught before any call: a TTL out of range, too many writes for one transaction."""


@dataclass(frozen=True)
class Lease:
    """``holder``'s claim on ``name`` until ``expires_at``; a larger ``token`` is a later holder."""

    name: str
    holder: str
    token: int
    acquired_at: datetime
    expires_at: datetime


class LeaseLostError(LeaseError):
    """The holder of ``lease`` no longer holds it: taken over, released or expired. Stop the work."""

    def __init__(self, message: str, *, lease: Lease) -> None:
        super().__init__(message)
        self.lease = lease
