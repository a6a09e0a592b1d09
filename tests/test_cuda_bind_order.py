"""``bind`` is checked against the exact dependences in any call order, and the launch
geometry comes from isl.

The schedules of tutorials/04_matmul_cuda.py are legal whether the loops are bound before or
after the shared tiles are attached (``compute_at``): the tiles are private to each block and
each step of the reduction loop, so binding the block loops never carries a dependence on
them.  A loop that does carry a dependence is refused in either order.  Every legal schedule
also runs (on a GPU, or on the adversarial host emulator of test_cuda_gpu.py) and matches
numpy.
"""
import numpy as np
import pytest

import tedsl as te
from tedsl.errors import DependenceError, ScheduleError
from tedsl.ir import expr as E
from tedsl.poly.threads import LoopNest
from test_cuda_gpu import backend  # noqa: F401  (the gpu / emulated fixture)


def bind(stage, axis, tag):
    stage.bind(axis, te.thread_axis(tag))


def _matmul(n):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def tiled(n, order, tile=16):
    """Tutorial 04, step 2; ``order`` says whether the loops of C are bound ``before`` the
    tiles are attached or ``after``, and whether the tiles' own loops are bound before
    their compute_at (``tiles_first``)."""
    A, B, C = _matmul(n)
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    by, bx, ty, tx = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=tile)
    s[C].reorder(by, bx, ko, ty, tx, ki)

    def bind_c():
        for ax, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                        (tx, "threadIdx.x")):
            bind(s[C], ax, tag)

    def bind_tile(T):
        bind(s[T], T.op.axis[0], "threadIdx.y")
        bind(s[T], T.op.axis[1], "threadIdx.x")
    if order == "before":
        bind_c()
    for T in (AA, BB):
        if order == "tiles_first":
            bind_tile(T)
        s[T].compute_at(s[C], ko)
        if order != "tiles_first":
            bind_tile(T)
    if order != "before":
        bind_c()
    return s, [A, B, C]


def _split3(stage, axis, half):
    v, r = stage.split(axis, factor=half)
    t, w = stage.split(r, factor=4)
    return v, t, w


def blocked(n, order, block=64, kt=8):
    """Tutorial 04, step 3 (register blocking); ``order`` as in :func:`tiled`: with
    ``after`` every bind follows every compute_at."""
    A, B, C = _matmul(n)
    s = te.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    half, threads = block // 2, block // 8
    by, bx, ii, jj = s[C].tile(C.op.axis[0], C.op.axis[1], block, block)
    iv, ty, iw = _split3(s[C], ii, half)
    jv, tx, jw = _split3(s[C], jj, half)
    s[C].reorder(by, bx, ty, tx, iv, jv, iw, jw)
    binds = [(s[C], by, "blockIdx.y"), (s[C], bx, "blockIdx.x"), (s[C], ty, "threadIdx.y"),
             (s[C], tx, "threadIdx.x")]
    s[C].vectorize(jw)
    if order == "before":
        for b in binds:
            bind(*b)
        binds = []
    s[CL].compute_at(s[C], bx)
    civ, cty, ciw = _split3(s[CL], CL.op.axis[0], half)
    cjv, ctx, cjw = _split3(s[CL], CL.op.axis[1], half)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=kt)
    s[CL].reorder(ko, cty, ctx, ki, civ, cjv, ciw, cjw)
    binds += [(s[CL], cty, "threadIdx.y"), (s[CL], ctx, "threadIdx.x")]
    for ax in (ki, civ, cjv, ciw):
        s[CL].unroll(ax)
    s[CL].vectorize(cjw)
    r, c = AA.op.axis
    s[AA].storage_align(r, kt, 1)
    _, ri = s[AA].split(r, factor=threads)
    binds += [(s[AA], ri, "threadIdx.y"), (s[AA], c, "threadIdx.x")]
    r, c = BB.op.axis
    cq, cv = s[BB].split(c, factor=4)
    _, cqi = s[BB].split(cq, factor=threads)
    binds += [(s[BB], r, "threadIdx.y"), (s[BB], cqi, "threadIdx.x")]
    s[BB].vectorize(cv)
    if order == "before":
        for b in binds:
            bind(*b)
    for T in (AA, BB):
        s[T].compute_at(s[CL], ko)
    if order == "after":
        for b in binds:
            bind(*b)
    return s, [A, B, C]


def _check_matmul(build, s, args, n, name):
    mod = build(s, args, name=name)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    dev = [te.nd.array(x, device=te.cuda(0)) for x in (a, b, np.full((n, n), np.nan,
                                                                      np.float32))]
    mod(*dev)
    np.testing.assert_allclose(dev[2].numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("order", ["before", "after", "tiles_first"])
def test_tiled_matmul_in_any_bind_order(backend, order):  # noqa: F811
    s, args = tiled(48, order)
    _check_matmul(backend, s, args, 48, f"tiled_{order}")


@pytest.mark.parametrize("order", ["before", "after"])
def test_register_blocked_matmul_in_any_bind_order(backend, order):  # noqa: F811
    s, args = blocked(128, order)
    _check_matmul(backend, s, args, 128, f"blocked_{order}")


@pytest.mark.parametrize("order", ["before", "after"])
def test_bind_orders_lower_to_the_same_program(order):
    assert str(te.lower(*tiled(64, order))) == str(te.lower(*tiled(64, "before")))


def _scan(order):
    """A scan whose update reads a producer attached inside it; ``order`` says whether the
    scan loop is bound before or after the compute_at."""
    m, n = 8, 16
    X = te.placeholder((m, n), "float32", name="X")
    Y = te.compute((m, n), lambda t, i: X[t, i] * 2, name="Y")
    state = te.placeholder((m, n), "float32", name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + Y[t, i], name="update")
    res = te.scan(init, update, state, inputs=[X, Y], name="res")
    s = te.create_schedule(res)
    if order == "after":
        s[Y].compute_at(s[update], update.op.axis[1])
    bind(s[res], res.op.scan_axis, "threadIdx.x")
    if order == "before":
        s[Y].compute_at(s[update], update.op.axis[1])
    return s, [X, res]


@pytest.mark.parametrize("order", ["before", "after"])
def test_binding_a_loop_that_carries_a_dependence_is_refused_in_either_order(order):
    with pytest.raises(DependenceError, match=r"bind\(.*threadIdx\.x\).*carries a dependence"):
        s, args = _scan(order)
        te.build(s, args, target="cuda")


def test_block_reduction_is_refused_in_either_order():
    for first in ("bind", "compute_at"):
        A, B, C = _matmul(32)
        s = te.create_schedule(C)
        AA = s.cache_read(A, "shared", [C])
        i, j = C.op.axis
        (k,) = C.op.reduce_axis
        s[C].reorder(k, i, j)
        if first == "bind":
            bind(s[C], k, "blockIdx.x")
        s[AA].compute_at(s[C], i)
        if first != "bind":
            bind(s[C], k, "blockIdx.x")
        bind(s[C], i, "threadIdx.x")
        with pytest.raises(ScheduleError, match=r"k.*blockIdx\.x"):
            te.build(s, [A, B, C], target="cuda")


# -- launch extents from isl --------------------------------------------------------------------

N = E.Var("n", "int32")
O = E.Var("o", "int32")


def C_(v):
    return E.Const(v, "int32")


def _ceil(a, k):
    return E.binary("floordiv", E.binary("add", a, C_(k - 1)), C_(k))


def test_thread_extent_is_the_largest_trip_count():
    nest = LoopNest([(O, C_(0), _ceil(N, 64), 1)], [N])
    tail = E.binary("min", C_(64), E.binary("sub", N, E.binary("mul", O, C_(64))))
    assert nest.max_trips(C_(0), tail) == 64
    assert LoopNest([], [N]).max_trips(C_(0), C_(10), 3) == 4          # 0, 3, 6, 9
    assert LoopNest([], [N]).max_trips(C_(0), N) is None               # unbounded
    skew = LoopNest([(O, C_(0), C_(4), 1)], [N])                       # o <= i < o + 8
    assert skew.max_trips(O, E.binary("add", O, C_(8))) == 8


def test_grid_extent_is_an_expression_of_the_sizes():
    def grid(nest, lo, hi):
        e = nest.max_trips_expr(lo, hi)
        return [int(te.ir.simplify.simplify(te.ir.functor.substitute(
            e, {N: E.Const(v, "int32")})).value) for v in (0, 1, 64, 65, 1000)]
    assert grid(LoopNest([], [N]), C_(0), _ceil(N, 64)) == [0, 1, 1, 2, 16]
    # a block loop below another: the largest count over the outer block index
    tri = LoopNest([(O, C_(0), N, 1)], [N])
    assert grid(tri, C_(0), E.binary("add", O, C_(1))) == [0, 1, 64, 65, 1000]
    assert grid(LoopNest([], [N]), C_(0), E.binary("sub", N, C_(5))) == [0, 0, 59, 60, 995]


def test_kernel_grid_comes_from_isl():
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    bind(s[B], bx, "blockIdx.x")
    bind(s[B], tx, "threadIdx.x")
    from tedsl.transform.lower_threads import lower_threads
    k, = lower_threads(te.lower(s, [A, B])).kernels
    assert k.block == (64, 1, 1)
    assert [k.grid_dims({"n": v})[0] for v in (0, 1, 64, 65)] == [0, 1, 1, 2]


# -- barriers from the dependences ------------------------------------------------------------

def _staged(shift):
    """``C[i] = T[i] + T[i + shift]`` with ``T = 2 * A`` staged in shared memory per block of
    64 threads; each thread loads the element of T with its own index (and the 64 threads
    load the block's halo in a second round)."""
    n = 256
    A = te.placeholder((n + shift,), "float32", name="A")
    T = te.compute((n + shift,), lambda i: A[i] * 2, name="T")
    C = te.compute((n,), lambda i: T[i] + T[i + shift], name="C")
    s = te.create_schedule(C)
    s[T].set_scope("shared")
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    bind(s[C], bx, "blockIdx.x")
    bind(s[C], tx, "threadIdx.x")
    s[T].compute_at(s[C], bx)
    _, ti = s[T].split(T.op.axis[0], factor=64)
    bind(s[T], ti, "threadIdx.x")
    return s, [A, C], n


@pytest.mark.parametrize("shift, barriers", [(0, 0), (1, 1)])
def test_barrier_only_where_a_dependence_crosses_threads(backend, shift, barriers):  # noqa: F811
    s, args, n = _staged(shift)
    mod = backend(s, args, name=f"staged{shift}")
    # each thread reads only the element it wrote: no barrier; a neighbour's element: one
    assert mod.get_source("cuda").count("__syncthreads();") == barriers
    a = np.random.default_rng(3).standard_normal(n + shift).astype(np.float32)
    c = te.nd.array(np.full(n, np.nan, np.float32), device=te.cuda(0))
    mod(te.nd.array(a, device=te.cuda(0)), c)
    np.testing.assert_allclose(c.numpy(), 2 * a[:n] + 2 * a[shift:n + shift], rtol=1e-6)


def test_non_affine_bound_is_relaxed_not_refused():
    # min(64, n - (o % ((n + 63) // 64)) * 64): the modulo by a size is beyond isl's affine
    # model; the constant operand of the min still bounds the trip count
    odd = E.binary("floormod", O, _ceil(N, 64))
    hi = E.binary("min", C_(64), E.binary("sub", N, E.binary("mul", odd, C_(64))))
    nest = LoopNest([(O, C_(0), N, 1)], [N])
    assert nest.max_trips(C_(0), hi) == 64 and nest.relaxed
    assert LoopNest([], [N]).max_trips(C_(0), E.binary("mul", N, N)) is None
