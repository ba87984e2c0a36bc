"""The worker side: what runs in Lambda. The harness around every job, the stream relay, leases.

A project's entry points are two lines each (functions/worker.py, functions/relay.py):
``handler = make_handler(load_topology())``.
"""

from conveyor.worker.handler import make_handler
from conveyor.worker.lease import InvalidLeaseError, Lease, LeaseError, LeaseLostError, Leases
from conveyor.worker.relay import make_relay_handler

__all__ = ["InvalidLeaseError", "Lease", "LeaseError", "LeaseLostError", "Leases", "make_handler", "make_relay_handler"]
