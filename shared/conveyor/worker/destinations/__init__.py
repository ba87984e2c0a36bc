"""The shared limits of declared destinations, as the worker applies them (docs/limits.md)."""
