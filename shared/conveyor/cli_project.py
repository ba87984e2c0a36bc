"""What every `jobs` command works on: the project's topology, loaded once and only when needed."""

from dataclasses import dataclass
from functools import cached_property

import click

from conveyor.declarations import DeclarationError, Topology
from conveyor.loader import load_topology


@dataclass
class Project:
    topology_spec: str | None

    @cached_property
    def topology(self) -> Topology:
        try:
            return load_topology(self.topology_spec)
        except DeclarationError as error:
            raise click.ClickException(str(error)) from error
