"""Traversal of the loop IR: ``IRVisitor`` (read-only walk) and ``IRMutator`` (rebuilding walk).

Dispatch goes to ``visit_<NodeClass>`` / ``mutate_<NodeClass>`` when a subclass defines it and to a
generic walk over the node's child fields otherwise, so every node type is handled. A mutator returns the
same object when nothing below it changed, so unchanged subtrees stay shared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from compiler.ir import nodes as n


def _child_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


_FIELDS: dict[type, tuple[str, ...]] = {}


def fields_of(node: n.Node) -> tuple[str, ...]:
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = _child_fields(cls)
    return names


class IRVisitor:
    """Walks a tree; override ``visit_<NodeClass>`` and call ``self.generic_visit(node)`` to recurse."""

    def visit(self, node) -> None:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is not None:
            method(node)
        else:
            self.generic_visit(node)

    def visit_buffer(self, buffer: n.Buffer) -> None:
        """Called for every buffer reference (Load, Store, Allocate, PrimFunc params)."""

    def generic_visit(self, node) -> None:
        if not isinstance(node, n.Node):
            raise NotImplementedError(f"{type(self).__name__}: no case for {type(node).__name__}")
        for name in fields_of(node):
            value = getattr(node, name)
            if isinstance(value, n.Node):
                self.visit(value)
            elif isinstance(value, n.Buffer):
                self.visit_buffer(value)
            elif isinstance(value, tuple):
                for item in value:
                    if isinstance(item, n.Node):
                        self.visit(item)
                    elif isinstance(item, n.Buffer):
                        self.visit_buffer(item)


_BINDER_FIELDS = {n.For: "var", n.Let: "var", n.Reduce: "axis"}


class IRMutator:
    """Rebuilds a tree bottom-up; override ``mutate_<NodeClass>`` (call ``generic_mutate`` to recurse)."""

    def mutate(self, node):
        method = getattr(self, "mutate_" + type(node).__name__, None)
        if method is not None:
            return method(node)
        return self.generic_mutate(node)

    def mutate_buffer(self, buffer: n.Buffer) -> n.Buffer:
        """Called for every buffer reference; return another buffer to remap it."""
        return buffer

    def mutate_binder(self, var: n.Var) -> n.Var:
        """Called for variables at binding sites (For, Let, Reduce axes): only renaming is allowed."""
        new = self.mutate(var)
        return new if isinstance(new, n.Var) else var

    def _item(self, value):
        if isinstance(value, n.Node):
            return self.mutate(value)
        if isinstance(value, n.Buffer):
            return self.mutate_buffer(value)
        return value

    def generic_mutate(self, node):
        if not isinstance(node, n.Node):
            raise NotImplementedError(f"{type(self).__name__}: no case for {type(node).__name__}")
        changes = {}
        binder = _BINDER_FIELDS.get(type(node))
        for name in fields_of(node):
            value = getattr(node, name)
            if name == binder:
                new = (
                    tuple(self.mutate_binder(v) for v in value)
                    if isinstance(value, tuple)
                    else self.mutate_binder(value)
                )
                if new != value:
                    changes[name] = new
            elif isinstance(value, tuple):
                new = tuple(self._item(x) for x in value)
                if any(a is not b for a, b in zip(new, value, strict=True)):
                    changes[name] = new
            else:
                new = self._item(value)
                if new is not value:
                    changes[name] = new
        if not changes:
            return node
        if isinstance(node, n.Seq):
            return n.seq(*changes["stmts"])
        return dataclasses.replace(node, **changes)


def loads_in(node: n.Node) -> list[n.Load]:
    """Every ``Load`` in ``node``, outer loads before the loads in their indices."""
    found: list[n.Load] = []

    class _Collect(IRMutator):
        def mutate_Load(self, load: n.Load) -> n.Load:
            found.append(load)
            return self.generic_mutate(load)

    _Collect().mutate(node)
    return found


def post_order_visit(node: n.Node, fn: Callable[[n.Node], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""

    class _Visit(IRVisitor):
        def visit(self, x) -> None:
            self.generic_visit(x)
            fn(x)

    _Visit().visit(node)


#: The fields a binder's variable is in scope in (For min/extent and Let value are evaluated outside).
_SCOPED_FIELDS = {n.For: ("body",), n.Let: ("body",), n.Reduce: ("source",)}


class _Substitute(IRMutator):
    def __init__(self, mapping: Mapping[n.Var, n.Expr]) -> None:
        self.mapping = mapping

    def mutate_Var(self, var: n.Var) -> n.Expr:
        return self.mapping.get(var, var)

    def mutate_binder(self, var: n.Var) -> n.Var:
        return var  # a binding site is never substituted

    def generic_mutate(self, node):
        binder = _BINDER_FIELDS.get(type(node))
        bound = () if binder is None else getattr(node, binder)
        bound = bound if isinstance(bound, tuple) else (bound,)
        if not any(v in self.mapping for v in bound):
            return super().generic_mutate(node)
        # the node rebinds a mapped variable: inside its scope that variable is not free
        inner = _Substitute({v: e for v, e in self.mapping.items() if v not in bound})
        changes = {}
        for name in fields_of(node):
            value = getattr(node, name)
            if name == binder or not isinstance(value, n.Node):
                continue
            new = (inner if name in _SCOPED_FIELDS[type(node)] else self).mutate(value)
            if new is not value:
                changes[name] = new
        return dataclasses.replace(node, **changes) if changes else node


def substitute(node, mapping: Mapping[n.Var, n.Expr]):
    """Replace free occurrences of the mapped variables by expressions.

    Binding sites are left alone, and so are occurrences inside a For/Let/Reduce that binds the
    variable again (they are not free there).
    """
    if not mapping:
        return node
    return _Substitute(mapping).mutate(node)


def free_vars(node: n.Node) -> set[n.Var]:
    """Variables used in ``node`` outside the scope of any For/Let/Reduce inside ``node`` that binds them."""
    free: set[n.Var] = set()

    class _Free(IRVisitor):
        def __init__(self) -> None:
            self.bound: list[n.Var] = []

        def visit_Var(self, v: n.Var) -> None:
            if v not in self.bound:
                free.add(v)

        def _scoped(self, node, binders, scoped: tuple[str, ...]) -> None:
            binder = _BINDER_FIELDS[type(node)]
            for name in fields_of(node):
                if name not in scoped and name != binder and isinstance(getattr(node, name), n.Node):
                    self.visit(getattr(node, name))
            self.bound.extend(binders)
            for name in scoped:
                self.visit(getattr(node, name))
            del self.bound[len(self.bound) - len(binders) :]

        def visit_For(self, s: n.For) -> None:
            self._scoped(s, (s.var,), ("body",))

        def visit_Let(self, s: n.Let) -> None:
            self._scoped(s, (s.var,), ("body",))

        def visit_Reduce(self, e: n.Reduce) -> None:
            self._scoped(e, e.axis, ("source",))

    _Free().visit(node)
    return free


def buffers_of(node: n.Node) -> list[n.Buffer]:
    """Every buffer referenced in ``node``, in order of first appearance."""
    seen: dict[int, n.Buffer] = {}

    class _Collect(IRVisitor):
        def visit_buffer(self, buffer: n.Buffer) -> None:
            seen.setdefault(id(buffer), buffer)

    _Collect().visit(node)
    return list(seen.values())


def allocations(s: n.Stmt) -> tuple[list[n.Buffer], n.Stmt]:
    """The buffers of a chain of directly nested Allocates opened by ``s``, and the statement inside them."""
    chain = []
    while isinstance(s, n.Allocate):
        chain.append(s.buffer)
        s = s.body
    return chain, s


def marked_insn(stmt: n.Stmt) -> n.TensorInsn | None:
    """The tensor instruction ``stmt`` is under its marks (``Attr``), if it is one."""
    while isinstance(stmt, n.Attr):
        stmt = stmt.body
    return stmt if isinstance(stmt, n.TensorInsn) else None


def with_marks(stmt: n.Stmt, insn: n.TensorInsn) -> n.Stmt:
    """``insn`` under the marks (``Attr``) that wrap ``stmt``."""
    if isinstance(stmt, n.Attr):
        return n.Attr(stmt.key, stmt.value, with_marks(stmt.body, insn))
    return insn
