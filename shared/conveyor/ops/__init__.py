"""Operating Conveyor: what the `jobs` commands do, apart from how they print it."""
