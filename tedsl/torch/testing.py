"""Two small reference models for checking and timing the ``torch.compile`` backend (in the
spirit of ``tvm.relay.testing``): a CNN (conv-bn-relu twice, max pooling, linear) and a
pre-norm transformer block (layer_norm, attention with matmul and softmax, GELU MLP).
``tutorials/07_torch_compile.py`` spells the same models out."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    """conv3x3-bn-relu (3 -> ``c``), conv3x3-bn-relu (``c`` -> 2c), 2x2 max pooling, linear to
    ``ncls`` classes, on ``hw`` x ``hw`` images."""

    def __init__(self, c=4, hw=8, ncls=5):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c)
        self.fc = nn.Linear(2 * c * (hw // 2) ** 2, ncls)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        return self.fc(F.max_pool2d(x, 2).flatten(1))


class TransformerBlock(nn.Module):
    """A pre-norm transformer block of width ``d``: ``heads``-head self-attention and a GELU MLP
    of ``hidden`` units, each with a residual connection."""

    def __init__(self, d=16, heads=2, hidden=32):
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
