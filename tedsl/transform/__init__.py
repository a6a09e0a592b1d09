"""Lowering passes: pure functions from loop IR to loop IR, listed in ``pipeline``."""
