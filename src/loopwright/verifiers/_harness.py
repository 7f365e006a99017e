"""The child program a sandboxed run starts (``python -I -S -B -c _HARNESS``): limits, audit
hook and the tests run one by one, each result reported as a JSON line."""

# The child. It is passed with ``-c`` (no file to tamper with) and reads its job from stdin.
# Everything it needs is imported before the audit hook goes in.
_HARNESS = r"""
import ast, builtins, io, json, os, resource, signal, sys, time, traceback
MAX = 2000
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
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
os.close(devnull)
def candidate_stdout():
    return io.TextIOWrapper(os.fdopen(1, "wb", buffering=0, closefd=False), write_through=True)
cand_out = candidate_stdout()
sys.stdout = sys.stderr = cand_out
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
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
setlim(resource.RLIMIT_NPROC, lim["processes"])
emit({"isolation": iso})
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
fired = [None]
def alarm(signum, frame):
    fired[0] = "wall" if signum == signal.SIGALRM else "cpu"
    raise TimeoutError("TIMEOUT")
signal.signal(signal.SIGALRM, alarm)
signal.signal(signal.SIGPROF, alarm)
def clip(s):
    s = str(s)
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
preamble, code, tests = job["preamble"], job["code"], job["tests"]
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
sys.addaudithook(hook)
ns = {"__name__": "__sandbox__", "__builtins__": builtins}
for i, test in enumerate(tests):
    reset_output()
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
        emit({"i": i, "passed": True, "seconds": time.perf_counter() - t0})
        continue
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
    emit({"i": i, "passed": False, "actual": clip(actual), "error": error, "seconds": seconds})
emit({"done": True})
os._exit(0)
"""
