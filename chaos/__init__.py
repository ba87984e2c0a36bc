"""The reliability suite: fault injection, a bad-input corpus and the invariant checker behind `make chaos`."""
