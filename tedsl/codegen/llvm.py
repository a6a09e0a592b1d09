"""Loop IR -> LLVM IR for the host CPU (llvmlite's IR builder).

One module per kernel with three functions:

* ``<name>_body(ptr noalias A, ..., scalars..., sizes...) -> i32``: the loops, one copy: when
  both entries call it, their calls are ``noinline`` (LLVM would otherwise optimise and
  compile the body once inlined into each; the direct call costs about a nanosecond);
* ``<name>(ptr slots) -> i32``: the packed C ABI (``llvm_entry``);
* ``<name>_pyentry(PyObject* a0, ...) -> i32``: the fast call path from numpy arrays
  (``llvm_entry``).

The emitter is assembled from one mixin per idea: expressions (``llvm_expr``), loads and stores
(``llvm_memory``), statements, allocations and serial loops (``llvm_stmt``), vectorized loops
(``llvm_simd``), parallel loops outlined for OpenMP (``llvm_omp``) and the entry points
(``llvm_entry``).  Status codes: 0 ok, 2 out of memory, 3 a data-dependent index out of bounds.
"""
import re

from llvmlite import ir

from ..tir import nodes as N
from .llvm_entry import EntryEmitter, written_buffers
from .llvm_expr import I32
from .llvm_intrin import check_features
from .llvm_memory import flat_index, split_lane
from .llvm_omp import ParallelEmitter
from .llvm_simd import SimdEmitter
from .llvm_stmt import LOOP_SELF, STACK_LIMIT, StmtEmitter

__all__ = ["LLVMCodegen", "generate", "module_text", "written_buffers", "flat_index",
           "split_lane", "STACK_LIMIT"]


class LLVMCodegen(SimdEmitter, ParallelEmitter, EntryEmitter, StmtEmitter):
    def __init__(self, func, vector_bits=512, fast_entry_abi=None, num_threads=0):
        self.func = func
        self.name = re.sub(r"[^A-Za-z0-9_]", "_", func.name)
        self.module = ir.Module(name=self.name)
        self.vector_bits = vector_bits
        self.abi = fast_entry_abi
        self.vars = {}
        self.bufptr = {}
        self.lanes = 1
        self.mask = None
        self.lane_var = None
        self.vvars = set()
        self.n_par = 0
        self.n_vector_bodies = 0    # vector bodies emitted so far (loops holding one: no unroll)
        self.n_branches = 0         # scalar conditionals emitted so far
        self.n_branch_loops = 0     # serial loops emitted so far with a conditional inside
        self.stack_bufs = []        # the stack buffers in scope
        self.open_loops = {}        # id(var) -> var of the serial loops being emitted
        self.stack_indexers = set()     # id(var) of loops whose variable indexes a stack buffer
        self.let_values = {}        # id(var) -> value of the let bindings met
        self.in_parallel = False
        self.nthreads = ir.GlobalVariable(self.module, I32, name=f"{self.name}_num_threads")
        self.nthreads.initializer = ir.Constant(I32, num_threads)     # 0: OpenMP's default
        self.lane_start_var = None
        self.checks_indices = False
        self._lanes_memo = {}       # id(loop body) -> (SIMD lanes, body)
        self._flat_memo = {}        # access -> (offset, buffer, indices)
        self._flat_dyn = {}         # id(offset) -> (data-dependent?, offset)
        self._affine_memo = {}      # access, added constants left out -> (terms, keys)
        self._split_memo = {}       # offset, lane variable -> (split_lane's answer, keys)

    def emit(self):
        f = self.func
        body_fn = ir.Function(self.module, ir.FunctionType(I32, self._param_types()),
                              name=f"{self.name}_body")
        body_fn.linkage = "internal"
        self._begin(body_fn, ("ret",))
        start = self.b.block
        args = list(body_fn.args)
        for p, a in zip(f.params + f.size_vars, args):
            if isinstance(p, N.Buffer):
                a.add_attribute("noalias")
                self.bufptr[p] = a
            else:
                self.vars[p] = a
        self.stmt(f.body)
        self.b.ret(ir.Constant(I32, 0))
        self._finish_allocas(start)
        two_entries = self.abi is not None and all(isinstance(p, N.Buffer) for p in f.params)
        self._packed_wrapper(body_fn, ("noinline",) if two_entries else ())
        if two_entries:
            self._py_entry(body_fn)
        return self.module


def module_text(cg, cpu, features):
    """The module's text with target attributes on every defined function."""
    check_features(cg, cpu, features)
    text = str(cg.module)
    meta = text.find("\n!")          # the metadata comes last: rewrite only that part
    if meta >= 0:
        text = text[:meta] + re.sub(r'^(!\d+) = !\{\s*!"' + re.escape(LOOP_SELF) + r'\d+",',
                                    r'\1 = distinct !{ \1,', text[meta:], flags=re.M)
    attrs = [f'"target-cpu"="{cpu}"', "nounwind"]
    if features:
        attrs.append(f'"target-features"="{features}"')
    if cg.vector_bits >= 512:
        attrs.append('"prefer-vector-width"="512"')
    # the Python entry's checks are not optimised (``optnone``, machine code without
    # LLVM's instruction selection passes): they are most of a small kernel's module, and
    # optimised they cost a GEMM's build 16 of its 43 ms in LLVM for a call a few
    # nanoseconds faster (benchmarks/call_overhead.py)
    entries = (f'@"{cg.name}_pyentry"(', f'@"{cg.name}_torch_arg"(')
    parts = text.split("\ndefine ")
    for i in range(1, len(parts)):     # a header line that ends with its parameters
        head, sep, rest = parts[i].partition("\n")
        head = head.rstrip()
        if head.endswith(")"):
            group = " #1" if any(e in head for e in entries) else " #0"
            parts[i] = head + group + sep + rest
    return ("\ndefine ".join(parts) + "\nattributes #0 = { " + " ".join(attrs) + " }\n"
            "attributes #1 = { noinline optnone " + " ".join(attrs) + " }\n")


def generate(func, vector_bits=512, fast_entry_abi=None, num_threads=0):
    """Emit the LLVM module of a lowered function; returns the codegen object.
    ``num_threads`` initialises ``NAME_num_threads`` (0: OpenMP's default)."""
    cg = LLVMCodegen(func, vector_bits, fast_entry_abi, num_threads)
    cg.emit()
    return cg
