"""The program a sandboxed run starts (``python -I -S -B -c HARNESS``): the judge. It sets
the boundary's last pieces and the limits, starts the worker (``_worker``), the one process that
runs candidate code, and decides each test's verdict itself from the values the worker answers
(stop 54): the candidate cannot write a result line, read an expected value or patch the
comparison. A test the judge cannot decide runs whole in the worker, marked ``self_reported``.
"""

import ast
import functools
import importlib

from ._judge_plans import JUDGE_PLANS
from ._judge_verdicts import JUDGE_VERDICTS
from ._worker import WORKER_COMMON

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


# The judge's first piece: its job read, the boundary's last pieces (a private file system under
# unshare, the network namespace), the limits, the user dropped, its own timers.
_JUDGE_SETUP = r"""
job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
def emit(obj):
    out.write(json.dumps(obj) + "\n")
    out.flush()
def unescape(text):
    # a mount point as /proc/self/mountinfo writes it: a space as \040, a backslash as \134
    parts = text.split("\\")
    return parts[0] + "".join(chr(int(p[:3], 8)) + p[3:] for p in parts[1:])
def passable(path, last=0o001):
    # whether nobody reaches path: every directory above it o+x, it o+x (o+rx: a directory)
    p = os.path.realpath(path)
    try:
        if os.stat(p).st_mode & last != last:
            return False
        while p != "/":
            p = os.path.dirname(p)
            if not os.stat(p).st_mode & 0o001:
                return False
    except OSError:
        return False
    return True
def reveal(mount, paths, flags):
    # The interpreter (its prefix, the allowed packages) behind a directory nobody may not pass
    # (/root/.pyenv: /root is 0700): a tmpfs (0755, root's) over the first such directory,
    # hiding the rest of it, and each path bound back into it read-only; the host unchanged.
    held, over = [], []
    for path in paths:
        if any(path == h or path.startswith(h.rstrip("/") + "/") for h, _ in held):
            continue  # (bound back with a directory above it: a package in the prefix's)
        up = [q for q in (os.path.dirname(path),) if q]
        while up[-1] != "/":
            up.append(os.path.dirname(up[-1]))
        shut = [q for q in reversed(up) if os.path.isdir(q) and not os.stat(q).st_mode & 0o001]
        if not shut or not os.path.exists(path):
            continue
        held.append((path, os.open(path, os.O_PATH)))
        if not any(shut[0] == q or shut[0].startswith(q.rstrip("/") + "/") for q in over):
            over.append(shut[0])
    for d in over:
        mount("tmpfs", d, "tmpfs", flags, "mode=0755,size=1m")
    for path, fd in held:
        if os.path.isdir("/proc/self/fd/%d" % fd):
            os.makedirs(path, 0o755, exist_ok=True)
        elif not os.path.lexists(path):  # (opened to write where it is, read-only: EROFS)
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
            open(path, "a").close()
        mount("/proc/self/fd/%d" % fd, path, None, 4096)  # MS_BIND
        mount(None, path, None, 32 | 4096 | 1 | flags)  # MS_REMOUNT | MS_BIND | MS_RDONLY
        os.close(fd)
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
    reveal(mount, job["reach"], NOSUID | NODEV)
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
# Nobody must run the interpreter and read its standard library here (the parent predicted it
# from the files' modes; the bind-backs above or bwrap's own directories give the way): where
# not, the judge keeps root, and says so in this first line, before any candidate code runs.
if uid is not None and not (
    passable(sys.executable) and passable(os.path.dirname(os.__file__), 0o005)
):
    uid = None
    iso["user"] = "unchanged (the interpreter is out of nobody's reach)"
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
"""

# Passed with ``-c`` (no file to tamper with); it reads its job from stdin. One program, its
# pieces joined in order: what both processes share (``_worker.WORKER_COMMON``), the judge's setup,
# its reading of the tests it can decide (``_judge_plans``), the worker started and each test's
# verdict (``_judge_verdicts``).
HARNESS = WORKER_COMMON + _JUDGE_SETUP + JUDGE_PLANS + JUDGE_VERDICTS
