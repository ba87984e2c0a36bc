"""Lambda entry point for every stream relay; the source (outbox or a table) comes from the environment."""

from conveyor.loader import load_topology
from conveyor.relay import make_relay_handler

handler = make_relay_handler(load_topology())
