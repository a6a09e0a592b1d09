"""Every statement instance runs exactly once: the loop tree is read back into isl.

isl's AST generator, with its default options, once generated loops that left out instances
of a tiled stage computed at a fused loop (the map had several ``mod`` constraints): 4 of 49
outputs were wrong.  ``tedsl.poly.astcheck`` reads every generated tree back into isl and a
tree that fails is generated again with other options.
"""
import dataclasses

import numpy as np
import pytest

import tedsl as te
from tedsl.errors import InternalError
from tedsl.poly import astcheck, astgen
from tedsl.poly.program import build_program
from conftest import check_kernel, rand


def tiled_at_fused():
    A = te.placeholder((7, 7), "int64", name="A")
    T1 = te.compute((7, 7), lambda i, j: te.max(A[j, i], 1) * 2, name="T1")
    T2 = te.compute((7, 7), lambda i, j: te.if_then_else(i >= 1, T1[i - 1, j], 0) +
                    te.if_then_else(te.all(i + 1 < 7, j >= 1), T1[i + 1, j - 1], 0),
                    name="T2")
    s = te.create_schedule(T2)
    fused = s[T2].fuse(*T2.op.axis)
    s[T1].compute_at(s[T2], fused)
    s[T1].tile(T1.op.axis[0], T1.op.axis[1], 4, 5)
    return s, [A, T2]


def tiled_at_fused_ref(a):
    t1 = np.maximum(a.T, 1) * 2
    t2 = np.zeros_like(t1)
    t2[1:] += t1[:-1]
    t2[:-1, 1:] += t1[1:, :-1]
    return t2


def test_tiled_stage_computed_at_a_fused_loop_runs_every_instance(rng):
    s, args = tiled_at_fused()
    a = rand(rng, (7, 7), "int64")
    check_kernel(s, args, [a], tiled_at_fused_ref(a), rtol=0, atol=0)


def test_every_generated_tree_passes_the_check():
    s, _ = tiled_at_fused()
    prog = build_program(s)
    assert astcheck.check(prog, astgen.generate(prog)) == []


def simple_tree(n=None):
    n = n if n is not None else te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    prog = build_program(s)
    return prog, astgen.generate(prog)


def _first_loop(tree):
    if type(tree) is astgen.Loop:
        return tree
    return next(x for x in map(_first_loop, astgen.children(tree)) if x is not None) \
        if astgen.children(tree) else None


def _replace_loop(tree, new):
    if type(tree) is astgen.Loop:
        return new
    if type(tree) is astgen.Block:
        return astgen.Block(tuple(_replace_loop(c, new) for c in tree.children))
    return tree


def test_check_finds_a_missing_last_iteration():
    prog, tree = simple_tree()
    loop = _first_loop(tree)
    short = dataclasses.replace(loop, hi=loop.hi - 1)
    problems = astcheck.check(prog, _replace_loop(tree, short))
    assert len(problems) == 1 and "instances never run, e.g." in problems[0], problems


def test_check_finds_an_instance_run_twice():
    prog, tree = simple_tree()
    problems = astcheck.check(prog, astgen.Block((tree, tree)))
    assert problems == [problems[0]] and "two calls run the same instance" in problems[0]


def test_check_finds_a_stride_that_skips_instances():
    prog, tree = simple_tree(10)
    loop = _first_loop(tree)
    problems = astcheck.check(prog, _replace_loop(tree, dataclasses.replace(loop, step=2)))
    assert "instances never run" in problems[0], problems


def test_a_tree_no_option_generates_correctly_is_refused(monkeypatch):
    """When neither isl's defaults nor its atomic or separate options give a tree that runs
    every instance once, the build is refused (never a wrong kernel)."""
    s, args = tiled_at_fused()
    monkeypatch.setattr(astcheck, "check", lambda prog, tree: ["S1_T1: instances never run"])
    with pytest.raises(InternalError, match=r"isl's AST generator produced loops that do "
                                            r"not run every instance exactly once"):
        te.lower(s, args)
