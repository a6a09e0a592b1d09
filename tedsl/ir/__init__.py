"""Shared expression layer: dtypes, expression nodes, visitors, simplifier, printer."""
