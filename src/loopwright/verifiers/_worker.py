"""The sandbox's worker: the only process that runs candidate code (``python -I -S -B -c
WORKER``, started by the judge in ``_harness``). It is told the candidate, and per test either
the calls to evaluate (a judged test: it answers their values as plain data, never seeing the
expected ones) or the whole test (a self-reported one: it answers pass or fail itself)."""

# Helpers both processes use: clipping, describing an exception, the per-test timers.
WORKER_COMMON = r"""
import ast, builtins, io, json, os, resource, signal, sys, time
MAX = 2000
fired = [None]
def alarm(signum, frame):
    fired[0] = "wall" if signum == signal.SIGALRM else "cpu"
    raise TimeoutError("TIMEOUT")
def clip(s):
    try:
        s = str(s)
    except BaseException:  # (an int past str()'s digit limit, a broken __str__): not shown
        s = "(a value of type %s that cannot be shown)" % type(s).__name__
    return s if len(s) <= MAX else s[:MAX] + "...[%d more characters]" % (len(s) - MAX)
def describe(exc):
    try:
        return describe_(exc)
    except BaseException:  # the harness must outlive any exception the candidate makes
        return clip(type(exc).__name__)
def describe_(exc):
    try:
        msg = str(exc)
    except BaseException:
        msg = ""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith("<test ") or name == "<candidate>":
            # tb_lineno is None for an instruction with no line (a loop's back-edge, hit by
            # the timer): "%d" would raise here and kill the child, failing every test.
            line = tb.tb_lineno
            where = " (%s line %s)" % (name.strip("<>"), "?" if line is None else line)
        tb = tb.tb_next
    return clip(type(exc).__name__ + where + (": " + msg if msg else ""))
def text(exc):
    try:
        return clip(str(exc) or type(exc).__name__)
    except BaseException:  # an exception whose __str__ raises must not kill the harness
        return clip(type(exc).__name__)
def timed(fn, seconds, wall):
    # The limit is CPU time (ITIMER_PROF: this process's user + system time), so a verdict
    # does not depend on how loaded the machine is; the wall-clock timer is a generous
    # backstop for a candidate that waits without computing (sleep, a blocked read).
    # Both timers repeat, so a candidate that catches the TimeoutError is hit again.
    fired[0] = None
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.05)
    signal.setitimer(signal.ITIMER_REAL, wall, 0.5)
    try:
        return fn()
    finally:
        disarm()
def disarm():
    while True:  # a timer may fire while it is being disarmed
        try:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        except TimeoutError:
            continue
def limit_note():
    if fired[0] == "cpu":
        return " [CPU-time limit of %gs per test]" % per_test
    if fired[0] == "wall":
        return " [wall-clock backstop of %gs per test]" % per_wall
    return ""
"""

_WORKER_BODY = r"""
# fd 0 brings the judge's requests, fd 1 takes the answers, fd 2 is output.txt. The candidate
# may read or write these as it likes: what it can send is its answers, no more.
req = os.fdopen(os.dup(0), "rb")
rep = os.fdopen(os.dup(1), "wb")
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
os.close(devnull)
cand = os.dup(2)
os.dup2(cand, 1)
job = json.loads(req.readline().decode("utf-8"))
cand_r = job["cand_r"]
try:
    resource.setrlimit(resource.RLIMIT_NPROC, (job["processes"], job["processes"]))
except (ValueError, OSError):
    pass
def answer(obj):
    rep.write(json.dumps(obj).encode("utf-8") + b"\n")
    rep.flush()
def reset_output():
    # Each test starts with the output as the first one did (a test that closed or replaced
    # stdout must not fail the next ones) and with the whole file-size limit: what earlier
    # tests printed is cut to its tail (all the parent reads), or a chatty test would fail the
    # later ones with EFBIG.
    try:
        os.dup2(cand, 1)
        os.dup2(cand, 2)
        size = os.fstat(cand).st_size
        if size > 4 * MAX:
            tail = os.pread(cand_r, MAX, size - MAX)
            os.ftruncate(cand, 0)
            os.lseek(cand, 0, os.SEEK_SET)  # shared with fds 1 and 2
            os.write(cand, tail)
        global cand_out
        if cand_out.closed:
            cand_out = candidate_stdout()
        sys.stdout = sys.stderr = cand_out
    except BaseException:
        pass
def candidate_stdout():
    return io.TextIOWrapper(os.fdopen(1, "wb", buffering=0, closefd=False), write_through=True)
cand_out = candidate_stdout()
sys.stdout = sys.stderr = cand_out
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
signal.signal(signal.SIGALRM, alarm)
signal.signal(signal.SIGPROF, alarm)
def plain(v, depth=0):
    # A value as tagged JSON the judge rebuilds from plain types only: whatever the candidate
    # returns, the judge compares data, never an object whose __eq__ is the candidate's.
    if depth > 100:
        raise ValueError("nested too deeply")
    t = type(v)
    if v is None:
        return ["N"]
    if t is bool:
        return ["B", v]
    if t is int:
        return ["i", hex(v)]
    if t is float:
        return ["f", v.hex()]
    if t is complex:
        return ["c", v.real.hex(), v.imag.hex()]
    if t is str:
        return ["s", v]
    if t is bytes:
        return ["y", v.hex()]
    if t in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "S", frozenset: "F"}[t]
        return [tag, [plain(x, depth + 1) for x in v]]
    if t is dict:
        return ["d", [[plain(k, depth + 1), plain(x, depth + 1)] for k, x in v.items()]]
    if getattr(t, "__module__", "") == "numpy" and hasattr(v, "item") and getattr(v, "shape", 0) == ():
        return plain(v.item(), depth)  # a numpy scalar, as a plain number
    raise TypeError("a %s is not plain data" % t.__name__)
def call_expr(test):
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    t = tree.body[0].test
    if isinstance(t, ast.Compare):
        t = t.left
    return compile(ast.Expression(t), "<test>", "eval")
preamble, code = job["preamble"], job["code"]
per_test = job["test_timeout_s"]
per_wall = job["test_wall_s"]
try:
    pre_c = compile(preamble, "<preamble>", "exec")
    code_c = compile(code, "<candidate>", "exec")
    compile_error = None
except BaseException as exc:
    pre_c = code_c = None
    compile_error = exc
sys.dont_write_bytecode = True
if job.get("site"):
    sys.path.append(job["site"])  # the allowed packages, and nothing else installed
    # Vetted code is imported before the hook: numpy loads its libraries with ctypes, which
    # the hook refuses the candidate (a later ctypes call from it is still refused).
    for name in job["preload"]:
        try:
            __import__(name)
        except BaseException:
            pass  # the candidate's own import reports it
HOME = os.path.realpath(os.getcwd())
MYPID = str(os.getpid())
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
def inside(path):
    if isinstance(path, int):
        return True
    try:
        p = os.fsdecode(path)
    except Exception:
        return False
    real = os.path.realpath(os.path.join(HOME, p))
    return real == HOME or real.startswith(HOME + os.sep)
def proc_ok(path):
    if isinstance(path, int):
        return True
    try:
        joined = os.path.join(HOME, os.fsdecode(path))
        raw = os.path.normpath(joined)
        # realpath too (of the unnormalised path: ".." after a link is taken from the link's
        # target): /proc/self/root/proc/<pid> and /proc/self/cwd/../.. lead elsewhere than
        # their text. A relative path under a dir_fd still escapes: the namespaces are the
        # boundary, this hook is a second layer.
        real = os.path.realpath(joined)
    except Exception:
        return False
    for p in (raw, real):
        if p.startswith("/proc/"):
            head = p.split("/")[2]
            if head.isdigit() and head != MYPID:
                return False
    return True
DENY_PREFIX = ("socket.", "ctypes.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
               "os.kill", "os.killpg", "signal.pthread_kill")
DENY = {"subprocess.Popen", "os.system", "os.forkpty", "pty.spawn", "os.startfile",
        "_posixsubprocess.fork_exec", "os.setuid", "sys.settrace", "sys.setprofile"}
PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
               "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree",
               "shutil.copyfile", "shutil.move", "os.mkfifo", "os.mknod", "os.chdir"}
def why(event, args):
    if event.startswith("socket."):
        return "network access is not allowed in the sandbox (%s)" % event
    if event.startswith("ctypes."):
        return "ctypes is not allowed in the sandbox (%s)" % event
    if event in DENY or event.startswith(DENY_PREFIX):
        return "process creation and control are not allowed in the sandbox (%s)" % event
    if event == "open" and args:
        path, mode, flags = (list(args) + [None, None])[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE)
        if writes and not inside(path):
            return "writing outside the sandbox directory is not allowed: %r" % (path,)
        if not proc_ok(path):
            return "reading other processes' /proc entries is not allowed: %r" % (path,)
        return None
    if event in PATH_EVENTS:
        for a in args[:2]:
            if isinstance(a, (str, bytes, os.PathLike)) and not inside(a):
                return "%s outside the sandbox directory is not allowed: %r" % (event, a)
    return None
def hook(event, args):
    reason = why(event, args)
    if reason is not None:
        raise PermissionError("sandbox: " + reason)
del job
sys.addaudithook(hook)
ns = {"__name__": "__sandbox__", "__builtins__": builtins}
def failed(exc):
    error = describe(exc)
    if isinstance(exc, TimeoutError) and str(exc) == "TIMEOUT":
        return "TIMEOUT", clip(error + limit_note())
    return text(exc), error
def shown_plain(v):
    try:
        shown = clip(v)
    except BaseException as exc:  # (an int past str()'s digit limit, a broken __str__)
        shown = text(exc)
    try:
        return {"value": plain(v), "text": shown}
    except BaseException:
        return {"value": None, "text": shown}
def values(i, groups, script):
    # A judged test: run the candidate, then each assert's calls in turn, answering their
    # values and waiting for the judge's word before the next assert's.
    t0 = time.perf_counter()
    def run_all():
        if compile_error is not None:
            raise compile_error
        exec(pre_c, ns)
        exec(code_c, ns)
        for k, calls in enumerate(groups):
            exprs = []
            for src, line in calls:
                tree = ast.parse(src, mode="eval")
                ast.increment_lineno(tree, line - 1)
                exprs.append(compile(tree, "<test %d>" % i, "eval"))
            got = [shown_plain(eval(e, ns)) for e in exprs]
            answer({"i": i, "g": k, "values": got, "seconds": time.perf_counter() - t0})
            if k + 1 < len(groups):
                word = req.readline()
                if not word or json.loads(word.decode("utf-8")).get("more") is not True:
                    return
    try:
        timed(run_all, per_test, per_wall)
    except BaseException as exc:
        actual, error = failed(exc)
        if script and isinstance(exc, AssertionError):
            actual = error  # (a script has no one call to show: as run_test says it)
        return {"i": i, "actual": actual, "error": error, "seconds": time.perf_counter() - t0}
    return None
def run_test(i, test):
    # A self-reported test: the whole test runs here, as before stop 54, and says so.
    t0 = time.perf_counter()
    try:
        if compile_error is not None:
            raise compile_error
        test_c = compile(test, "<test %d>" % i, "exec")
        def run_one():
            exec(pre_c, ns)
            exec(code_c, ns)
            exec(test_c, ns)
        timed(run_one, per_test, per_wall)
        return {"i": i, "passed": True, "seconds": time.perf_counter() - t0}
    except BaseException as exc:
        error = describe(exc)
        if isinstance(exc, TimeoutError) and str(exc) == "TIMEOUT":
            actual = "TIMEOUT"
            error = clip(error + limit_note())
        else:
            actual = text(exc) if not isinstance(exc, AssertionError) else None
    seconds = time.perf_counter() - t0
    expr = None if compile_error is not None else call_expr(test)
    if actual == "TIMEOUT":
        expr = None  # re-running the call would only time out again, at the same cost
    if expr is not None:
        try:
            def get_output():
                exec(pre_c, ns)
                exec(code_c, ns)
                return eval(expr, ns)
            actual = clip(timed(get_output, per_test, per_wall))
        except TimeoutError as exc:
            actual = "TIMEOUT" if str(exc) == "TIMEOUT" else text(exc)
        except BaseException as exc:
            actual = text(exc)
    elif actual is None:
        actual = error
    return {"i": i, "passed": False, "actual": clip(actual), "error": error, "seconds": seconds}
while True:
    line = req.readline()
    if not line:
        os._exit(0)
    ask = json.loads(line.decode("utf-8"))
    reset_output()
    if "groups" in ask:
        reply = values(ask["i"], ask["groups"], ask.get("script") is True)
    else:
        reply = run_test(ask["i"], ask["test"])
    try:
        if reply is not None:
            answer(reply)
    except BaseException:
        os._exit(3)  # the candidate broke the answer pipe: the judge sees the end
"""

WORKER = WORKER_COMMON + _WORKER_BODY
