"""The worker side: what runs in Lambda. The harness around every job, the stream relay, leases.

A project's entry points are two lines each (functions/worker.py, functions/relay.py):
``handler = make_handler()``. The names below load on first use (conveyor.lazy), so a worker's
cold start imports neither the relay nor leases.
"""

from typing import TYPE_CHECKING

from conveyor.lazy import exports

if TYPE_CHECKING:
    from conveyor.worker.handler import make_handler
    from conveyor.worker.lease import Leases
    from conveyor.worker.lease_values import InvalidLeaseError, Lease, LeaseError, LeaseLostError
    from conveyor.worker.relay import make_relay_handler

_ORIGINS = {
    "InvalidLeaseError": "conveyor.worker.lease_values",
    "Lease": "conveyor.worker.lease_values",
    "LeaseError": "conveyor.worker.lease_values",
    "LeaseLostError": "conveyor.worker.lease_values",
    "Leases": "conveyor.worker.lease",
    "make_handler": "conveyor.worker.handler",
    "make_relay_handler": "conveyor.worker.relay",
}
__all__ = ["InvalidLeaseError", "Lease", "LeaseError", "LeaseLostError", "Leases", "make_handler", "make_relay_handler"]
__getattr__ = exports(__name__, _ORIGINS)
