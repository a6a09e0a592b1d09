"""User-facing scheduling: stages, iterator relations, loop annotations."""
