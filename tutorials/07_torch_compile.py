"""
tedsl as a PyTorch backend: ``torch.compile(model, backend="tedsl")`` and custom ops
=====================================================================================

PyTorch's ``torch.compile`` hands its backend a graph of aten operators.  With
``backend="tedsl"`` (registered as a ``torch_dynamo_backends`` entry point, so no
``import tedsl`` is needed), AOTAutograd first splits training graphs into a forward and a
backward graph of core aten ops; tedsl then

* lowers each supported op to a te compute (``tedsl.ops`` for matmul, convolution, softmax,
  layer norm, pooling; index maps for view / permute / slice / cat / pad; elementwise ops),
* fuses chains of elementwise ops and index maps into the kernel that produces or reads them
  (``relu(x @ w.T + b)`` is one kernel),
* schedules every kernel automatically, builds it once (kernels are cached in the process),
* and runs the kernels on the tensors' memory.  Ops without a lowering run in eager PyTorch
  inside the compiled function, and the compile log says which.

Needs PyTorch (``pip install "tedsl[torch]"``).  ``TEDSL_TUTORIAL_SMALL=1`` shrinks the models.
"""
import copy
import os
import sys

try:
    import torch
except ImportError:
    print("PyTorch is not installed (pip install 'tedsl[torch]'); nothing to show.")
    sys.exit(0)
import torch.nn as nn
import torch.nn.functional as F

import tedsl as te
import tedsl.torch

SMALL = os.environ.get("TEDSL_TUTORIAL_SMALL") == "1"
torch.manual_seed(0)

######################################################################
# Two models
# ----------
# A small CNN (conv-bn-relu twice, max pooling, a linear classifier) and a transformer block
# (layer norm, multi-head attention written with matmul + softmax, a GELU MLP).


class CNN(nn.Module):
    def __init__(self, c=4 if SMALL else 16, hw=8 if SMALL else 32, ncls=10):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c)
        self.fc = nn.Linear(2 * c * (hw // 2) ** 2, ncls)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        return self.fc(F.max_pool2d(x, 2).flatten(1))


class Block(nn.Module):
    def __init__(self, d=16 if SMALL else 64, heads=2 if SMALL else 4, hidden=32 if SMALL else 256):
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) * (d // self.h) ** -0.5, -1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


######################################################################
# Forward and one training step, checked against eager PyTorch
# -------------------------------------------------------------
# The compiled model and a copy run the same step; the outputs and every parameter's
# gradient (and the batch norms' running statistics) must agree.

def max_diff(a, b):
    return float((a - b).detach().abs().max())


def train_step(name, model, x):
    tedsl.torch.reset_stats()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tedsl")
    y, y_ref = compiled(x), ref(x)
    (y * y).mean().backward()
    (y_ref * y_ref).mean().backward()
    grads = max(max_diff(p.grad, q.grad)
                for p, q in zip(model.parameters(), ref.parameters()))
    print(f"{name}: forward max |diff| = {max_diff(y, y_ref):.2e}, gradients max |diff| = "
          f"{grads:.2e}")
    assert max_diff(y, y_ref) < 1e-4 and grads < 1e-4
    print(tedsl.torch.summary())
    print()


batch = 2 if SMALL else 8
train_step("CNN", CNN(), torch.randn(batch, 3, 8 if SMALL else 32, 8 if SMALL else 32))
train_step("transformer block", Block(), torch.randn(batch, 4 if SMALL else 32,
                                                     16 if SMALL else 64))

######################################################################
# Ops run eagerly
# ---------------
# The summaries above list the aten ops that ran in eager PyTorch: none, for both models
# (the convolution and max pooling gradients are lowered too).  The same list is
# ``tedsl.torch.fallback_ops()``; the ``tedsl.torch`` logger prints one line per compiled
# graph (``logging.basicConfig(level=logging.INFO)`` shows it).  An op without a lowering
# never makes compilation fail; it runs eagerly and is listed:

f = torch.compile(lambda x: torch.cumsum(torch.relu(x) * 2.0, dim=1) + 1.0, backend="tedsl")
tedsl.torch.reset_stats()
x = torch.randn(3, 5)
with torch.no_grad():
    print("cumsum graph matches eager:", max_diff(f(x), torch.cumsum(torch.relu(x) * 2, 1) + 1)
          < 1e-5, "| ran eagerly:", tedsl.torch.fallback_ops())
print()

######################################################################
# A tedsl kernel as a PyTorch custom op
# -------------------------------------
# ``tedsl.torch.custom_op`` registers a te compute as a real ``torch.library`` operator: it runs
# eagerly, its output shapes come from the te compute (so it traces under ``torch.compile``),
# and a backward written the same way makes it differentiable.


def scaled_sum(x, y):
    return te.compute(x.shape, lambda i, j: x[i, j] * 2.0 + y[i, j], name="scaled_sum")


def scaled_sum_grad(x, y, g):
    return (te.compute(x.shape, lambda i, j: g[i, j] * 2.0, name="gx"),
            te.compute(x.shape, lambda i, j: g[i, j], name="gy"))


op = tedsl.torch.custom_op("tutorial::scaled_sum", scaled_sum, backward=scaled_sum_grad)
a = torch.randn(4, 6, requires_grad=True)
b = torch.randn(4, 6, requires_grad=True)
out = torch.ops.tutorial.scaled_sum(a, b)
out.sum().backward()
print("custom op:", max_diff(out, 2 * a + b) < 1e-6, "| grad a == 2:",
      bool((a.grad == 2).all()), "| grad b == 1:", bool((b.grad == 1).all()))
g = torch.compile(lambda u, v: torch.relu(op(u, v)), backend="tedsl", fullgraph=True)
with torch.no_grad():
    print("custom op inside torch.compile:", max_diff(g(a, b), torch.relu(2 * a + b)) < 1e-6)
