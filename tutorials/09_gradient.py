"""
Gradients of tensor programs
============================

``te.gradient(output, inputs, head=None)`` differentiates a compute definition in reverse
mode and returns the adjoints as ordinary ``te.compute`` stages: you schedule, lower and build
them like any other.  ``head`` is the incoming gradient (ones when omitted).

The adjoint of a read ``A[f(i)]`` is, for every element of ``A``, a sum over the statement
instances that read it.  For affine ``f`` isl computes that set exactly (the preimage of the
element under the access relation), so the backward of a convolution comes out as a gather
loop nest (a transposed convolution) with exact bounds, strides included, and no atomic
updates.  A data-dependent read (an embedding ``E[idx[i]]``) falls back to a serialized sum;
the stage names say which form was used (``..._grad_gather_...`` or
``..._grad_scatter_serial_...``).

This lesson

1. trains a custom operator, a learned 1-D smoothing filter with a soft threshold, by plain
   gradient descent, with its gradient from ``te.gradient``;
2. prints the lowered backward of a stride-2, padded conv2d.

Run it with ``python tutorials/09_gradient.py``.
"""

# %%
# A custom operator and its loss
# ------------------------------
# ``Y[i] = tanh(sum_k W[k] * X[i + k]) * scale[0]``: a 5-tap filter followed by a squashing
# nonlinearity.  The loss is the squared error against a target signal.
import os

import numpy as np

import tedsl as te

small = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
n, taps = (200 if small else 2000), 5
X = te.placeholder((n + taps - 1,), "float32", name="X")
W = te.placeholder((taps,), "float32", name="W")
scale = te.placeholder((1,), "float32", name="scale")
T = te.placeholder((n,), "float32", name="T")
k = te.reduce_axis((0, taps), name="k")
F = te.compute((n,), lambda i: te.sum(W[k] * X[i + k], axis=k), name="F")
Y = te.compute((n,), lambda i: te.tanh(F[i]) * scale[0], name="Y")
r = te.reduce_axis((0, n), name="r")
loss = te.compute((1,), lambda z: te.sum((Y[r] - T[r]) * (Y[r] - T[r]), axis=r), name="loss")

# %%
# Its gradient, scheduled and built
# ---------------------------------
# One call gives the adjoints of ``W`` and ``scale``.  ``W``'s is a reduction over the signal
# (each tap is read by every output), ``scale``'s likewise; the elementwise adjoint of ``F``
# between them is an ordinary stage that we inline.
dW, dscale = te.gradient(loss, [W, scale])
s = te.create_schedule([loss, dW, dscale])
for stage in s.stages:
    if stage.op.name.endswith("_grad") and not stage.op.reduce_axis:
        stage.compute_inline()
step = te.build(s, [X, W, scale, T, loss, dW, dscale], name="loss_and_grad")
print("adjoint stages:", [t.op.name for t in (dW, dscale)])

# %%
# Gradient descent
# ----------------
# The target is made by a known filter; training starts from a flat one and recovers it.
rng = np.random.default_rng(0)
x = rng.standard_normal(n + taps - 1).astype("float32")
true_w = np.array([0.1, 0.3, 0.5, -0.2, 0.05], "float32")
target = (np.tanh(np.convolve(x, true_w[::-1], "valid")) * 1.5).astype("float32")
w = np.full(taps, 0.2, "float32")
sc = np.ones(1, "float32")
out, gw, gs = np.empty(1, "float32"), np.empty(taps, "float32"), np.empty(1, "float32")
lr = 0.5 / n
for it in range(301):
    step(x, w, sc, target, out, gw, gs)
    if it % 75 == 0:
        print(f"step {it:3d}: loss {out[0]:.6f}")
    w -= lr * gw
    sc -= lr * gs
print("learned filter", np.round(w, 3), "scale", np.round(sc, 3))
print("true filter   ", true_w, "scale", 1.5)
assert np.abs(w - true_w).max() < 0.05 and abs(sc[0] - 1.5) < 0.05

# %%
# The backward of a conv2d
# ------------------------
# Stride 2, padding 1 (a padded producer, as ``tedsl.ops.conv2d_nchw`` builds it).  The
# adjoint of the padded input is a gather over the output positions that read each element:
# isl turns ``h = 2 * y + ry`` into a loop over ``y`` with floor bounds, one or two rows per
# input row, and no guard.  The input's adjoint is the interior of that adjoint, so the gather
# is defined over the input's own shape (shifted by the padding) and writes ``Xc``'s adjoint
# directly; the weight's adjoint is a reduction over the batch and the output positions.
from tedsl import ops  # noqa: E402

Xc = te.placeholder((1, 8, 14, 14), "float32", name="Xc")
Wc = te.placeholder((16, 8, 3, 3), "float32", name="Wc")
Yc = ops.conv2d_nchw(Xc, Wc, stride=2, padding=1)
head = te.placeholder(Yc.shape, "float32", name="head")
dX, dWc = te.gradient(Yc, [Xc, Wc], head)
print(te.lower(te.create_schedule([dX, dWc]), [Xc, Wc, head, dX, dWc], name="conv2d_backward"))

# Check it against a direct transposed-convolution reference in numpy.
xc = rng.standard_normal((1, 8, 14, 14)).astype("float32")
wc = rng.standard_normal((16, 8, 3, 3)).astype("float32")
hc = rng.standard_normal((1, 16, 7, 7)).astype("float32")
f = te.build(te.create_schedule([dX, dWc]), [Xc, Wc, head, dX, dWc])
gx, gw2 = np.empty_like(xc), np.empty_like(wc)
f(xc, wc, hc, gx, gw2)
ref_pad = np.zeros((1, 8, 16, 16), "float32")
xp = np.pad(xc, ((0, 0), (0, 0), (1, 1), (1, 1)))
ref_w = np.zeros_like(wc)
for ry in range(3):
    for rx in range(3):
        win = xp[:, :, ry:ry + 13:2, rx:rx + 13:2]               # (1, 8, 7, 7)
        ref_pad[:, :, ry:ry + 13:2, rx:rx + 13:2] += np.einsum("nfyx,fc->ncyx", hc,
                                                               wc[:, :, ry, rx])
        ref_w[:, :, ry, rx] = np.einsum("nfyx,ncyx->fc", hc, win)
np.testing.assert_allclose(gx, ref_pad[:, :, 1:15, 1:15], rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(gw2, ref_w, rtol=1e-4, atol=1e-4)
print("conv2d backward matches numpy")

# %%
# Stride 1: the border guard becomes zero padding
# -----------------------------------------------
# With stride 1 and padding 1 the taps that read an input row are the rows ``h - ry`` that
# lie inside the output: ``0 <= h - ry < H`` is a border condition only.  ``te.gradient``
# then reads the output's adjoint through a copy padded with zeros (``head1_zero_padded``)
# and sums over all 3 x 3 taps with no guard, the weights read flipped: a plain transposed
# convolution with constant trip counts, which ``te.auto_schedule`` tiles like a forward
# convolution.  The stage name says which form was used.
Y1 = ops.conv2d_nchw(Xc, Wc, stride=1, padding=1)
head1 = te.placeholder(Y1.shape, "float32", name="head1")
dX1, = te.gradient(Y1, [Xc], head1)
for stage in te.create_schedule(dX1).stages:
    if "_grad_gather" in stage.op.name:
        print(stage.op.name, "=", stage.op.body[0])
f1 = te.build(te.create_schedule(dX1), [Xc, Wc, head1, dX1])
h1 = rng.standard_normal((1, 16, 14, 14)).astype("float32")
g1 = np.empty_like(xc)
f1(xc, wc, h1, g1)
hp = np.pad(h1, ((0, 0), (0, 0), (1, 1), (1, 1)))
ref1 = np.zeros_like(xc)
for ry in range(3):
    for rx in range(3):                  # x[h] receives y[h + 1 - ry] * w[ry]
        ref1 += np.einsum("nfyx,fc->ncyx", hp[:, :, 2 - ry:16 - ry, 2 - rx:16 - rx],
                          wc[:, :, ry, rx])
np.testing.assert_allclose(g1, ref1, rtol=1e-4, atol=1e-4)
print("stride-1 conv2d input gradient matches numpy")
