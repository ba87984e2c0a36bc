"""Lambda entry point for every queue's worker; the queue comes from the environment."""

from conveyor.loader import load_topology
from conveyor.worker import make_handler

handler = make_handler(load_topology())
