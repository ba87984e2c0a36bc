"""Lambda entry point for every stream relay; the source (outbox or a table) comes from the environment."""

from conveyor.worker.relay import make_relay_handler

handler = make_relay_handler()
