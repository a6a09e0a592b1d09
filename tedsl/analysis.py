"""Dependence analysis of schedules (``dependences``, ``is_parallel``)."""
from .poly.deps import dependences, is_parallel  # noqa: F401
