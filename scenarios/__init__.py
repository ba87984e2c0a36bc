"""Scenarios the local runtime plays: `conveyor local demo` runs the one [tool.conveyor] names."""
