"""isl's AST generator decides every loop: schedule maps -> isl AST -> a neutral loop tree.

The tree uses tedsl expressions and plain tuples so that the loop-IR layer can build its own
nodes from it:

* ``("for", iv, stage, var, lo, hi, step, body, part)``  (``hi`` exclusive; ``part`` is
  ``(k, K)`` for the k-th of K loops of a fuse over symbolic extents, else None)
* ``("let", iv, stage, var, value, body)``           (a loop isl proved to run once)
* ``("if", cond, then, else_or_None)``
* ``("block", [children])``
* ``("user", statement, [values of the statement's iterators])``
"""
import islpy as isl

from ..errors import InternalError
from ..ir import expr as E

_T = isl.ast_expr_op_type
_OPS = {
    _T.add: "add", _T.sub: "sub", _T.mul: "mul", _T.min: "min", _T.max: "max",
    _T.fdiv_q: "floordiv", _T.pdiv_q: "floordiv", _T.pdiv_r: "floormod",
    _T.zdiv_r: "floormod", _T.div: "floordiv",
}
_CMPS = {_T.eq: "eq", _T.le: "le", _T.lt: "lt", _T.ge: "ge", _T.gt: "gt"}
_LOGIC = {_T.and_: "and", _T.and_then: "and", _T.or_: "or", _T.or_else: "or"}


class AstConverter:
    def __init__(self, program):
        self.program = program
        self.env = {}          # isl iterator name -> Var

    def expr(self, e):
        t = e.get_type()
        if t == isl.ast_expr_type.int:
            return E.Const(e.get_val().to_python(), "int64")
        if t == isl.ast_expr_type.id:
            name = e.get_id().get_name()
            v = self.env.get(name)
            if v is None:
                v = self.program.names.var(name)
            if v is None:
                raise InternalError(f"isl AST uses unknown identifier {name}")
            return v
        op = e.get_op_type()
        args = [self.expr(e.get_op_arg(i)) for i in range(e.get_op_n_arg())]
        if op in _OPS:      # isl's min / max (and sums) may take more than two operands
            out = args[0]
            for a in args[1:]:
                out = E.binary(_OPS[op], out, a)
            return out
        if op == _T.minus:
            return E.binary("sub", E.Const(0, args[0].dtype), args[0])
        if op in _CMPS:
            return E.compare(_CMPS[op], args[0], args[1])
        if op in _LOGIC:
            out = args[0]
            for a in args[1:]:
                out = E.logical(_LOGIC[op], out, a)
            return out
        if op in (_T.select, _T.cond):
            return E.select(args[0], args[1], args[2])
        raise InternalError(f"unsupported isl AST operation {op}")

    def _stmt_names(self, node, out):
        t = node.get_type()
        if t == isl.ast_node_type.user:
            out.append(node.user_get_expr().get_op_arg(0).get_id().get_name())
        elif t == isl.ast_node_type.for_:
            self._stmt_names(node.for_get_body(), out)
        elif t == isl.ast_node_type.if_:
            self._stmt_names(node.if_get_then_node(), out)
            if node.if_has_else_node():
                self._stmt_names(node.if_get_else_node(), out)
        elif t == isl.ast_node_type.block:
            ch = node.block_get_children()
            for i in range(ch.n_ast_node()):
                self._stmt_names(ch.get_at(i), out)
        elif t == isl.ast_node_type.mark:
            self._stmt_names(node.mark_get_node(), out)
        return out

    def node(self, node):
        t = node.get_type()
        if t == isl.ast_node_type.block:
            ch = node.block_get_children()
            return ("block", [self.node(ch.get_at(i)) for i in range(ch.n_ast_node())])
        if t == isl.ast_node_type.if_:
            cond = self.expr(node.if_get_cond())
            then = self.node(node.if_get_then_node())
            other = self.node(node.if_get_else_node()) if node.if_has_else_node() else None
            return ("if", cond, then, other)
        if t == isl.ast_node_type.user:
            call = node.user_get_expr()
            name = call.get_op_arg(0).get_id().get_name()
            stmt = self.program.by_name[name]
            vals = [E.cast(self.expr(call.get_op_arg(i)), "int64")
                    for i in range(1, call.get_op_n_arg())]
            return ("user", stmt, vals)
        if t == isl.ast_node_type.mark:
            return self.node(node.mark_get_node())
        if t == isl.ast_node_type.for_:
            it = node.for_get_iterator().get_id().get_name()
            dim = int(it[1:])
            stmt = self.program.by_name[self._stmt_names(node.for_get_body(), [])[0]]
            entry = stmt.sched[dim]
            if isinstance(entry, int):
                raise InternalError(f"isl generated a loop for ordering dimension {dim}")
            iv = entry[0]
            var = E.Var(iv.name if len(entry) == 2 else f"{iv.name}.{entry[2]}", "int64")
            self.env[it] = var
            lo = E.cast(self.expr(node.for_get_init()), "int64")
            if node.for_is_degenerate():
                body = self.node(node.for_get_body())
                return ("let", iv, self.program.iv_stage.get(iv, stmt.stage), var, lo, body)
            hi = E.cast(self._upper(node.for_get_cond(), it), "int64")
            step = node.for_get_inc().get_val().to_python()
            body = self.node(node.for_get_body())
            part = tuple(entry[2:]) if len(entry) > 2 else None
            return ("for", iv, self.program.iv_stage.get(iv, stmt.stage), var, lo, hi, step, body,
                    part)
        raise InternalError(f"unsupported isl AST node {t}")

    def _upper(self, cond, it):
        """Exclusive upper bound from a loop condition ``it <= ub`` / ``it < ub`` (or a conjunction)."""
        op = cond.get_op_type()
        if op in (_T.and_, _T.and_then):
            a = self._upper(cond.get_op_arg(0), it)
            b = self._upper(cond.get_op_arg(1), it)
            return E.binary("min", a, b)
        lhs = cond.get_op_arg(0)
        if lhs.get_type() != isl.ast_expr_type.id or lhs.get_id().get_name() != it:
            raise InternalError(f"unexpected loop condition {cond.to_C_str()}")
        ub = self.expr(cond.get_op_arg(1))
        if op == _T.le:
            return E.binary("add", ub, E.Const(1, "int64"))
        if op == _T.lt:
            return ub
        raise InternalError(f"unexpected loop condition {cond.to_C_str()}")


def generate(program):
    """Run isl's AST generator on the program's schedule; returns the neutral loop tree."""
    if not program.statements:
        return ("block", [])
    build = isl.AstBuild.from_context(program.context())
    smap = program.schedule_map()
    node = build.node_from_schedule_map(smap)
    return AstConverter(program).node(node)
