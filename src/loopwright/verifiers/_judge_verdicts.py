"""The judge's worker and verdicts, the last piece of its program's text (``_harness`` joins the
pieces in order into ``HARNESS``): the worker started (``Worker``, a fresh interpreter told the
candidate and never a test's expected values), its protocol (``send``, ``read``: an answer out
of turn, too long or too late stops it, ``Garbled``, ``Silent``), each judged test decided from
the values it answers (``judge``, ``decide``), a test the judge cannot decide run whole in it
and marked self-reported, or refused under ``judged_only`` (``self_reported``), and the loop
over the tests that reports each result line.
"""

JUDGE_VERDICTS = r"""# --- the worker: a fresh interpreter, told the candidate and never a test's expected values --
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
def self_reported(i, why, theirs=False):
    if judged_only:
        msg = "not judged: " + why + " (judged_only refuses a self-reported verdict)"
        if theirs:
            # the candidate's code or answer made the test undecidable: its failure, decided
            return failed(i, msg + ": the candidate's doing, a failure")
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
    if p is None and FORM[i]:
        return self_reported(i, "the candidate binds the function under test where the judge cannot read it (not a `def` or an assignment of its code)", theirs=True)
    if p is None:
        return self_reported(i, "the test is not `assert EXPR` (or a `check(candidate)` of such asserts) over calls of the candidate's with literal arguments")
    result = decide(i, p)
    if result is None:
        result = self_reported(i, "a value the test compares is not plain data", theirs=True)
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
