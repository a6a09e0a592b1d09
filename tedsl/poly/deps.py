"""Exact dependences (RAW/WAR/WAW) through isl's dataflow analysis."""


def dependences(s):
    raise NotImplementedError


def is_parallel(s, tensor, axis):
    raise NotImplementedError
