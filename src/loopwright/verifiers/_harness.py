"""The program a sandboxed run starts (``python -I -S -B -c _HARNESS``): the judge. It sets
the boundary's last pieces and the limits, starts the worker (``_worker``), the one process that
runs candidate code, and decides each test's verdict itself from the values the worker answers
(stop 54): the candidate cannot write a result line, read an expected value or patch the
comparison. A test the judge cannot decide runs whole in the worker, marked ``self_reported``.
"""

import ast
import functools
import importlib

from ._worker import _COMMON

STAR_MODULES = (
    *("math", "cmath", "typing", "collections", "itertools", "functools", "operator"),
    *("string", "re", "heapq", "bisect", "fractions", "decimal", "statistics", "random"),
    *("copy", "dataclasses", "enum", "datetime", "json"),
)
"""The standard modules whose ``from M import *`` in a preamble the judge resolves (pure:
importing one runs no code of the task's or the candidate's); any other star import of the
preamble's leaves every test self-reported (its names are unknown to the judge)."""


@functools.lru_cache(maxsize=32)
def preamble_stars(preamble: str) -> dict[str, list[str]]:
    """The names each ``from M import *`` of ``preamble`` binds, M one of ``STAR_MODULES``,
    read in this interpreter (for a sandbox that runs it: another reads them itself)."""
    try:
        tree = ast.parse(preamble)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, list[str]] = {}
    for n in ast.walk(tree):
        if not (isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)):
            continue
        if n.level or n.module not in STAR_MODULES:
            continue
        mod = importlib.import_module(n.module)
        names = getattr(mod, "__all__", None)
        if names is None:
            names = [k for k in vars(mod) if not k.startswith("_")]
        out[n.module] = sorted(str(k) for k in names)
    return out


# Passed with ``-c`` (no file to tamper with); it reads its job from stdin.
_HARNESS = (
    _COMMON
    + r"""
job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
def emit(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()
def unescape(text):
    # a mount point as /proc/self/mountinfo writes it: a space as \040, a backslash as \134
    parts = text.split("\\")
    return parts[0] + "".join(chr(int(p[:3], 8)) + p[3:] for p in parts[1:])
def private_fs():
    # Under unshare the host's file system is the child's, and nobody (or root) may write where
    # anyone may: a held-out run's candidate could leave what it holds in /tmp for the next
    # run's. In this mount namespace of our own: every mount read-only, a fresh tmpfs on each
    # directory anyone may write, the work directory bound back writable. Before output.txt
    # is opened (a file open for writing makes its mount refuse to become read-only).
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def mount(src, dst, fstype, flags, data=None):
        enc = lambda v: None if v is None else os.fsencode(v)
        if libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
            raise OSError(ctypes.get_errno(), "mount on %s" % dst)
    RDONLY, NOSUID, NODEV, NOEXEC, REMOUNT, BIND = 1, 2, 4, 8, 32, 4096
    home = os.path.realpath(os.getcwd())
    mount(home, home, None, BIND)  # a mount of its own, kept writable
    wfd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split() for line in fh]
    failed = 0
    for f in mounts:
        point = unescape(f[4])
        if point == home or point == "/proc" or point.startswith("/proc/"):
            continue
        flags = REMOUNT | BIND | RDONLY
        for name, bit in (("nosuid", NOSUID), ("nodev", NODEV), ("noexec", NOEXEC)):
            if name in f[5].split(","):
                flags |= bit
        try:
            mount(None, point, None, flags)
        except OSError:
            failed += 1
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        if os.path.isdir(d) and not os.path.islink(d):
            mount("tmpfs", d, "tmpfs", NOSUID | NODEV, "mode=1777,size=64m")
    os.makedirs(home, exist_ok=True)  # (in a fresh tmpfs, where home was under one)
    mount("/proc/self/fd/%d" % wfd, home, None, BIND)
    os.chdir(home)
    os.close(wfd)
    return "read-only, private /tmp" if not failed else "private /tmp, %d mount(s) left writable" % failed
fs = None
if job["boundary"] == "unshare" and os.geteuid() == 0:
    try:
        fs = private_fs()
    except Exception as exc:
        fs = "host (%s)" % exc
cand = os.open("output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
cand_r = os.open("output.txt", os.O_RDONLY)
os.dup2(cand, 1)
os.dup2(cand, 2)
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
os.close(devnull)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # (KeyboardInterrupt: the worker's to send)
iso = {"boundary": job["boundary"], "network": "audit-hook", "user": "unchanged"}
if fs is not None:
    iso["filesystem"] = fs
if job["netns"]:
    iso["network"] = "namespace"
elif job["isolate"] and os.geteuid() == 0:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x40000000) == 0:
            iso["network"] = "namespace"
    except Exception:
        pass
uid, gid = job["uid"], job["gid"]
lim = job["limits"]
def setlim(which, value):
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        pass
setlim(resource.RLIMIT_CORE, 0)
setlim(resource.RLIMIT_AS, lim["memory_mb"] * 1024 * 1024)
setlim(resource.RLIMIT_CPU, lim["cpu_s"])
setlim(resource.RLIMIT_FSIZE, lim["file_mb"] * 1024 * 1024)
setlim(resource.RLIMIT_NOFILE, lim["open_files"])
if uid is not None and os.geteuid() == 0:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    iso["user"] = "nobody"
# Nothing of this process may be read or written by the worker (the same user, nobody): not
# dumpable, its /proc entries (memory, descriptors: the result pipe) are root's.
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
except Exception:
    pass
iso["verdict"] = "judge" if os.geteuid() != 0 else "judge (worker keeps root: not separated)"
emit({"isolation": iso})
per_test = job["test_timeout_s"]
per_wall = job["test_wall_s"]
# The judge's timers are its own: a SIGALRM or SIGPROF the worker sends it (pidfd_send_signal
# where both are the same user) raised a TimeoutError wherever the judge was, killing it with a
# traceback. Only a signal past the judge's own deadline counts.
deadline = [None]
def judge_alarm(signum, frame):
    d = deadline[0]
    if d is not None and (time.process_time() >= d[0] if signum == signal.SIGPROF else time.monotonic() >= d[1]):
        alarm(signum, frame)
def judge_timed(fn, seconds, wall):
    deadline[0] = (time.process_time() + seconds, time.monotonic() + wall)
    try:
        return timed(fn, seconds, wall)
    finally:
        deadline[0] = None
signal.signal(signal.SIGALRM, judge_alarm)
signal.signal(signal.SIGPROF, judge_alarm)
# --- which tests the judge decides: assert EXPR [, MSG] over the candidate's calls -------
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
judged_only = job["judged_only"]
# --- the worker: a fresh interpreter, told the candidate and never a test's expected values --
env = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
os.set_inheritable(cand_r, True)
class Worker:
    # Started with posix_spawn: subprocess would cost the judge 20 ms of imports a check. Its
    # fds: 0 the requests, 1 the answers, 2 output.txt, cand_r; every other one is close-on-exec.
    def __init__(self, argv):
        r_req, w_req = os.pipe()
        r_rep, w_rep = os.pipe()
        acts = [(os.POSIX_SPAWN_DUP2, r_req, 0), (os.POSIX_SPAWN_DUP2, w_rep, 1),
                (os.POSIX_SPAWN_DUP2, cand, 2)]
        self.pid = os.posix_spawn(argv[0], argv, env, file_actions=acts)
        os.close(r_req)
        os.close(w_rep)
        self.stdin = os.fdopen(w_req, "wb")
        self.stdout = os.fdopen(r_rep, "rb")
        self.rc = None
    def wait(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.rc is None:
            pid, status = os.waitpid(self.pid, 0 if end is None else os.WNOHANG)
            if pid:
                self.rc = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > end:
                return None
            else:
                time.sleep(0.01)
        return self.rc
    def kill(self):
        if self.rc is None:
            os.kill(self.pid, signal.SIGKILL)
try:
    worker = Worker([sys.executable, "-I", "-S", "-B", "-c", job["worker"]])
except OSError as exc:
    os.write(2, ("sandbox: could not start the worker: %s\n" % exc).encode())
    os._exit(1)
# After the worker started: RLIMIT_NPROC counts every process of the user (nobody), those of
# other sandboxes too; the worker sets it for itself before any candidate code.
setlim(resource.RLIMIT_NPROC, lim["processes"])
wjob = {k: job[k] for k in ("code", "preamble", "test_timeout_s", "test_wall_s", "site", "preload")}
wjob["cand_r"] = cand_r
wjob["processes"] = lim["processes"]
tests = job["tests"]
job = None  # (the judge keeps its own copy in `tests` and `plans`)
class Garbled(Exception):
    # The worker answered what is not the answer due (the candidate can write on the answer
    # pipe): nothing it says after may be taken for the answer to the question asked, so the
    # judge stops it at once (else each later test reads the previous one's answer, or both
    # wait) and fails this test and every later one, saying why.
    pass
# An answer line longer than this is not read whole (a worker that never ends its line would
# fill the judge's memory, whose limit is the worker's).
MAX_LINE = lim["memory_mb"] * 1024 * 1024 // 8
class Silent(Garbled):
    # The worker did not answer in time: its own timers are the candidate's to disarm
    # (signal.setitimer), and the judge waited until the whole run's timeout, every later test
    # with it. The judge's deadline: twice the worker's wall-clock backstop, and the start.
    pass
WAIT = 2 * per_wall + 10.0
def read(i, g=None, wait=WAIT):
    # The worker's next answer for test i (assert g): None when it has ended.
    try:
        line = judge_timed(lambda: worker.stdout.readline(MAX_LINE + 1), wait, wait)
    except TimeoutError:
        raise Silent("no answer within %gs" % wait) from None
    if not line:
        return None
    if len(line) > MAX_LINE:
        raise Garbled("an answer longer than %d bytes" % MAX_LINE)
    try:
        reply = json.loads(line.decode("utf-8"))
    except Exception:  # (not JSON, or nested past json's recursion limit)
        raise Garbled("not an answer") from None
    if not isinstance(reply, dict):
        raise Garbled("not an answer")
    if reply.get("i") != i or ("values" in reply and reply.get("g") != g):
        raise Garbled("out of turn: not the answer for test %d" % i)
    return reply
def worker_ended():
    # The worker died or left: report as the one process did (its exit code, or its signal).
    rc = worker.wait(timeout=per_wall + 5)
    if rc is None:
        worker.kill()
        rc = worker.wait()
    if rc < 0 and os.getpid() == 1:
        # a namespace's init ignores a signal it sends itself: report as bwrap does, 128 + N
        os._exit(128 - rc)
    if rc < 0:
        try:
            signal.signal(-rc, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), -rc)
    os._exit(rc)
def failed(i, msg):
    return {"i": i, "passed": False, "actual": msg, "error": msg, "seconds": 0.0}
def judge(i, p, g, reply):
    # One assert decided from the worker's reply: a result, True (it held) or None (a value
    # is not plain data).
    vals = reply.get("values")
    if not isinstance(vals, list) or len(vals) != len(g["calls"]):
        if isinstance(reply.get("error"), str):  # the candidate raised, or ran out of time
            return {"i": i, "passed": False, "actual": clip(reply.get("actual")),
                    "error": clip(reply["error"]), "seconds": seconds(reply)}
        raise Garbled("not an answer: %d value(s) for %d call(s)" % (
            len(vals) if isinstance(vals, list) else 0, len(g["calls"])))
    env_ = dict(SAFE)
    env_.update(MODULES)
    env_.update(p["consts"])
    for k, v in enumerate(vals):
        if not isinstance(v, dict):
            raise Garbled("not an answer: a value is not an object")
        if v.get("value") is None:
            return None  # not plain data: the judge cannot compare it
        try:
            # timed: a set of ints whose hashes collide costs the worker one write on the
            # answer pipe and the judge quadratic time, outside any deadline of its own
            env_["_v%d" % k] = judge_timed(lambda: rebuild(v["value"]), per_test, per_wall)
        except TimeoutError:
            raise Garbled("not an answer: a value the judge could not rebuild in time") from None
        except Exception:
            raise Garbled("not an answer: a value is not plain data") from None
    g_ = {"__builtins__": {}, **env_}
    try:
        judge_timed(lambda: exec(g["stmt"], g_), per_test, per_wall)
        return True
    except BaseException as exc:
        error = describe(exc)
        if not isinstance(exc, AssertionError):
            actual = text(exc)
        elif p["script"]:
            actual = error  # (a script has no one call whose value to show)
        elif g["hole"] is not None:
            actual = vals[int(g["hole"][2:])].get("text")
        else:
            try:
                actual = judge_timed(lambda: eval(g["left"], g_), per_test, per_wall)
            except BaseException as exc2:
                actual = text(exc2)
    return {"i": i, "passed": False, "actual": clip(actual), "error": error,
            "seconds": seconds(reply)}
def seconds(reply):
    s = reply.get("seconds")
    return s if type(s) is float else 0.0
def send(obj):
    try:
        worker.stdin.write(json.dumps(obj).encode("utf-8") + b"\n")
        worker.stdin.flush()
    except OSError:
        pass
def decide(i, p):
    # The worker evaluates one assert's calls at a time and waits: after a failing assert
    # it stops, as the script would have (a later call that loops or raises is not run).
    send({"i": i, "groups": [g["calls"] for g in p["groups"]], "script": p["script"]})
    last = len(p["groups"]) - 1
    for k, g in enumerate(p["groups"]):
        reply = read(i, k)
        if reply is None:
            worker_ended()
        result = judge(i, p, g, reply)
        if result is True:
            if k < last:
                send({"more": True})
            continue
        if k < last and (result is None or "values" in reply):
            send({"more": False})  # the worker waits for a word
        return result
    return {"i": i, "passed": True, "seconds": seconds(reply)}
def self_reported(i, why):
    if judged_only:
        msg = "not judged: " + why + " (judged_only refuses a self-reported verdict)"
        return dict(failed(i, msg), not_judged=True)  # decided here, never run: refused
    send({"i": i, "test": tests[i]})
    reply = read(i, wait=WAIT + per_wall)  # (it may run the call again, to show its value)
    if reply is None:
        worker_ended()
    return {"i": i, "passed": reply.get("passed") is True, "actual": clip(reply.get("actual")),
            "error": None if reply.get("error") is None else clip(reply.get("error")),
            "seconds": seconds(reply), "self_reported": True}
try:
    worker.stdin.write(json.dumps(wjob).encode("utf-8") + b"\n")
    worker.stdin.flush()
except OSError:
    pass
wjob = None
def run(i, p):
    if p is None:
        return self_reported(i, "the test is not `assert EXPR` (or a `check(candidate)` of such asserts) over calls of the candidate's with literal arguments")
    result = decide(i, p)
    if result is None:
        result = self_reported(i, "a value the test compares is not plain data")
    return result
stopped = None
for i, test in enumerate(tests):
    if stopped is not None:
        emit(failed(i, "not run: the worker was stopped at test %d (%s)" % stopped))
        continue
    try:
        emit(run(i, plans[i]))
    except Garbled as exc:
        worker.kill()
        worker.wait()
        stopped = (i, str(exc))
        if isinstance(exc, Silent):
            late = failed(i, "the worker gave %s (its timers disarmed?): the worker was stopped" % exc)
            late["actual"] = "TIMEOUT"
            emit(late)
            continue
        emit(failed(i, "the worker's answer could not be read (%s): the worker was stopped" % exc))
try:
    worker.kill()
    worker.wait()  # (reaped: its CPU time is the judge's children's)
except OSError:
    pass
emit({"done": True})
os._exit(0)
"""
)
