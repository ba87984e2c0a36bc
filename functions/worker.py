"""Lambda entry point for every queue's worker; the queue comes from the environment."""

from conveyor.worker import handle as handler

__all__ = ["handler"]
