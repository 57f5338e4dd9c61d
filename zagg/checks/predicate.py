"""Where-predicates: a tiny boolean language for selecting rows by comparisons.

A field may restrict the rows it aggregates with an expression such as
``(signal_conf_land >= 2) | (signal_conf_ocean >= 2) | ~(x < 0)``. The text comes from a
config file, so it is tokenized and parsed by hand here and compiled to vectorised numpy
calls; it is never handed to ``eval``/``exec``/``compile``, and anything outside the grammar
is refused with a :class:`PredicateError` naming the token, its position and what was
expected.

Grammar (loosest binding first; ``~`` binds tightest, then comparison, ``&``, ``|``)::

    disjunction := conjunction ('|' conjunction)*
    conjunction := unary ('&' unary)*
    unary       := '~' unary | '(' disjunction ')' | comparison
    comparison  := operand ('==' | '!=' | '<' | '<=' | '>' | '>=') operand
    operand     := NAME | NUMBER        (NUMBER: optional '-', digits, '.', exponent)

A bare variable is not a boolean, comparisons do not chain, and every name must be one of
the declared variables. Comparisons follow numpy semantics, so NaN compares False under
every operator but ``!=``. Input is capped at :data:`MAX_LENGTH` characters and
``(``/``~`` nesting at :data:`MAX_DEPTH` levels.
"""

from __future__ import annotations

import difflib
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from zagg.errors import ZaggError

MAX_DEPTH = 64
MAX_LENGTH = 4096
# Integer literals span int64 and uint64 (numpy compares every integer array against them
# exactly); floats must be finite.
_INT_MIN, _INT_END = -(2**63), 2**64

_COMPARATORS = {
    "==": (np.equal, operator.eq),
    "!=": (np.not_equal, operator.ne),
    "<": (np.less, operator.lt),
    "<=": (np.less_equal, operator.le),
    ">": (np.greater, operator.gt),
    ">=": (np.greater_equal, operator.ge),
}
_DIGITS = "0123456789"
_NAME_START = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_NAME_CHARS = _NAME_START + _DIGITS
_SPACE = " \t\r\n"
_WORD_HINTS = {"and": "'&'", "or": "'|'", "not": "'~'"}


class PredicateError(ZaggError, ValueError):
    """A predicate was refused; ``position`` is the 0-based character offset, or None."""

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message)
        self.position = position


# ---------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class _Token:
    kind: str  # "name", "number", "op", "bad", "end"
    text: str
    pos: int
    value: int | float | None = None


def _scan_number(text: str, i: int) -> int:
    """End offset of the numeric literal starting at ``i`` (past an optional '-'), or -1."""
    n = len(text)
    j = i + 1 if text[i] == "-" else i
    start = j
    while j < n and text[j] in _DIGITS:
        j += 1
    whole = j - start
    frac = 0
    if j < n and text[j] == ".":
        k = j + 1
        while k < n and text[k] in _DIGITS:
            k += 1
        frac = k - j - 1
        if whole or frac:
            j = k
    if whole == 0 and frac == 0:
        return -1
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        if k < n and text[k] in _DIGITS:
            while k < n and text[k] in _DIGITS:
                k += 1
            j = k
    return j


def _tokenize(text: str) -> list[_Token]:
    """Split ``text`` into tokens; characters outside the language become "bad" tokens.

    Bad tokens are left for the parser to refuse, so the error can say what it expected
    at that point rather than only that a character is foreign.
    """
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _SPACE:
            i += 1
        elif ch in _NAME_START:
            j = i + 1
            while j < n and text[j] in _NAME_CHARS:
                j += 1
            tokens.append(_Token("name", text[i:j], i))
            i = j
        elif ch in _DIGITS or ch in ".-":
            j = _scan_number(text, i)
            if j < 0:
                tokens.append(_Token("bad", ch, i))
                i += 1
                continue
            lexeme = text[i:j]
            is_int = not any(c in lexeme for c in ".eE")
            value = int(lexeme) if is_int else float(lexeme)
            if not (
                math.isfinite(value) if isinstance(value, float) else _INT_MIN <= value < _INT_END
            ):
                raise PredicateError(
                    f"numeric literal {lexeme!r} at position {i} is out of range", i
                )
            tokens.append(_Token("number", lexeme, i, value))
            i = j
        elif text.startswith(("==", "!=", "<=", ">="), i):
            tokens.append(_Token("op", text[i : i + 2], i))
            i += 2
        elif ch in "<>&|~()":
            tokens.append(_Token("op", ch, i))
            i += 1
        else:
            tokens.append(_Token("bad", ch, i))
            i += 1
    tokens.append(_Token("end", "", n))
    return tokens


# ------------------------------------------------------------------------------ tree


@dataclass(frozen=True)
class _Var:
    name: str

    def render(self) -> str:
        return self.name


@dataclass(frozen=True)
class _Num:
    """A literal; equal literals render equally (``1`` and ``1.0`` are distinct)."""

    value: int | float = field(compare=False)
    text: str = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "text", repr(self.value))

    def render(self) -> str:
        return self.text


@dataclass(frozen=True)
class _Compare:
    op: str
    left: _Var | _Num
    right: _Var | _Num

    def render(self) -> str:
        return f"{self.left.render()} {self.op} {self.right.render()}"


@dataclass(frozen=True)
class _Not:
    operand: _Node

    def render(self) -> str:
        inner = self.operand.render()
        return "~" + (inner if isinstance(self.operand, _Not) else f"({inner})")


@dataclass(frozen=True)
class _And:
    operands: tuple[_Node, ...]

    def render(self) -> str:
        return " & ".join(
            f"({o.render()})" if isinstance(o, _Or) else o.render() for o in self.operands
        )


@dataclass(frozen=True)
class _Or:
    operands: tuple[_Node, ...]

    def render(self) -> str:
        return " | ".join(o.render() for o in self.operands)


_Node = _Compare | _Not | _And | _Or


def _flatten(kind: type, operands: list[_Node]) -> _Node:
    """An n-ary node of ``kind`` with nested same-kind operands spliced in (canonical form)."""
    flat: list[_Node] = []
    for o in operands:
        flat.extend(o.operands if isinstance(o, kind) else (o,))
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


# ---------------------------------------------------------------------------- parser


def _describe(tok: _Token) -> str:
    return "end of input" if tok.kind == "end" else repr(tok.text)


class _Parser:
    def __init__(self, text: str, variables: tuple[str, ...]):
        self.tokens = _tokenize(text)
        self.variables = variables
        self.declared = frozenset(variables)
        self.i = 0
        self.depth = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def fail(self, tok: _Token, expected: str) -> PredicateError:
        hint = ""
        if tok.kind == "name" and tok.text in _WORD_HINTS:
            hint = f" (use {_WORD_HINTS[tok.text]} for {tok.text!r})"
        elif tok.text == "=":
            hint = " (use '==' for equality)"
        return PredicateError(
            f"unexpected {_describe(tok)} at position {tok.pos}: expected {expected}{hint}",
            tok.pos,
        )

    def parse(self) -> _Node:
        node = self.disjunction()
        tok = self.peek()
        if tok.kind != "end":
            expected = "'&', '|' or end of input"
            if tok.kind == "op" and tok.text in _COMPARATORS:
                expected += " (comparisons do not chain)"
            raise self.fail(tok, expected)
        return node

    def disjunction(self) -> _Node:
        operands = [self.conjunction()]
        while self.peek().text == "|" and self.peek().kind == "op":
            self.i += 1
            operands.append(self.conjunction())
        return _flatten(_Or, operands)

    def conjunction(self) -> _Node:
        operands = [self.unary()]
        while self.peek().text == "&" and self.peek().kind == "op":
            self.i += 1
            operands.append(self.unary())
        return _flatten(_And, operands)

    def unary(self) -> _Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text in ("~", "("):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise PredicateError(
                    f"nesting deeper than {MAX_DEPTH} levels at position {tok.pos}", tok.pos
                )
            self.i += 1
            if tok.text == "~":
                nxt = self.peek()
                if nxt.kind in ("name", "number"):
                    raise self.fail(nxt, "'(' or '~' ('~' negates a parenthesised condition)")
                node: _Node = _Not(self.unary())
            else:
                node = self.disjunction()
                close = self.peek()
                if not (close.kind == "op" and close.text == ")"):
                    expected = "')', '&' or '|'"
                    if close.kind == "op" and close.text in _COMPARATORS:
                        expected += " (comparisons do not chain)"
                    raise self.fail(close, expected)
                self.i += 1
            self.depth -= 1
            return node
        return self.comparison()

    def operand(self, expected: str) -> _Var | _Num:
        tok = self.peek()
        if tok.kind == "number":
            self.i += 1
            return _Num(tok.value)
        if tok.kind == "name":
            self.i += 1
            return _Var(self.check_name(tok))
        raise self.fail(tok, expected)

    def comparison(self) -> _Compare:
        left = self.operand("a comparison, '(' or '~'")
        tok = self.peek()
        if not (tok.kind == "op" and tok.text in _COMPARATORS):
            expected = "a comparison operator"
            if tok.kind in ("end", "op") and tok.text in ("", "&", "|", ")"):
                expected += " (a bare variable or number is not a condition)"
            raise self.fail(tok, expected)
        self.i += 1
        right = self.operand("a variable name or number")
        return _Compare(tok.text, left, right)

    def check_name(self, tok: _Token) -> str:
        name = tok.text
        if name.startswith("__"):
            raise PredicateError(
                f"name {name!r} at position {tok.pos} is refused: names starting with '__' "
                "are never variables",
                tok.pos,
            )
        if name not in self.declared:
            close = difflib.get_close_matches(name, self.variables, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            hint += f" (use {_WORD_HINTS[name]})" if name in _WORD_HINTS else ""
            declared = ", ".join(self.variables) or "none"
            raise PredicateError(
                f"unknown variable {name!r} at position {tok.pos}: declared variables are "
                f"[{declared}]{hint}",
                tok.pos,
            )
        return name


# -------------------------------------------------------------------------- compiler

_Fn = Callable[[Mapping[str, np.ndarray]], "np.ndarray | np.bool_"]


def _build_evaluator(node: _Node) -> _Fn:
    """Nested closures of numpy calls; literal-only comparisons fold to constants."""
    if isinstance(node, _Compare):
        vector_op, scalar_op = _COMPARATORS[node.op]
        left, right = node.left, node.right
        if isinstance(left, _Num) and isinstance(right, _Num):
            const = np.bool_(scalar_op(left.value, right.value))
            return lambda arrays: const
        if isinstance(left, _Var) and isinstance(right, _Var):
            a, b = left.name, right.name
            return lambda arrays: vector_op(arrays[a], arrays[b])
        if isinstance(left, _Var):
            a, value = left.name, right.value
            return lambda arrays: vector_op(arrays[a], value)
        value, b = left.value, right.name
        return lambda arrays: vector_op(value, arrays[b])
    if isinstance(node, _Not):
        inner = _build_evaluator(node.operand)
        return lambda arrays: np.logical_not(inner(arrays))
    parts = [_build_evaluator(o) for o in node.operands]
    combine = np.logical_and if isinstance(node, _And) else np.logical_or

    def fold(arrays):
        out = parts[0](arrays)
        for part in parts[1:]:
            out = combine(out, part(arrays))
        return out

    return fold


def _names(node: _Node, out: dict[str, None]) -> None:
    if isinstance(node, _Compare):
        for side in (node.left, node.right):
            if isinstance(side, _Var):
                out.setdefault(side.name, None)
    elif isinstance(node, _Not):
        _names(node.operand, out)
    else:
        for o in node.operands:
            _names(o, out)


# ------------------------------------------------------------------------ public API


class Predicate:
    """A parsed where-predicate: the names it reads, a numpy evaluator, a canonical text."""

    __slots__ = ("_node", "_fn", "variables")

    def __init__(self, node: _Node):
        self._node = node
        self._fn = _build_evaluator(node)
        names: dict[str, None] = {}
        _names(node, names)
        #: Variable names the predicate reads, in order of first appearance.
        self.variables: tuple[str, ...] = tuple(names)

    def evaluate(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        """Boolean row mask over ``arrays`` (numpy comparison semantics; NaN is False).

        The mask has the broadcast shape of the arrays the predicate reads — or, for a
        predicate that reads none, of all arrays given.
        """
        missing = [v for v in self.variables if v not in arrays]
        if missing:
            raise PredicateError(
                f"predicate {str(self)!r} reads {missing} but the arrays given are {sorted(arrays)}"
            )
        used = {v: np.asarray(arrays[v]) for v in self.variables}
        shaping = used.values() if used else (np.asarray(a) for a in arrays.values())
        shape = np.broadcast_shapes(*(a.shape for a in shaping))
        out = self._fn(used)
        return np.array(np.broadcast_to(out, shape), dtype=bool)

    def __str__(self) -> str:
        return self._node.render()

    def __repr__(self) -> str:
        return f"Predicate({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Predicate) and self._node == other._node

    def __hash__(self) -> int:
        return hash(self._node)


def parse(text: str, variables: Iterable[str]) -> Predicate:
    """Parse ``text`` into a :class:`Predicate` over the declared ``variables``.

    Raises :class:`PredicateError` for anything outside the grammar, an undeclared or
    dunder name, input longer than :data:`MAX_LENGTH`, or nesting past :data:`MAX_DEPTH`.
    """
    if not isinstance(text, str):
        raise PredicateError(f"a predicate must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise PredicateError(
            f"predicate is {len(text)} characters long; the limit is {MAX_LENGTH}", MAX_LENGTH
        )
    declared = tuple(dict.fromkeys(str(v) for v in variables))
    return Predicate(_Parser(text, declared).parse())
