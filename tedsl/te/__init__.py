"""Compute definitions: placeholders, computes, reductions, scans (algorithm only)."""
