"""The judge's reading of the tests it can decide, a piece of its program's text (``_harness``
joins the pieces in order into ``HARNESS``): which tests are ``assert EXPR [, MSG]`` over calls
of the candidate's function with literal arguments (``literal``, ``folded``, ``is_call``), each
assert's holes for the worker to fill (``Holes``, ``group``), HumanEval's ``check(candidate)``
scripts read as their asserts (``asserts_of``), the names the preamble and the candidate bind
(``bound``, ``one_function``), each test's plan (``plan``) and the worker's tagged answers read
back as plain values (``rebuild``). Runs in the judge, after its setup, before the worker starts.
"""

JUDGE_PLANS = r"""# --- which tests the judge decides: assert EXPR [, MSG] over the candidate's calls -------
# A call of the function under test (one_function), with literal arguments (or such calls), is
# the candidate's: the worker evaluates it and answers its value. The rest of the test (the
# expected values) stays here and is evaluated over those values, plain data only.
SAFE = {n: getattr(builtins, n) for n in (
    "abs", "all", "any", "bool", "bytes", "chr", "complex", "dict", "divmod", "enumerate",
    "filter", "float", "frozenset", "int", "isinstance", "len", "list", "map", "max", "min",
    "ord", "pow", "range", "repr", "reversed", "round", "set", "sorted", "str", "sum",
    "tuple", "type", "zip")}
# `math` in a judged test is the judge's, the standard module's pure functions: the worker's
# (the candidate's to rebind) would compute an expected value, `f(2) == math.sqrt(2)`. So a
# test that uses math without importing it is judged, where it was a NameError.
import math as math_, types
MODULES = {"math": types.SimpleNamespace(**{n: getattr(math_, n) for n in (
    "isclose", "fabs", "sqrt", "isqrt", "floor", "ceil", "trunc", "exp", "log", "log2",
    "log10", "pow", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "hypot", "degrees",
    "radians", "isnan", "isinf", "isfinite", "gcd", "fsum", "copysign", "fmod", "dist", "inf",
    "nan", "pi", "e", "tau")})}
NODES = (ast.Expression, ast.Compare, ast.Call, ast.Name, ast.Attribute, ast.Constant,
         ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.Subscript,
         ast.Slice, ast.keyword, ast.Load, ast.JoinedStr, ast.FormattedValue, ast.operator,
         ast.unaryop, ast.cmpop)
def literal(node):
    try:
        ast.literal_eval(node)
        return True
    except Exception:
        return False
# An argument of literals and arithmetic only (HumanEval's `candidate(3 * 19)`,
# `candidate('abcde' + 'cade')`, `candidate([1, 0**0])`): still a value the test wrote, which
# the worker computes with the built-in types' operators (not the candidate's to rebind).
ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)
def folded(node):
    for n in ast.walk(node):
        if isinstance(n, (ast.BinOp, ast.UnaryOp)):
            if not isinstance(n.op, ARITH):
                return False
        elif not isinstance(n, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Load,
                                ast.operator, ast.unaryop)):
            return False
    return True
def is_call(node):
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    while isinstance(f, ast.Attribute):
        f = f.value
    if not isinstance(f, ast.Name) or f.id in SAFE or (f.id in MODULES and f is not node.func):
        return False
    args = list(node.args) + [k.value for k in node.keywords if k.arg is not None]
    if len(args) != len(node.args) + len(node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
        return False
    # Literal arguments only: a call given another call's value (`isclose(f(x), 0.3)`) may be
    # handed an expected value, which must not reach the worker.
    return all(literal(a) or folded(a) for a in args)
def root(node):
    f = node.func
    while isinstance(f, ast.Attribute):
        f = f.value
    return f.id
class Holes(ast.NodeTransformer):
    def __init__(self, known):
        self.calls, self.roots, self.known = [], set(), known
    def visit_Call(self, node):
        if is_call(node) and root(node) not in self.known:  # (a script's constant is the judge's)
            self.roots.add(root(node))
            self.calls.append([ast.unparse(node), node.lineno])
            return ast.copy_location(ast.Name("_v%d" % (len(self.calls) - 1), ast.Load()), node)
        return self.generic_visit(node)
def group(i, node, known):
    # One assert: its candidate calls (the worker's), the rest compiled here.
    holes = Holes(known)
    node = holes.visit(node)
    names = {"_v%d" % k for k in range(len(holes.calls))}
    # `math` is the judge's only as a module (`math.isclose`): a bare `math(3)` is the
    # candidate's own function of that name, a hole above
    modules = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Attribute)
               and isinstance(n.value, ast.Name) and n.value.id in MODULES}
    for n in ast.walk(node):
        if n is node:
            continue
        if not isinstance(n, NODES):
            return None
        if isinstance(n, ast.Name) and n.id not in names and n.id not in SAFE and id(n) not in modules and n.id not in known:
            return None  # a name of the candidate's (or the test's own): not decidable here
        if isinstance(n, ast.Attribute) and n.attr.startswith("_"):
            return None
        if isinstance(n, ast.Attribute) and id(n.value) in modules and not hasattr(MODULES[n.value.id], n.attr):
            return None  # (math.factorial, or a module of the candidate's named math)
    left = node.test.left if isinstance(node.test, ast.Compare) else node.test
    return {
        "calls": holes.calls,
        "stmt": compile(ast.fix_missing_locations(ast.Module([node], [])), "<test %d>" % i, "exec"),
        "left": compile(ast.fix_missing_locations(ast.Expression(left)), "<test %d>" % i, "eval"),
        "hole": left.id if isinstance(left, ast.Name) and left.id in names else None,
        "roots": holes.roots,
    }
class Rename(ast.NodeTransformer):
    def __init__(self, old, new):
        self.old, self.new = old, new
    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node
def asserts_of(tree):
    # One assert; or HumanEval's script: literal constants, `def check(candidate):` of asserts
    # only, then `check(entry)` - its asserts with `candidate` read as `entry`.
    body = tree.body
    if len(body) == 1 and isinstance(body[0], ast.Assert):
        return body, {}, None
    consts, check = {}, None
    for k, st in enumerate(body):
        if k == len(body) - 1:
            break
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
            continue
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and literal(st.value):
            consts[st.targets[0].id] = ast.literal_eval(st.value)
            continue
        if isinstance(st, ast.FunctionDef) and check is None:
            a = st.args
            if st.decorator_list or a.posonlyargs or a.kwonlyargs or a.vararg or a.kwarg or a.defaults or len(a.args) != 1:
                return None
            stmts = [x for x in st.body if not isinstance(x, ast.Pass) and not (
                isinstance(x, ast.Expr) and isinstance(x.value, ast.Constant))]
            if not stmts or not all(isinstance(x, ast.Assert) for x in stmts):
                return None
            check = (st.name, a.args[0].arg, stmts)
            continue
        return None
    last = body[-1] if body else None
    if check is None or not isinstance(last, ast.Expr) or not isinstance(last.value, ast.Call):
        return None
    call = last.value
    if not (isinstance(call.func, ast.Name) and call.func.id == check[0] and len(call.args) == 1
            and not call.keywords and isinstance(call.args[0], ast.Name)):
        return None
    entry = call.args[0].id
    if entry in consts or entry in SAFE or check[1] in consts:
        return None
    return [Rename(check[1], entry).visit(x) for x in check[2]], consts, entry
# `from M import *` in the preamble binds names no parser sees (stop 55: the candidate could
# rebind `sqrt` of `from math import *`, and the test `assert sqrt(2) == 0` was judged as its
# call). For the standard modules of STAR_MODULES the names are known: read by the host where
# it runs this interpreter (job["stars"]), else the judge imports M itself (pure modules:
# nothing of the candidate's runs, the worker has not started). Any other M: "*", names
# unknown here, and no test's call is judged the candidate's.
def star_names(node):
    if node.level or node.module not in job["star_modules"]:
        return {"*"}
    if node.module in job["stars"]:
        return set(job["stars"][node.module])
    try:
        mod = __import__(node.module)
    except Exception:
        return {"*"}
    names = getattr(mod, "__all__", None)
    return set(names) if names is not None else {n for n in vars(mod) if not n.startswith("_")}
def bound(src, stars=False):
    # The names a program binds where it can be read (None: it does not parse). Only what is
    # written: a name bound otherwise (globals(), builtins) is caught by one_function. With
    # `stars`, a star import's names too ("*": names the judge cannot know).
    try:
        tree = ast.parse(src)
    except Exception:
        return None
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, ast.alias) and n.name != "*":
            names.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.ImportFrom) and stars and any(a.name == "*" for a in n.names):
            names |= star_names(n)
    return names
def one_function(roots, entry):
    # Whose calls the worker may evaluate as the candidate's: the one function under test (a
    # script's entry point), defined by the candidate code and not a name of the preamble's.
    # Any other call is a reference (`sqrt(2)` from the preamble, `Fraction(1, 3)`), which the
    # candidate could rebind to choose the expected value: such a test is not judged.
    if not roots:
        return True
    if len(roots) != 1 or (entry is not None and roots != {entry}) or "*" in PRE:
        return False  # ("*": a star import of the preamble's may have bound it)
    (name,) = roots
    return name not in PRE and (OWN is None or name in OWN)
def plan(i, test):
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    found = asserts_of(tree)
    if found is None:
        return None
    nodes, consts, entry = found
    groups = [group(i, node, consts) for node in nodes]
    if any(g is None for g in groups):
        return None
    if not one_function(set().union(*(g["roots"] for g in groups)), entry):
        return None
    return {"groups": groups, "consts": consts, "script": len(tree.body) > 1}
def rebuild(x, depth=0):
    # The worker's tagged JSON as plain values; anything else is not an answer.
    if depth > 100 or not isinstance(x, list) or not x or not isinstance(x[0], str):
        raise ValueError("not a plain value")
    tag, rest = x[0], x[1:]
    if tag == "N" and not rest:
        return None
    if len(rest) == 1 and tag in ("B", "i", "f", "s", "y"):
        v = rest[0]
        if tag == "B" and type(v) is bool:
            return v
        if tag == "i" and type(v) is str:
            return int(v, 16)
        if tag == "f" and type(v) is str:
            return float.fromhex(v)
        if tag == "s" and type(v) is str:
            return v
        if tag == "y" and type(v) is str:
            return bytes.fromhex(v)
    if tag == "c" and len(rest) == 2 and all(type(v) is str for v in rest):
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if len(rest) == 1 and type(rest[0]) is list:
        items = rest[0]
        kinds = {"l": list, "t": tuple, "S": set, "F": frozenset}
        if tag in kinds:
            return kinds[tag](rebuild(v, depth + 1) for v in items)
        if tag == "d" and all(type(p) is list and len(p) == 2 for p in items):
            return {rebuild(k, depth + 1): rebuild(v, depth + 1) for k, v in items}
    raise ValueError("not a plain value")
PRE = bound(job["preamble"], stars=True) or set()
# (a candidate that does not parse runs nothing: its compile error is each test's verdict)
OWN = bound(job["code"])
plans = [plan(i, t) for i, t in enumerate(job["tests"])]
# Which tests are of the judged form whoever the candidate is (a refused one read again, its
# candidate read as binding the function under test): only a refusal of one of the others
# rests on the test, not_judged (stop 56: a candidate that bound it where no parser sees it,
# `exec("def f…")`, had every test refused and marked, and a held-out failure resting on
# marked tests alone is not counted: it hid its false success).
OWN, own = None, OWN
FORM = [p is not None or plan(i, t) is not None for i, (t, p) in enumerate(zip(job["tests"], plans))]
OWN = own
judged_only = job["judged_only"]
"""
