"""auto_schedule of layer_norm's backward: the row statistics that only dX reads (its row sums
of ``head * gamma`` terms) are computed inside dX's parallel row loop; the row mean and
variance, which the dgamma column reduction reads too, stay at the root, computed first.
Checked against a float64 numpy reference (and central differences on a small case) on
poisoned outputs, at odd and symbolic sizes, on 1 and 2 threads."""
import numpy as np
import pytest

import tedsl as te
from tedsl import ops
from tests.conftest import poisoned

EPS = 1e-5


def backward(rows, cols, dtype="float64"):
    X = te.placeholder((rows, cols), dtype, name="X")
    g = te.placeholder((cols,), dtype, name="gamma")
    b = te.placeholder((cols,), dtype, name="beta")
    Y = ops.layer_norm(X, g, b, eps=EPS)
    head = te.placeholder(Y.shape, dtype, name="head")
    return [X, g, b, head], te.gradient(Y, [X, g, b], head)


def reference(x, g, h):
    """dX, dgamma, dbeta of ``sum(head * layer_norm(x))`` in float64."""
    x, g, h = (a.astype(np.float64) for a in (x, g, h))
    mu = x.mean(1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + EPS)
    xhat = (x - mu) * rstd
    dxhat = h * g
    dx = rstd * (dxhat - dxhat.mean(1, keepdims=True) -
                 xhat * (dxhat * xhat).mean(1, keepdims=True))
    return dx, (h * xhat).sum(0), h.sum(0)


def inputs(rng, rows, cols, dtype="float64"):
    return (rng.standard_normal((rows, cols)).astype(dtype),
            rng.uniform(0.5, 1.5, cols).astype(dtype),
            rng.standard_normal(cols).astype(dtype),
            rng.standard_normal((rows, cols)).astype(dtype))


def run(mod, arrays, rows, cols, dtype):
    outs = [poisoned((rows, cols), dtype), poisoned((cols,), dtype), poisoned((cols,), dtype)]
    mod(*arrays, *outs)
    return outs


def top_blocks(text):
    """The lowered program's root-level statements, each as its text (nested lines included)."""
    lines = text.splitlines()[1:]
    base = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
    blocks = []
    for ln in lines:
        if len(ln) - len(ln.lstrip()) == base:
            blocks.append(ln)
        elif blocks:
            blocks[-1] += "\n" + ln
    return blocks


@pytest.mark.parametrize("rows,cols,threads", [(37, 53, 1), (37, 53, 2), (130, 96, 2)])
def test_matches_numpy(rng, rows, cols, threads):
    args, grads = backward(rows, cols)
    mod = te.build(te.auto_schedule(grads), args + grads)
    mod.set_num_threads(threads)
    x, g, b, h = inputs(rng, rows, cols)
    got = run(mod, [x, g, b, h], rows, cols, "float64")
    for o, r in zip(got, reference(x, g, h)):
        np.testing.assert_allclose(o, r, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("threads", [1, 2])
def test_symbolic_rows_and_columns(rng, threads):
    n, d = te.var("n"), te.var("d")
    args, grads = backward(n, d, "float32")
    mod = te.build(te.auto_schedule(grads), args + grads)
    mod.set_num_threads(threads)
    for rows, cols in ((19, 33), (64, 17)):        # one module, two sizes, no whole vectors
        x, g, b, h = inputs(rng, rows, cols, "float32")
        got = run(mod, [x, g, b, h], rows, cols, "float32")
        for o, r in zip(got, reference(x, g, h)):
            np.testing.assert_allclose(o, r, rtol=2e-4, atol=2e-4 * np.abs(r).max())


def test_central_differences(rng):
    rows, cols = 3, 7
    args, grads = backward(rows, cols)
    mod = te.build(te.auto_schedule(grads), args + grads)
    x, g, b, h = inputs(rng, rows, cols)
    dx, dg, db = run(mod, [x, g, b, h], rows, cols, "float64")

    def loss(x, g, b):
        mu = x.mean(1, keepdims=True)
        y = (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + EPS) * g + b
        return float((h * y).sum())
    step = 1e-6
    for k, (a, got) in enumerate(((x, dx), (g, dg), (b, db))):
        fd = np.empty_like(a)
        for idx in np.ndindex(a.shape):
            hi, lo = [v.copy() for v in (x, g, b)], [v.copy() for v in (x, g, b)]
            hi[k][idx] += step
            lo[k][idx] -= step
            fd[idx] = (loss(*hi) - loss(*lo)) / (2 * step)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6)


def test_row_sums_inside_dx_row_loop():
    args, grads = backward(256, 128, "float32")
    text = str(te.lower(te.auto_schedule(grads), args + grads))
    blocks = top_blocks(text)
    dx = [bl for bl in blocks if "X_grad[" in bl]
    assert len(dx) == 1, text
    row_loop = dx[0]
    assert row_loop.lstrip().startswith("for ") and "parallel" in row_loop.splitlines()[0]
    # dX's row sums (gathered from head * gamma and head * gamma * (x - mean)) in its row loop,
    # in a buffer per row, not a root-level pass over head
    for stat in ("layer_norm_sum_grad_gather_layer_norm", "layer_norm_var_grad_gather_layer_norm",
                 "layer_norm_var_grad"):
        assert f"{stat}[" in row_loop, stat
        assert not any(f"{stat}[" in bl and "X_grad[" not in bl for bl in blocks), stat
        assert f"{stat} = allocate(float32[1]" in row_loop, stat
    # mean and variance: read by dgamma's column reduction too, so computed before, at the root
    for stat in ("layer_norm_sum", "layer_norm_var"):
        first = [k for k, bl in enumerate(blocks) if f"{stat}[" in bl][0]
        assert "X_grad[" not in blocks[first] and first < blocks.index(row_loop), stat
    # head is read by three loop nests (dX's row loop, dgamma, dbeta), not five as before
    assert sum("head[" in bl for bl in blocks) == 3, text


@pytest.mark.parametrize("threads", [1, 2])
def test_shared_statistic_stays_at_root(rng, threads):
    """Y[i, j] = X[i, j] * q[i] - m[i] with m a row sum that the column reduction C also reads
    and q a row sum of squares that only Y reads: q inside Y's row loop, m at the root."""
    rows, cols = 45, 70
    X = te.placeholder((rows, cols), "float64", name="X")
    k = te.reduce_axis((0, cols), name="k")
    m = te.compute((rows,), lambda i: te.sum(X[i, k], axis=k), name="m")
    k2 = te.reduce_axis((0, cols), name="k2")
    q = te.compute((rows,), lambda i: te.sum(X[i, k2] * X[i, k2], axis=k2), name="q")
    Y = te.compute((rows, cols), lambda i, j: X[i, j] * q[i] - m[i], name="Y")
    r = te.reduce_axis((0, rows), name="r")
    C = te.compute((cols,), lambda j: te.sum(X[r, j] * m[r], axis=r), name="C")
    s = te.auto_schedule([Y, C])
    blocks = top_blocks(str(te.lower(s, [X, Y, C])))
    row_loop = [bl for bl in blocks if "Y[" in bl][0]
    assert "q[" in row_loop and not any("q[" in bl for bl in blocks if bl is not row_loop)
    assert any("m[" in bl and "Y[" not in bl and "C[" not in bl for bl in blocks)
    mod = te.build(s, [X, Y, C])
    mod.set_num_threads(threads)
    x = rng.standard_normal((rows, cols))
    y, c = poisoned((rows, cols), "float64"), poisoned((cols,), "float64")
    mod(x, y, c)
    msum = x.sum(1)
    np.testing.assert_allclose(y, x * (x * x).sum(1)[:, None] - msum[:, None], rtol=1e-12)
    np.testing.assert_allclose(c, (x * msum[:, None]).sum(0), rtol=1e-12, atol=1e-12)
