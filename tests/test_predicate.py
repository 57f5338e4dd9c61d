"""Where-predicates: grammar, error messages, injection refusal and numpy equivalence."""

from __future__ import annotations

import builtins
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zagg.checks.predicate import MAX_DEPTH, MAX_LENGTH, Predicate, PredicateError, parse

VARS = ("signal_conf_land", "signal_conf_ocean", "x", "y", "h_li")


def _arrays(n=257, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    x[rng.random(n) < 0.15] = np.nan
    y = rng.integers(-3, 4, size=n).astype(np.float64)
    y[rng.random(n) < 0.1] = np.nan
    return {
        "signal_conf_land": rng.integers(-2, 5, size=n).astype(np.int8),
        "signal_conf_ocean": rng.integers(-2, 5, size=n).astype(np.int8),
        "x": x,
        "y": y,
        "h_li": rng.normal(100, 50, size=n).astype(np.float32),
    }


class TestParse:
    def test_brief_example(self):
        p = parse("(signal_conf_land >= 2) | (signal_conf_ocean >= 2) | ~(x < 0)", VARS)
        a = _arrays()
        expect = (a["signal_conf_land"] >= 2) | (a["signal_conf_ocean"] >= 2) | ~(a["x"] < 0)
        np.testing.assert_array_equal(p.evaluate(a), expect)
        assert p.variables == ("signal_conf_land", "signal_conf_ocean", "x")
        assert str(p) == "signal_conf_land >= 2 | signal_conf_ocean >= 2 | ~(x < 0)"

    def test_precedence_and_binds_tighter_than_or(self):
        p = parse("x > 0 | y > 0 & h_li > 100", VARS)
        assert str(p) == "x > 0 | y > 0 & h_li > 100"
        a = _arrays(seed=1)
        expect = (a["x"] > 0) | ((a["y"] > 0) & (a["h_li"] > 100))
        np.testing.assert_array_equal(p.evaluate(a), expect)
        q = parse("(x > 0 | y > 0) & h_li > 100", VARS)
        assert str(q) == "(x > 0 | y > 0) & h_li > 100"

    @pytest.mark.parametrize(
        "text, canonical",
        [
            ("x>=-1", "x >= -1"),
            ("x < 1.5e-3", "x < 0.0015"),
            ("x < -2.5E+2", "x < -250.0"),
            ("x<.5", "x < 0.5"),
            ("x<5.", "x < 5.0"),
            ("x != 1e300", "x != 1e+300"),
            ("-3 <= y", "-3 <= y"),
            ("x == y", "x == y"),
            ("1 < 2", "1 < 2"),
            ("((x < 1))", "x < 1"),
            ("~~(x < 1)", "~~(x < 1)"),
            ("~(~(x < 1))", "~~(x < 1)"),
            ("x<1&(y<1&h_li<1)", "x < 1 & y < 1 & h_li < 1"),
            ("x<1|(y<1|h_li<1)", "x < 1 | y < 1 | h_li < 1"),
            ("x < 18446744073709551615", "x < 18446744073709551615"),
            ("\tx\n<\r1 ", "x < 1"),
        ],
    )
    def test_canonical_rendering(self, text, canonical):
        p = parse(text, VARS)
        assert str(p) == canonical
        assert parse(canonical, VARS) == p
        assert repr(p) == f"Predicate({canonical!r})"

    def test_literal_only_comparison_takes_the_arrays_shape(self):
        a = _arrays(n=5)
        assert parse("1 < 2", VARS).evaluate(a).tolist() == [True] * 5
        assert parse("1 > 2 | x > 0", VARS).evaluate(a).tolist() == (a["x"] > 0).tolist()
        assert parse("1 < 2", VARS).variables == ()

    def test_nan_compares_false_like_numpy(self):
        a = {"x": np.array([np.nan, 1.0, -1.0])}
        assert parse("x < 0", ["x"]).evaluate(a).tolist() == [False, False, True]
        assert parse("x >= 0", ["x"]).evaluate(a).tolist() == [False, True, False]
        assert parse("x != 1", ["x"]).evaluate(a).tolist() == [True, False, True]
        assert parse("~(x < 0)", ["x"]).evaluate(a).tolist() == [True, True, False]

    def test_integer_arrays_against_out_of_range_literals(self):
        a = {"c": np.array([-2, 4], dtype=np.int8)}
        assert parse("c < 300", ["c"]).evaluate(a).tolist() == [True, True]
        assert parse("c > -9223372036854775808", ["c"]).evaluate(a).tolist() == [True, True]

    def test_evaluate_returns_a_bool_array_and_needs_its_variables(self):
        p = parse("x > 0", VARS)
        out = p.evaluate({"x": np.array([1.0, -1.0])})
        assert out.dtype == bool and out.tolist() == [True, False]
        with pytest.raises(PredicateError, match="reads \\['x'\\]"):
            p.evaluate({"y": np.zeros(2)})

    def test_variables_deduplicated_in_order(self):
        assert parse("y > 0 & x > y | y < x", VARS).variables == ("y", "x")

    def test_equality_and_hash(self):
        assert parse("x<1", VARS) == parse("(x < 1)", VARS)
        assert hash(parse("x<1", VARS)) == hash(parse("(x < 1)", VARS))
        assert parse("x<1", VARS) != parse("x<=1", VARS)
        assert parse("x<1", VARS) != "x < 1"
        assert parse("x<1", VARS) != parse("x<1.0", VARS)
        assert parse("x<-0.0", VARS) == parse("x < -0.0", VARS)


class TestErrors:
    @pytest.mark.parametrize(
        "text, message",
        [
            ("h_li.x >= 2", "unexpected '.' at position 4: expected a comparison operator"),
            ("x", "unexpected end of input at position 1: expected a comparison operator"),
            ("x & y > 1", "unexpected '&' at position 2: expected a comparison operator"),
            ("x >", "unexpected end of input at position 3: expected a variable name or number"),
            ("x > 1 < 2", "unexpected '<' at position 6: expected '&', '|' or end of input"),
            ("(x > 1 < 2)", "comparisons do not chain"),
            ("x = 1", "unexpected '=' at position 2: expected a comparison operator"),
            ("x = 1", "use '=='"),
            ("x > 1 and y > 1", "unexpected 'and' at position 6"),
            ("x > 1 and y > 1", "use '&'"),
            ("(x > 1", "unexpected end of input at position 6: expected ')', '&' or '|'"),
            ("x > 1)", "unexpected ')' at position 5"),
            ("", "unexpected end of input at position 0: expected a comparison, '(' or '~'"),
            ("~x > 1", "unexpected 'x' at position 1: expected '(' or '~'"),
            ("x > 1 &", "unexpected end of input at position 7"),
            ("x >> 1", "unexpected '>' at position 3: expected a variable name or number"),
            ("x > - 1", "unexpected '-' at position 4"),
            ("x > 1e999", "out of range"),
            ("x > 18446744073709551616", "out of range"),
            ("2x > 1", "unexpected 'x' at position 1: expected a comparison operator"),
        ],
    )
    def test_messages_name_token_position_and_expectation(self, text, message):
        with pytest.raises(PredicateError, match=None) as info:
            parse(text, VARS)
        assert message in str(info.value)
        assert isinstance(info.value, ValueError)

    def test_position_attribute(self):
        with pytest.raises(PredicateError) as info:
            parse("x >= 2 | y.z > 1", VARS)
        assert info.value.position == 10

    def test_unknown_variable_lists_declared_and_suggests(self):
        with pytest.raises(PredicateError) as info:
            parse("signal_conf_lnd >= 2", VARS)
        msg = str(info.value)
        assert "unknown variable 'signal_conf_lnd' at position 0" in msg
        assert "signal_conf_land, signal_conf_ocean, x, y, h_li" in msg
        assert "did you mean 'signal_conf_land'?" in msg

    def test_unknown_variable_without_close_match(self):
        with pytest.raises(PredicateError) as info:
            parse("zzzzzz > 1", ["x"])
        assert "did you mean" not in str(info.value) and "[x]" in str(info.value)

    def test_declared_names_are_the_only_names(self):
        parse("a > 1", ["a"])
        with pytest.raises(PredicateError, match="unknown variable 'a'"):
            parse("a > 1", [])

    def test_non_string_refused(self):
        with pytest.raises(PredicateError):
            parse(b"x > 1", VARS)


class _Tripwire:
    """Replaces builtins that executing the text would reach; any call fails the test."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in ("eval", "exec", "compile", "__import__", "open"):
            original = getattr(builtins, name)
            monkeypatch.setattr(builtins, name, self._wrap(name, original))

    def _wrap(self, name, original):
        def tripped(*args, **kwargs):
            if name == "__import__" and not str(args[0]).startswith(("os", "subprocess")):
                return original(*args, **kwargs)  # unrelated lazy imports stay possible
            self.calls.append(name)
            raise AssertionError(f"{name} reached")

        return tripped


INJECTIONS = [
    "x.__class__ > 1",
    "x.__class__.__bases__[0].__subclasses__() > 0",
    "open('f') > 0",
    'open("f").read() > 0',
    "x() > 1",
    "x > 1 & x()",
    "__import__('os').system('true') > 0",
    "__import__ > 0",
    "__builtins__ > 0",
    "__class__ > 0",
    "x > __debug__",
    "x[0] > 1",
    "x > y[1:2]",
    "lambda: 1",
    "(lambda: x)() > 1",
    "lambda > 1",
    "'x' > 1",
    '"x" == x',
    "x == 'a'",
    "x > 1; import os",
    "x > 1 ; x < 2",
    "x > \\\n1",
    "x\\x41 > 1",
    "x > 1 # comment",
    "x > 1 if y else 0",
    "[x > 1]",
    "{x > 1}",
    "x > 1, y > 2",
    "x @ y > 1",
    "x ** 2 > 1",
    "x + 1 > 1",
    "x > 1 and y > 1",
    "not (x > 1)",
    "x is None",
    "x > True",
    "f'{x}' > 1",
    "x :=1",
    "ｘ > 1",
    "x > １",
    "x > ²",
    "x > 0x10",
    "x > 1_000",
    "x > 1j",
    "x\x00 > 1",
    "\u200bx > 1",
    "x > 1 & ~x",
    "`x` > 1",
    "$x > 1",
    "x > 1 !",
]


class TestInjection:
    @pytest.mark.parametrize("text", INJECTIONS)
    def test_refused_and_nothing_executed(self, text, monkeypatch):
        wire = _Tripwire(monkeypatch)
        with pytest.raises(PredicateError):
            parse(text, VARS)
        assert wire.calls == []

    @pytest.mark.parametrize("name", ["__class__", "__import__", "__x"])
    def test_dunder_names_refused_even_if_declared(self, name):
        with pytest.raises(PredicateError, match="names starting with '__'"):
            parse(f"{name} > 1", [name])

    def test_depth_limit(self):
        ok = "(" * MAX_DEPTH + "x > 1" + ")" * MAX_DEPTH
        assert str(parse(ok, VARS)) == "x > 1"
        with pytest.raises(PredicateError, match=f"nesting deeper than {MAX_DEPTH} levels"):
            parse("(" + ok + ")", VARS)
        with pytest.raises(PredicateError, match="nesting deeper"):
            parse("~" * (MAX_DEPTH + 1) + "(x > 1)", VARS)
        with pytest.raises(PredicateError, match="nesting deeper"):
            parse("(" * 10_00 + "x > 1" + ")" * 10_00, VARS)

    def test_length_limit(self):
        long_ok = " & ".join(["x > 1"] * ((MAX_LENGTH + 3) // 8))
        assert len(long_ok) <= MAX_LENGTH
        assert parse(long_ok, VARS).evaluate({"x": np.array([2.0, 0.0])}).tolist() == [
            True,
            False,
        ]
        with pytest.raises(PredicateError, match=f"the limit is {MAX_LENGTH}"):
            parse("x > 1" + " " * MAX_LENGTH, VARS)
        with pytest.raises(PredicateError, match="limit"):
            parse("x > " + "9" * 100_000, VARS)

    def test_source_never_calls_eval(self):
        import inspect

        import zagg.checks.predicate as module

        source = inspect.getsource(module)
        assert not re.search(r"(?<![\w.])(eval|exec|compile)\s*\(", source)
        assert "literal_eval" not in source and "import ast" not in source


# ------------------------------------------------------------- brute force + hypothesis

_NUMPY_OPS = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


def _literal():
    return st.one_of(
        st.integers(-5, 5),
        st.floats(-5, 5, allow_nan=False, allow_infinity=False),
        st.sampled_from([0.5, -0.5, 1e-3, 2.5e2]),
    )


def _operand():
    return st.one_of(
        st.sampled_from(VARS).map(lambda v: ("var", v)), _literal().map(lambda v: ("num", v))
    )


def _leaf():
    return st.tuples(st.just("cmp"), st.sampled_from(sorted(_NUMPY_OPS)), _operand(), _operand())


def _tree():
    return st.recursive(
        _leaf(),
        lambda kids: st.one_of(
            st.tuples(st.just("not"), kids),
            st.tuples(st.just("and"), st.lists(kids, min_size=2, max_size=3)),
            st.tuples(st.just("or"), st.lists(kids, min_size=2, max_size=3)),
        ),
        max_leaves=12,
    )


def _render(tree, spaced: bool) -> str:
    """Text for a tree, fully parenthesised so the reference needs no precedence rules."""
    sp = " " if spaced else ""
    kind = tree[0]
    if kind == "cmp":
        _, op, a, b = tree
        side = [s[1] if s[0] == "var" else repr(s[1]) for s in (a, b)]
        return f"{side[0]}{sp}{op}{sp}{side[1]}"
    if kind == "not":
        return f"~({_render(tree[1], spaced)})"
    join = f"{sp}&{sp}" if kind == "and" else f"{sp}|{sp}"
    return "(" + join.join(f"({_render(t, spaced)})" for t in tree[1]) + ")"


def _reference(tree, arrays, shape):
    kind = tree[0]
    if kind == "cmp":
        _, op, a, b = tree
        left = arrays[a[1]] if a[0] == "var" else a[1]
        right = arrays[b[1]] if b[0] == "var" else b[1]
        return np.broadcast_to(_NUMPY_OPS[op](left, right), shape)
    if kind == "not":
        return ~_reference(tree[1], arrays, shape)
    parts = [_reference(t, arrays, shape) for t in tree[1]]
    out = parts[0]
    for p in parts[1:]:
        out = (out & p) if kind == "and" else (out | p)
    return out


_ARRAYS = _arrays(n=301, seed=42)


class TestEquivalence:
    @pytest.mark.parametrize("seed", range(5))
    def test_hand_written_numpy(self, seed):
        a = _arrays(seed=seed)
        x, y, h = a["x"], a["y"], a["h_li"]
        land, ocean = a["signal_conf_land"], a["signal_conf_ocean"]
        cases = {
            "x < y": x < y,
            "~(x >= y) & h_li > 100": ~(x >= y) & (h_li_gt := h > 100),
            "x != x": x != x,
            "x == x | y == y": (x == x) | (y == y),
            "(land >= 2 | ocean >= 2) & ~(x < 0) | y <= -1": ((land >= 2) | (ocean >= 2)) & ~(x < 0)
            | (y <= -1),
            "-1 < x & x < 1 & ~(y == 0)": (-1 < x) & (x < 1) & ~(y == 0),
            "~~(h_li > 50.5) | 3 >= y": ~~(h > 50.5) | (3 >= y),
        }
        assert h_li_gt.dtype == bool
        renamed = {"land": land, "ocean": ocean, "x": x, "y": y, "h_li": h}
        for text, expect in cases.items():
            p = parse(text, renamed)
            np.testing.assert_array_equal(p.evaluate(renamed), expect, err_msg=text)

    @settings(max_examples=300, deadline=None)
    @given(_tree(), st.booleans())
    def test_matches_reference_and_round_trips(self, tree, spaced):
        text = _render(tree, spaced)
        p = parse(text, VARS)
        shape = (301,)
        expect = _reference(tree, _ARRAYS, shape)
        got = p.evaluate(_ARRAYS)
        np.testing.assert_array_equal(got, expect)
        again = parse(str(p), VARS)
        assert again == p and str(again) == str(p)
        np.testing.assert_array_equal(again.evaluate(_ARRAYS), got)

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet="xy<>=!&|~() .-0123456789e_", max_size=30))
    def test_arbitrary_text_parses_or_refuses_cleanly(self, text):
        try:
            p = parse(text, VARS)
        except PredicateError as err:
            assert err.position is None or 0 <= err.position <= max(len(text), MAX_LENGTH)
            return
        assert isinstance(p, Predicate)
        assert parse(str(p), VARS) == p
