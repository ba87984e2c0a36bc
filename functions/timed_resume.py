"""Lambda entry point that ends a timed pause: the target of `conveyor pause --for`'s one-time schedule."""

from conveyor.worker.timed_resume import make_timed_resume_handler

handler = make_timed_resume_handler()
