"""tedsl as an operator backend of PyTorch (needs ``pip install tedsl[torch]``).

* ``torch.compile(model, backend="tedsl")``: aten graphs become fused tedsl kernels; ops
  without a lowering run in eager PyTorch inside the compiled function (see
  :mod:`tedsl.torch.backend`; :func:`summary` and the ``tedsl.torch`` logger say which).
  The name ``"tedsl"`` is registered through the ``torch_dynamo_backends`` entry point, so
  ``import tedsl`` is not needed first.
* :func:`custom_op`: a tedsl kernel as a ``torch.library`` custom op (eager, traced by
  ``torch.compile``, with an optional backward).
"""
try:
    import torch  # noqa: F401
except ImportError as e:        # pragma: no cover - depends on the environment
    from tedsl.errors import TedslError
    raise TedslError("tedsl.torch needs PyTorch: pip install 'tedsl[torch]' (or torch>=2.4)") \
        from e

from .backend import (clear_cache, compile_graph, fallback_ops, reset_stats, set_num_threads,
                      summary, tedsl_backend)
from .custom_op import custom_op

__all__ = ["tedsl_backend", "compile_graph", "custom_op", "summary", "fallback_ops",
           "reset_stats", "clear_cache", "set_num_threads"]
