"""The polyhedral core: every stage as an isl set, schedules as isl maps, loops from isl's AST.

This is the only package that imports islpy.
"""
