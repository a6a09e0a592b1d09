"""The C side of an exported library: its header and the typed and DLTensor entry points.

Every kernel ``NAME`` of a library has three C entry points, all returning a status
(``TEDSL_OK`` = 0):

* ``NAME(const float *A, ..., float *C, int64_t n)``: typed pointers in the signature's order,
  then one ``int64_t`` per symbolic size;
* ``NAME_packed(uint64_t *slots)``: one 64-bit slot per argument (a data pointer, or a scalar's
  bits, doubles for floats), then one per size (what ``tedsl.load_module`` calls);
* ``NAME_dl(DLTensor **args, int32_t nargs)``: DLPack tensors (scalars as 0-d tensors); it
  checks the count, dtype, device, rank, shape, C-contiguity and overlap, and binds the sizes.

The typed and DLTensor entries are a small C file compiled with the packed entry (LLVM object
code for the CPU, a CUDA driver-API launcher for CUDA) into one shared library.
"""
import json
import re

from ..errors import ArgumentError
from .dlpack import DLTENSOR_CDEF
from .signature import dim_str, overlap_pairs

STATUS = [("TEDSL_OK", 0, "success"),
          ("TEDSL_ERR_ALLOC", 2, "out of memory while allocating a temporary buffer"),
          ("TEDSL_ERR_INDEX", 3, "a data-dependent index is out of bounds"),
          ("TEDSL_ERR_NARGS", 4, "wrong number of arguments"),
          ("TEDSL_ERR_ARG", 5, "an argument has the wrong dtype, device or layout, or is NULL"),
          ("TEDSL_ERR_SHAPE", 6, "an argument's shape does not match, or a size is out of range"),
          ("TEDSL_ERR_OVERLAP", 7, "an output shares memory with another argument"),
          ("TEDSL_ERR_NO_CUDA", 8, "no CUDA driver (libcuda.so.1) or no CUDA device"),
          ("TEDSL_ERR_CUDA", 9, "a CUDA driver call failed")]

_CTYPE = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
          "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
          "uint64": "uint64_t", "float16": "uint16_t", "bfloat16": "uint16_t",
          "float32": "float", "float64": "double"}
_SCALAR_CTYPE = dict(_CTYPE, float16="float", bfloat16="float")
# DLPack type codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
_DL_CODE = {"bool": 6, "float16": 2, "bfloat16": 4, "float32": 2, "float64": 2}
_RESERVED = set("""auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch
typedef union unsigned void volatile while bool true false class delete new namespace template
this throw try catch operator private public protected virtual friend using typename explicit
mutable export main nullptr alignas alignof and or not xor asm concept requires""".split())


def itemsize(dtype):
    return 1 if dtype == "bool" else int(re.sub(r"\D", "", dtype)) // 8


def dl_code(dtype):
    return _DL_CODE.get(dtype, 1 if dtype.startswith("uint") else 0)


def check_kernel_name(name):
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name) or name in _RESERVED:
        raise ArgumentError(f"export_library: kernel name {name!r} is not usable as a C and C++ "
                            "function name; build it with another name= (te.build(..., "
                            "name='my_kernel'))")


def c_names(sig):
    """A C identifier per parameter and size (the tensors' names where they are usable)."""
    taken, out = set(), []
    for raw in [p["name"] for p in sig["params"]] + list(sig["size_vars"]):
        n = re.sub(r"[^A-Za-z0-9_]", "_", raw) or "arg"
        if n[0].isdigit() or n in _RESERVED or n.startswith("tedsl_"):
            n = "arg_" + n
        base, k = n, 1
        while n in taken:
            k += 1
            n = f"{base}_{k}"
        taken.add(n)
        out.append(n)
    return out


def c_string(text):
    """A C string literal of ``text`` (split in lines, escaped)."""
    out, line = [], []
    for ch in text.encode():
        line.append(chr(ch) if 32 <= ch < 127 and ch not in (34, 92, 63) else f"\\{ch:03o}")
        if len(line) >= 100:
            out.append('"' + "".join(line) + '"')
            line = []
    out.append('"' + "".join(line) + '"')
    return "\n    ".join(out)


def shape_comment(p):
    return f"{p['dtype']}[{', '.join(dim_str(d) for d in p['shape'])}]"


def _c_dim(dim, names):
    """A C expression (int64) of a signature dimension over the size variables ``names``."""
    if isinstance(dim, int):
        return f"INT64_C({dim})"
    if isinstance(dim, str):
        return names[dim]
    terms = [f"INT64_C({c}) * {names[v]}" for v, c in dim["t"]]
    return "(" + " + ".join(terms + [f"INT64_C({dim['c']})"]) + ")"


# -- the header -------------------------------------------------------------------------------
_DLPACK = """\
/* DLPack's DLTensor (https://github.com/dmlc/dlpack; kDLCPU 1, kDLCUDA 2); include dlpack.h
 * before this header to use its definitions instead. */
#if !defined(DLPACK_DLPACK_H_) && !defined(DLPACK_EXTERN_C) && !defined(TEDSL_DLTENSOR_DEFINED)
#define TEDSL_DLTENSOR_DEFINED
""" + DLTENSOR_CDEF + "#endif\n"


def header(lib_name, entries):
    """The C/C++ header of a library; ``entries``: ``(sig, device)`` per kernel."""
    guard = f"TEDSL_{re.sub(r'[^A-Za-z0-9]', '_', lib_name).upper()}_H"
    out = [f"/* {lib_name}: kernels compiled by tedsl ({', '.join(s['name'] for s, _ in entries)})."
           " */", f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>",
           "#ifndef __cplusplus", "#include <stdbool.h>", "#endif", "", _DLPACK,
           "#ifndef TEDSL_STATUS_DEFINED", "#define TEDSL_STATUS_DEFINED",
           "/* Status codes returned by every entry point. */"]
    out += [f"#define {n} {v}  /* {text} */" for n, v, text in STATUS]
    out += ["static inline const char *tedsl_status_string(int32_t status) {",
            "  switch (status) {"]
    out += [f'    case {v}: return "{text}";' for _, v, text in STATUS]
    out += ['    default: return "unknown status";', "  }", "}", "#endif", "",
            "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
    for sig, device in entries:
        out += _prototypes(sig, device)
    out += ["#ifdef __cplusplus", '}  /* extern "C" */', "#endif", f"#endif  /* {guard} */", ""]
    return "\n".join(out)


def _prototypes(sig, device):
    name = sig["name"]
    names = c_names(sig)
    where = "device (CUDA) memory" if device == "cuda" else "host memory"
    doc = [f"/** {name}: returns TEDSL_OK (0) or an error status (tedsl_status_string).",
           f" * Arrays are C-contiguous, in {where}; outputs must not overlap other arguments."]
    args = []
    for p, c in zip(sig["params"], names):
        if p["kind"] == "buffer":
            rw = "written" if p.get("written") else "read"
            const = "" if p.get("written") else "const "
            extra = " (raw 16-bit patterns)" if p["dtype"] in ("float16", "bfloat16") else ""
            doc.append(f" * @param {c}  {shape_comment(p)}, {rw}{extra}")
            args.append(f"{const}{_CTYPE[p['dtype']]} *{c}")
        else:
            doc.append(f" * @param {c}  {p['dtype']} scalar")
            args.append(f"{_SCALAR_CTYPE[p['dtype']]} {c}")
    for v, c in zip(sig["size_vars"], names[len(sig["params"]):]):
        doc.append(f" * @param {c}  size {v} (0 <= {c} <= INT32_MAX)")
        args.append(f"int64_t {c}")
    doc.append(" */")
    slots = len(sig["params"]) + len(sig["size_vars"])
    out = doc + [f"int32_t {name}({', '.join(args) or 'void'});",
                 f"/* {name} with its {slots} arguments packed in 64-bit slots, in the order "
                 "above (pointers; scalars as int64, floats as double bits). */",
                 f"int32_t {name}_packed(uint64_t *slots);",
                 f"/* {name} on DLPack tensors ({len(sig['params'])}; scalars as 0-d tensors); "
                 "sizes are bound from the shapes. */",
                 f"int32_t {name}_dl(DLTensor **args, int32_t nargs);"]
    if device == "cpu":
        out.append(f"extern int32_t {name}_num_threads;  /* threads of parallel loops; 0: "
                   "OpenMP's default */")
    return out + [""]


# -- the typed and DLTensor entries -------------------------------------------------------------
def shim(lib_name, entries, index_symbol):
    """The C source of the typed and DLTensor entries of every kernel, and the library index
    (a JSON string ``index_symbol`` that ``tedsl.load_module`` reads)."""
    out = [f'#include "{lib_name}.h"', "#include <string.h>", ""]
    for sig, device in entries:
        out += _typed(sig) + _dl(sig, device)
    index = json.dumps({"version": 2, "kernels": [dict(sig, device=device)
                                                   for sig, device in entries]},
                       sort_keys=True)
    out += [f"const char {index_symbol}[] =\n    {c_string(index)};", ""]
    return "\n".join(out)


def _typed(sig):
    name = sig["name"]
    names = c_names(sig)
    nparams = len(sig["params"])
    body = [f"  uint64_t tedsl_s[{max(1, nparams + len(sig['size_vars']))}];"]
    args = []
    for k, (p, c) in enumerate(zip(sig["params"], names)):
        if p["kind"] == "buffer":
            const = "" if p.get("written") else "const "
            args.append(f"{const}{_CTYPE[p['dtype']]} *{c}")
            body.append(f"  tedsl_s[{k}] = (uint64_t)(uintptr_t){c};")
        else:
            ct = _SCALAR_CTYPE[p["dtype"]]
            args.append(f"{ct} {c}")
            if ct in ("float", "double"):
                body.append(f"  {{ double tedsl_x = (double){c}; "
                            f"memcpy(&tedsl_s[{k}], &tedsl_x, 8); }}")
            else:
                body.append(f"  tedsl_s[{k}] = (uint64_t)(int64_t){c};")
    for j, c in enumerate(names[nparams:]):
        args.append(f"int64_t {c}")
        body.append(f"  if ({c} < 0 || {c} > INT32_MAX) return TEDSL_ERR_SHAPE;")
        body.append(f"  tedsl_s[{nparams + j}] = (uint64_t){c};")
    return ([f"int32_t {name}({', '.join(args) or 'void'}) {{"] + body +
            [f"  return {name}_packed(tedsl_s);", "}", ""])


def _dl(sig, device):
    """``NAME_dl``: every check of the Python call path, on DLTensors."""
    name = sig["name"]
    names = c_names(sig)
    params = sig["params"]
    sizes = dict(zip(sig["size_vars"], names[len(params):]))
    devs = "1" if device == "cpu" else "2 && tedsl_t->device.device_type != 13"
    b = [f"int32_t {name}_dl(DLTensor **tedsl_args, int32_t tedsl_nargs) {{",
         f"  if (tedsl_args == NULL || tedsl_nargs != {len(params)}) return TEDSL_ERR_NARGS;",
         f"  uint64_t tedsl_s[{max(1, len(params) + len(sizes))}];",
         f"  uint64_t tedsl_nb[{max(1, len(params))}];"]
    b += [f"  int64_t {c} = -1;" for c in sizes.values()]
    checks = []
    for k, p in enumerate(params):
        code, bits = dl_code(p["dtype"]), 8 * itemsize(p["dtype"])
        code_ok = f"T->dtype.code == {code}"
        if p["dtype"] == "bool":     # older producers mark bool as uint8
            code_ok = "(T->dtype.code == 6 || T->dtype.code == 1)"
        dtype_ok = f"{code_ok} && T->dtype.bits == {bits} && T->dtype.lanes == 1"
        b += ["  {", f"    const DLTensor *tedsl_t = tedsl_args[{k}];",
              "    if (tedsl_t == NULL) return TEDSL_ERR_ARG;",
              f"    if (!({dtype_ok})) return TEDSL_ERR_ARG;"]
        if p["kind"] == "scalar":
            b += ["    if (tedsl_t->device.device_type != 1 && tedsl_t->device.device_type != 3) "
                  "return TEDSL_ERR_ARG;",
                  "    if (tedsl_t->ndim != 0 || tedsl_t->data == NULL) return TEDSL_ERR_SHAPE;",
                  "    const char *tedsl_p = (const char *)tedsl_t->data + tedsl_t->byte_offset;",
                  f"    {_CTYPE[p['dtype']]} tedsl_v; memcpy(&tedsl_v, tedsl_p, sizeof tedsl_v);"]
            if p["dtype"] in ("float32", "float64"):
                b.append(f"    double tedsl_x = (double)tedsl_v; "
                         f"memcpy(&tedsl_s[{k}], &tedsl_x, 8);")
            elif p["dtype"] in ("float16", "bfloat16"):
                b.append("    return TEDSL_ERR_ARG;  /* pass 16-bit float scalars to the "
                         "typed entry */")
            else:
                b.append(f"    tedsl_s[{k}] = (uint64_t)(int64_t)tedsl_v;")
            b += [f"    tedsl_nb[{k}] = 0;", "  }"]
            continue
        nd = len(p["shape"])
        b += [f"    if (tedsl_t->device.device_type != {devs}) return TEDSL_ERR_ARG;",
              f"    if (tedsl_t->ndim != {nd}) return TEDSL_ERR_SHAPE;",
              f"    int64_t tedsl_n = {itemsize(p['dtype'])};"]
        for d, dim in enumerate(p["shape"]):
            if isinstance(dim, str) and dim in sizes:
                c = sizes[dim]
                b.append(f"    if ({c} < 0) {c} = T->shape[{d}]; "
                         f"else if (T->shape[{d}] != {c}) return TEDSL_ERR_SHAPE;")
            else:
                checks.append((k, d, dim))
            b.append(f"    if (tedsl_t->shape[{d}] < 0) return TEDSL_ERR_SHAPE;")
            b.append(f"    tedsl_n *= tedsl_t->shape[{d}];")
        if nd:
            b += ["    if (T->strides != NULL && tedsl_n != 0) {", "      int64_t tedsl_step = 1;",
                  f"      for (int tedsl_d = {nd - 1}; tedsl_d >= 0; tedsl_d--) {{",
                  "        if (T->shape[tedsl_d] != 1 && T->strides[tedsl_d] != tedsl_step) "
                  "return TEDSL_ERR_ARG;",
                  "        tedsl_step *= tedsl_t->shape[tedsl_d];", "      }", "    }"]
        b += [f"    if (tedsl_t->data == NULL && tedsl_n != 0) return TEDSL_ERR_ARG;",
              f"    tedsl_s[{k}] = (uint64_t)(uintptr_t)((const char *)T->data + T->byte_offset);",
              f"    tedsl_nb[{k}] = (uint64_t)tedsl_n;", "  }"]
    for c in sizes.values():
        b.append(f"  if ({c} < 0 || {c} > INT32_MAX) return TEDSL_ERR_SHAPE;")
    for k, d, dim in checks:
        b.append(f"  if (tedsl_args[{k}]->shape[{d}] != {_c_dim(dim, sizes)}) "
                 "return TEDSL_ERR_SHAPE;")
    for k, j in overlap_pairs(sig):
        b.append(f"  if (tedsl_nb[{k}] && tedsl_nb[{j}] && tedsl_s[{k}] < tedsl_s[{j}] + "
                 f"tedsl_nb[{j}] && tedsl_s[{j}] < tedsl_s[{k}] + tedsl_nb[{k}]) "
                 "return TEDSL_ERR_OVERLAP;")
    for j, c in enumerate(sizes.values()):
        b.append(f"  tedsl_s[{len(params) + j}] = (uint64_t){c};")
    b += [f"  return {name}_packed(tedsl_s);", "}", ""]
    return [line.replace("T->", "tedsl_t->") for line in b]
