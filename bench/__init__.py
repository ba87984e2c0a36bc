"""The benchmark suite: `make bench` (python -m bench) measures Conveyor against anchors run beside it."""
