"""The test suite's own checks can fail. Read from its source (``ast``), no test asserts
nothing, asserts a value that is always true, swallows a failed assertion, holds a
``pytest.raises`` block that nothing in can raise, stops before its end, or is skipped without
a reason. Each finder is also run over a sample that has its defect (a check of the checks)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# Calls that check: pytest's, and a mock's ``assert_called_with`` and kin (``assert...``).
_CHECKING_CALLS = frozenset({"raises", "warns", "fail", "deprecated_call"})
# What a ``pytest.raises`` block may hold and still raise nothing: names, constants, a name
# bound to either, ``pass``. Anything else runs code that can raise: a call, a
# lookup, an operator, a comparison (``a < b``), an unpacking (``a, b = pair``), an import, a
# loop over an iterator, a ``with``, a formatted value (a list of what can raise missed these).
_INERT = (
    ast.Pass,
    ast.Expr,
    ast.Assign,
    ast.AnnAssign,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Store,
    ast.Break,
    ast.Continue,
)

Nodes = Sequence[tuple[str, ast.AST]]  # every node of some modules, with where it is


@pytest.fixture(scope="module")
def suite() -> Nodes:
    """Every node of every module under tests/, walked once for all the finders. Module-scoped,
    not cached for the process: its ~620,000 nodes die with this module instead of slowing
    every later full garbage collection in the worker (a test that counts live objects after a
    ``gc.collect()`` ran 1.4 s a call with them alive)."""
    files = {
        str(p.relative_to(TESTS)): p.read_text(encoding="utf-8")
        for p in sorted(TESTS.rglob("*.py"))
    }
    return tuple((f, n) for f, text in files.items() for n in ast.walk(ast.parse(text, f)))


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _calls(fn: ast.AST) -> set[str]:
    return {_called(c) for c in ast.walk(fn) if isinstance(c, ast.Call)}


def _checks_itself(fn: ast.AST) -> bool:
    for n in ast.walk(fn):
        if isinstance(n, ast.Assert):
            return True
        if isinstance(n, ast.Raise) and "AssertionError" in ast.unparse(n.exc or n):
            return True
        if isinstance(n, ast.Call):
            name = _called(n)
            if name in _CHECKING_CALLS or name.startswith("assert"):
                return True
    return False


def _defs(nodes: Nodes) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for where, n in nodes:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            yield where, n


def _checking_helpers(nodes: Nodes) -> set[str]:
    """The names of the functions defined that check, themselves or through another such
    function (a helper a test calls to assert for it)."""
    calls: dict[str, set[str]] = {}  # a function's name: the names its bodies call
    found: set[str] = set()
    for _where, fn in _defs(nodes):
        calls.setdefault(fn.name, set()).update(_calls(fn))
        if _checks_itself(fn):
            found.add(fn.name)
    grew = True
    while grew:
        grew = False
        for name, called in calls.items():
            if name not in found and called & found:
                found.add(name)
                grew = True
    return found


def _tests(nodes: Nodes) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for where, fn in _defs(nodes):
        if Path(where).name.startswith("test_") and fn.name.startswith("test_"):
            yield where, fn


def _at(where: str, node: ast.AST) -> str:
    return f"{where}:{getattr(node, 'lineno', '?')}"


def _always_true(node: ast.expr) -> bool:
    """An expression whose truth does not depend on anything run: a true constant, a
    non-empty literal container, an f-string with text of its own."""
    if isinstance(node, ast.Constant):
        return bool(node.value)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys)
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and v.value for v in node.values)
    return False


def idle_tests(nodes: Nodes) -> list[str]:
    """Tests with no assert, no ``pytest.raises``/``fail``, no mock ``assert_*`` and no call
    to a helper that checks."""
    helpers = _checking_helpers(nodes)
    return [
        f"{_at(w, fn)} {fn.name}"
        for w, fn in _tests(nodes)
        if not _checks_itself(fn) and not _calls(fn) & helpers
    ]


def always_true_asserts(nodes: Nodes) -> list[str]:
    """``assert (x, "why")`` (a tuple), ``assert "text"``, ``assert x if c else True`` (a
    branch that cannot fail), ``assert a or True``."""
    bad = []
    for where, n in nodes:
        if isinstance(n, ast.Assert):
            t = n.test
            parts = [t.body, t.orelse] if isinstance(t, ast.IfExp) else []
            if isinstance(t, ast.BoolOp) and isinstance(t.op, ast.Or):
                parts = t.values
            if _always_true(t) or any(_always_true(p) for p in parts):
                bad.append(f"{_at(where, n)} {ast.unparse(n)[:80]}")
    return bad


# A handler that passes the exception it binds to one of these keeps it (for a later check).
_KEEPING_CALLS = frozenset({"append", "add", "put", "put_nowait", "set_exception"})
# What catches a failed ``assert``: AssertionError, and the classes above it.
_CATCHING_ASSERTS = frozenset({"AssertionError", "Exception", "BaseException"})


def _kept(h: ast.ExceptHandler) -> bool:
    """The handler keeps the exception it binds for a later check: appends or puts it
    somewhere, or assigns it (a thread's ``errors.append(exc)``, asserted empty after the
    join)."""
    if h.name is None:
        return False
    for m in ast.walk(ast.Module(body=h.body, type_ignores=[])):
        given: list[ast.expr] = []
        if isinstance(m, ast.Call) and _called(m) in _KEEPING_CALLS:
            given = m.args
        elif isinstance(m, ast.Assign | ast.AnnAssign) and m.value is not None:
            given = [m.value]
        if any(isinstance(g, ast.Name) and g.id == h.name for g in given):
            return True
    return False


def swallowed_assertions(nodes: Nodes) -> list[str]:
    """An ``except`` catching ``AssertionError`` (or ``Exception``, or everything) around an
    ``assert`` that neither raises again nor keeps the exception for a later check: the
    failed check is caught and dropped."""
    bad = []
    for where, n in nodes:
        if not isinstance(n, ast.Try):
            continue
        asserts = any(isinstance(m, ast.Assert) for s in n.body for m in ast.walk(s))
        for h in n.handlers:
            caught = {"BaseException"} if h.type is None else set()
            if h.type is not None:
                caught = {ast.unparse(e) for e in getattr(h.type, "elts", [h.type])}
            raises = any(isinstance(m, ast.Raise) for s in h.body for m in ast.walk(s))
            if asserts and caught & _CATCHING_ASSERTS and not raises and not _kept(h):
                bad.append(_at(where, h))
    return bad


def inert_raises_blocks(nodes: Nodes) -> list[str]:
    """A ``pytest.raises`` block with nothing in it that could raise (``_INERT``)."""
    bad = []
    for where, n in nodes:
        if not isinstance(n, ast.With | ast.AsyncWith):
            continue
        ctx = [i.context_expr for i in n.items]
        if not any(isinstance(c, ast.Call) and _called(c) == "raises" for c in ctx):
            continue
        if all(isinstance(m, _INERT) for s in n.body for m in ast.walk(s)):
            bad.append(_at(where, n))
    return bad


def early_returns(nodes: Nodes) -> list[str]:
    """A ``return`` in a test's own body with statements after it: those never run."""
    return [_at(w, s) for w, fn in _tests(nodes) for s in fn.body[:-1] if isinstance(s, ast.Return)]


def unexplained_skips(nodes: Nodes) -> list[str]:
    """``pytest.skip()``, ``pytest.xfail()`` or a ``skip``/``skipif``/``xfail`` mark without a
    reason (``skipif``'s arguments are its conditions: its reason is the keyword)."""
    bad = []
    for where, n in nodes:
        if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Attribute):
            continue
        f = n.func
        if f.attr not in ("skip", "skipif", "xfail") or ast.unparse(f.value) not in (
            "pytest",
            "pytest.mark",
        ):
            continue
        reason = any(k.arg == "reason" for k in n.keywords)
        if not (reason or (n.args and f.attr != "skipif")):
            bad.append(_at(where, n))
    return bad


FINDERS: dict[Callable[[Nodes], list[str]], str] = {
    # each finder, and a test module that has its defect (once)
    idle_tests: "def test_idle():\n    x = 1\n",
    always_true_asserts: "def test_t(v):\n    assert (v == 1, 'why')\n    assert v if v else True\n",
    swallowed_assertions: "def test_s(v):\n    try:\n        assert v\n    except AssertionError:\n"
    "        pass\n    try:\n        assert v\n    except Exception as exc:\n        print(exc)\n",
    inert_raises_blocks: "def test_r():\n    with pytest.raises(KeyError):\n        x = 1\n",
    early_returns: "def test_e(v):\n    return\n    assert v\n",
    unexplained_skips: "@pytest.mark.skipif(True)\ndef test_k(v):\n    pytest.skip()\n",
}


@pytest.mark.parametrize("finder", FINDERS, ids=lambda f: f.__name__)
def test_the_suite_has_no_such_test(finder: Callable[[Nodes], list[str]], suite: Nodes) -> None:
    assert finder(suite) == []


@pytest.mark.parametrize("finder", FINDERS, ids=lambda f: f.__name__)
def test_the_finder_finds_its_defect_in_a_sample(finder: Callable[[Nodes], list[str]]) -> None:
    sample = FINDERS[finder]
    found = finder([("unit/test_sample.py", n) for n in ast.walk(ast.parse(sample))])
    expected = 2 if finder in (always_true_asserts, unexplained_skips, swallowed_assertions) else 1
    assert len(found) == expected, found
    # ...and nothing in a test that checks what it ran
    good = "def test_g(v):\n    with pytest.raises(KeyError):\n        v['k']\n    assert v == 1\n"
    assert finder([("unit/test_sample.py", n) for n in ast.walk(ast.parse(good))]) == []


# Checks that can fail, each in a shape an earlier finder took for its defect: an operator
# other than arithmetic, an unpacking, an import, a loop or a ``with`` over what was given, a
# format in a ``pytest.raises`` block; a thread's assert whose error is kept and checked after.
_CHECKING_SAMPLES = {
    "comparison": "def test_c(a, b):\n    with pytest.raises(TypeError):\n        a < b\n",
    "membership": "def test_m(a, b):\n    with pytest.raises(TypeError):\n        a in b\n",
    "negation": "def test_n(a):\n    with pytest.raises(TypeError):\n        -a\n",
    "unpacking": "def test_u(pair):\n    with pytest.raises(ValueError):\n        a, b = pair\n",
    "augmented": "def test_a(a):\n    with pytest.raises(TypeError):\n        a += 1\n",
    "import": "def test_i():\n    with pytest.raises(ImportError):\n        import nothing_here\n",
    "from_import": "def test_f():\n    with pytest.raises(ImportError):\n"
    "        from loopwright import nothing_here\n",
    "loop": "def test_l(it):\n    with pytest.raises(KeyError):\n        for _ in it:\n"
    "            pass\n",
    "with": "def test_w(cm):\n    with pytest.raises(KeyError):\n        with cm:\n            pass\n",
    "format": "def test_f(v):\n    with pytest.raises(ValueError):\n        f'{v:d}'\n",
    "kept_by_a_thread": "def test_t(v):\n    errors = []\n\n    def work():\n        try:\n"
    "            assert v\n        except BaseException as exc:\n            errors.append(exc)\n\n"
    "    work()\n    assert errors == []\n",
    "kept_in_a_slot": "def test_k(v):\n    got = [None]\n    try:\n        assert v\n"
    "    except AssertionError as exc:\n        got[0] = exc\n    assert got == [None]\n",
}


@pytest.mark.parametrize("sample", _CHECKING_SAMPLES, ids=str)
def test_no_finder_takes_a_check_that_can_fail_for_a_defect(sample: str) -> None:
    nodes = [("unit/test_sample.py", n) for n in ast.walk(ast.parse(_CHECKING_SAMPLES[sample]))]
    assert {f.__name__: f(nodes) for f in FINDERS if f(nodes)} == {}
