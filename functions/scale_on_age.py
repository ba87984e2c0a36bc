"""Lambda entry point of the age controller: every minute, each `scale_on_age` queue's concurrency follows its age."""

from conveyor.worker.scale_on_age import make_scale_handler

handler = make_scale_handler()
