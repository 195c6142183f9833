"""Rewrite rules for FloorDiv and FloorMod by a positive constant, on linear forms.

With ``e = D + R`` where every coefficient of ``D`` is a multiple of ``c`` (``%`` also reduces
the constant modulo ``c``; ``//`` keeps it inside, ``(x + 5)//4``):

    (D + R) // c  ->  D/c + R // c          (x*4 + y)//4 -> x + y//4, (x*8)//4 -> x*2
    (D + R) %  c  ->  R % c                 (x*4 + y) % 4 -> y % 4, (x*8) % 4 -> 0
    R // c -> k,  R % c -> R - k*c          when bound(R) lies in one period [k*c, k*c + c - 1]
    (g*R) // (g*c) -> R // c,  (g*R) % (g*c) -> g*(R % c)
    (e // a) // b -> e // (a*b)             a, b > 0
    (e % a) % b -> e % b                    b divides a
    e // 1 -> e,  e % 1 -> 0

``merge_divmod`` recombines ``c*(e//c) + e%c -> e`` and ``e - c*(e//c) -> e%c`` in a sum, also
through nesting: ``(e//a % c)*a + (e//(a*c))*(a*c) -> (e//a)*a``, so fused indices collapse.
Integers are mathematical (no wraparound); the argument forms must have simplified atoms, and atoms
the rules build are simplified, so the results are fixpoints of ``compiler.arith.simplify``.
"""

from __future__ import annotations

import math

from compiler.arith.bound import Ranges, bound_linear
from compiler.arith.linear import LinearForm, imm, linearize
from compiler.ir import FloorDiv, FloorMod, IntImm


def floordiv_lf(e: LinearForm, c: int, ranges: Ranges) -> LinearForm:
    """The simplified form of ``e // c`` for a constant ``c > 0``."""
    assert c > 0, c
    if c == 1:
        return e
    if e.is_const:
        return LinearForm.constant(e.const // c, e.dtype)
    div = LinearForm({a: k // c for a, k in e.terms.items() if k % c == 0}, 0, e.dtype)
    rest = LinearForm({a: k for a, k in e.terms.items() if k % c != 0}, e.const, e.dtype)
    if rest.is_const:
        return div.shift(rest.const // c)
    # the constant stays inside: (x + 5)//4, not (x + 1)//4 + 1, so that the digits x%c, x//c%d,
    # x//(c*d) of one x keep the same inner x and merge_divmod can recombine them
    g = math.gcd(c, rest.const, *rest.terms.values())
    if g > 1:
        rest, c = rest.exact_div(g), c // g
    b = bound_linear(rest, ranges)
    if b.is_bounded and b.lo // c == b.hi // c:
        return div.shift(b.lo // c)
    inner = _single_atom(rest, FloorDiv)
    if inner is not None:  # (x//a + r)//c == (x + r*a)//(a*c)
        x, a = inner
        return div + floordiv_lf(linearize(x).shift(rest.const * a), a * c, ranges)
    return div + LinearForm.atom(FloorDiv(rest.to_expr(), imm(c, e.dtype)))


def floormod_lf(e: LinearForm, c: int, ranges: Ranges) -> LinearForm:
    """The simplified form of ``e % c`` for a constant ``c > 0``."""
    assert c > 0, c
    if c == 1:
        return LinearForm.constant(0, e.dtype)
    if e.is_const:
        return LinearForm.constant(e.const % c, e.dtype)
    # drop multiples of c; a positive coefficient above c shrinks to its residue
    terms = {a: (k % c if k > c else k) for a, k in e.terms.items() if k % c != 0}
    rest = LinearForm(terms, e.const % c, e.dtype)
    if rest.is_const:
        return rest
    g = math.gcd(c, rest.const, *rest.terms.values())
    if g > 1:  # (g*R) % (g*c) == g*(R % c)
        return floormod_lf(rest.exact_div(g), c // g, ranges).scale(g)
    b = bound_linear(rest, ranges)
    if b.is_bounded and b.lo // c == b.hi // c:
        return rest.shift(-(b.lo // c) * c)
    inner = _single_atom(rest, FloorMod)
    if inner is not None and inner[1] % c == 0:  # (x%a + r) % c == (x + r) % c when c | a
        x, _ = inner
        return floormod_lf(linearize(x).shift(rest.const), c, ranges)
    return LinearForm.atom(FloorMod(rest.to_expr(), imm(c, e.dtype)))


def _single_atom(e: LinearForm, node: type) -> tuple | None:
    """``(x, a)`` when ``e`` is ``node(x, a) + const`` with a constant ``a > 0``."""
    if len(e.terms) != 1:
        return None
    ((atom, k),) = e.terms.items()
    if k == 1 and _div_by_const(atom, node):
        return atom.a, atom.b.value
    return None


def merge_divmod(e: LinearForm, ranges: Ranges) -> LinearForm:
    """Fold ``c*(x//c) + x%c -> x`` and ``x - c*(x//c) -> x%c`` (scaled by any k) in ``e``."""
    for _ in range(8):  # each merge removes a FloorDiv atom; the cap only guards against cycles
        merged = _merge_once(e, ranges)
        if merged is None:
            return e
        e = merged
    return e


def _merge_once(e: LinearForm, ranges: Ranges) -> LinearForm | None:
    for atom, m in e.terms.items():
        if not _div_by_const(atom, FloorDiv):
            continue
        div = LinearForm({atom: m}, 0, e.dtype)
        # x//C == (x//a)//c for C == a*c: pair with terms of lower = x//a (a = 1: x itself)
        for lower, c in _lowers(e, atom):
            if m % c:
                continue
            k = m // c
            mod = floormod_lf(lower, c, ranges)  # the simplified lower % c
            if _contains(e, mod.scale(k)):  # k*(c*(lower//c) + lower%c) -> k*lower
                return e - div - mod.scale(k) + lower.scale(k)
            if _contains(e, lower.scale(-k)):  # -k*(lower - c*(lower//c)) -> -k*(lower%c)
                return e - div - lower.scale(-k) + mod.scale(-k)
    return None


def _lowers(e: LinearForm, atom: FloorDiv) -> list[tuple[LinearForm, int]]:
    """``(y//a, c)`` with ``atom == (y//a)//c`` for ``y//a`` in ``e`` (also inside a ``% c``).

    ``atom = x//C``; a ``y//a`` qualifies when ``y == g*x`` (g > 0, as the gcd rule may have divided
    it out) and ``a*c == g*C``. The first candidate is ``x`` itself (``a = 1``).
    """
    x = linearize(atom.a)
    big = atom.b.value
    out = [(x, big)]
    for other in e.terms:
        inner = other.a if _div_by_const(other, FloorMod) else other
        if inner is atom or not _div_by_const(inner, FloorDiv):
            continue
        g = _ratio(linearize(inner.a), x)
        a = inner.b.value
        if g and a < g * big and (g * big) % a == 0:
            cand = (LinearForm.atom(inner), g * big // a)
            if cand not in out:
                out.append(cand)
    return out


def _ratio(y: LinearForm, x: LinearForm) -> int:
    """``g > 0`` with ``y == g*x``, or 0 when there is none."""
    if not x.terms or len(x.terms) != len(y.terms):
        return 0
    first, k = next(iter(x.terms.items()))
    g, r = divmod(y.coef(first), k)
    return g if g > 0 and r == 0 and y == x.scale(g) else 0


def _div_by_const(e, node: type) -> bool:
    return type(e) is node and isinstance(e.b, IntImm) and e.b.value > 0


def _contains(e: LinearForm, part: LinearForm) -> bool:
    """True when every term of ``part`` appears in ``e`` with the same coefficient."""
    return bool(part.terms) and all(e.terms.get(a) == k for a, k in part.terms.items())
