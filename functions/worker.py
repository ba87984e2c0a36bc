"""Lambda entry point for every queue's worker; the queue comes from the environment."""

from conveyor.worker.handler import make_handler

handler = make_handler()
