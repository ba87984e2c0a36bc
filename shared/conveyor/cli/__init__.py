"""The `conveyor` command: click commands and output formatting; the work is conveyor.ops's and conveyor.local's."""

from conveyor.cli.main import main

__all__ = ["main"]
