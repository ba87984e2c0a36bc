"""Lambda entry point for every queue's worker; the queue comes from the environment."""

from conveyor.contract.loader import load_topology
from conveyor.worker.handler import make_handler

handler = make_handler(load_topology())
