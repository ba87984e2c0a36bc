"""What every `conveyor` command works on: the project's topology and, for ops, where its resources are.

Both are loaded once and only when a command needs them, so `conveyor --help` works anywhere.
"""

from dataclasses import dataclass
from functools import cached_property

import click

from conveyor.cli.support import NotFound, aws_errors
from conveyor.contract.errors import DeclarationError
from conveyor.contract.loader import load_topology
from conveyor.contract.topology import Topology
from conveyor.ops.target import Target, TargetNotFoundError, find_target


@dataclass
class Project:
    topology_spec: str | None
    stack: str | None = None

    @cached_property
    def topology(self) -> Topology:
        try:
            return load_topology(self.topology_spec)
        except DeclarationError as error:
            raise click.ClickException(str(error)) from error

    @cached_property
    def target(self) -> Target:
        topology = self.topology
        try:
            with aws_errors("finding the queues"):
                return find_target(topology, self.stack)
        except TargetNotFoundError as error:
            raise NotFound(str(error)) from error

    def queue_name(self, name: str) -> str:
        """``name`` if it is a declared queue; otherwise one line listing the declared ones (exit 3)."""
        declared = [queue.name for queue in self.topology.queues]
        if name not in declared:
            raise NotFound(f"unknown queue {name!r}; declared: {', '.join(declared)}")
        return name
