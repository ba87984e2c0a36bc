"""Test a project's own jobs: ``with conveyor.testing.run_jobs() as jobs: ...; jobs.drain()``.

The jobs run in the test's process through the real harness (idempotency, retries with backoff,
classification, dead letters) on in-process moto in strict mode, on a clock the test moves; no
threads of its own, no sleeps. docs/testing.md ("Testing your jobs") shows it in use.

A side of its own, above the local runtime: it needs moto and time-machine (the ``testing``
extra), and nothing that runs in Lambda imports it.
"""

from conveyor.testing.jobs import DrainError, Jobs, run_jobs

__all__ = ["DrainError", "Jobs", "run_jobs"]
