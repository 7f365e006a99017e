"""The Ray executor: each run of a batch is one Ray task; its state lives in the shared store.

``run_on_ray`` creates every run in the driver first (idempotent by task key), then submits one
Ray task per run. A task loads the loop spec in its worker (cached per process), opens its own
``Runtime`` on the shared store and resumes the run: it takes the run's lease (a new fencing
token), continues from the last checkpoint, and releases the lease when the run ends or parks.

Why a lost node's runs resume elsewhere without repeating effects:

* Ray re-executes a task whose worker process or node died (``max_retries``; exceptions raised
  by the task itself are not retried). The retry runs on any live node.
* The retry resumes from the run's last durable checkpoint, not from the start. Its lease
  acquisition waits (polling) while the lease of the dead executor is still current: at once
  when that executor was a dead process on the same host, else until ``lease_ttl_s`` passes.
  Every write of the run is fenced by the token, so an executor that was only presumed dead
  (a partitioned node) can no longer commit once the retry holds the lease.
* Effects are journaled in the store (intent before, result after), so the retry returns a
  completed effect's recorded result without running it, and settles one left in doubt by
  the crash with its ``reconcile`` hook (or re-runs it only if it is declared idempotent).

A SQLite store suits a Ray cluster of one host (every worker process opens the same file);
across hosts use the PostgreSQL store (``postgresql://…``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote, urlsplit

from .._engine import RunResult, Runtime
from .._errors import ConfigError, ConflictError, LoopwrightError, StaleLeaseError
from .._loop import Loop
from .._spec import load_spec
from ..store import sqlite_url_path

__all__ = ["RayBatchError", "absolute_store_url", "run_on_ray"]

_INSTALL = "the Ray executor needs Ray: pip install 'loopwright[ray]'"
# A local Ray started here: small enough for a laptop or a 2-core CI box. Results are tiny
# dicts, so the object store needs little memory.
_LOCAL_MAX_CPUS = 8
_LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024


class RayBatchError(LoopwrightError):
    """Some Ray tasks of a batch failed for good (an exception in the task, or a worker lost
    more often than ``max_retries``). The other runs completed; ``results`` holds every run as
    the store has it, in input order, and ``failures`` maps run ids to what went wrong."""

    def __init__(self, failures: Mapping[str, str], results: Sequence[RunResult]) -> None:
        self.failures = dict(failures)
        self.results = list(results)
        first = next(iter(self.failures.items()), ("?", "?"))
        super().__init__(
            f"{len(self.failures)} of {len(self.results)} run(s) failed on Ray "
            f"(run {first[0]}: {first[1]})"
        )

    def __reduce__(
        self,
    ) -> tuple[type[RayBatchError], tuple[dict[str, str], list[RunResult]]]:
        return (type(self), (self.failures, self.results))


def run_on_ray(
    spec_path: str | Path,
    tasks: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    store_url: str,
    *,
    address: str | None = None,
    lease_ttl_s: float = 30.0,
    max_retries: int = 3,
    num_cpus_per_task: float = 0.5,
    on_result: Callable[[RunResult], None] | None = None,
    by: str | None = None,
) -> list[RunResult]:
    """Run one loop over many tasks as Ray tasks; return the results in input order.

    Args:
        spec_path: the loop spec (TOML). Every Ray node must see it, and the files it names,
            at the same absolute path (a shared checkout or image).
        tasks: the task inputs.
        keys: one task key per task; a key that already has a run continues that run (an
            ended run is returned as it is, nothing re-executes).
        store_url: the shared store. A SQLite path is made absolute; it suits one host only.
        address: ``None`` starts a local Ray (or joins the one ``RAY_ADDRESS`` names);
            ``"auto"`` joins the cluster running on this machine; or a cluster's address. An
            already initialised Ray is used as it is (and left running).
        lease_ttl_s: the lease of each run: how long a run whose node was lost waits before
            another node may take it over.
        max_retries: how many times Ray re-executes a task whose worker or node died.
        num_cpus_per_task: Ray CPUs reserved per run (runs wait mostly on models and I/O).
        on_result: called in the driver with each run's result, in completion order.
        by: who starts the runs (their requester, as ``Runtime.create``'s ``by``: with
            separation of duties they cannot approve the runs' requests).

    Raises:
        ConfigError: bad arguments, an invalid spec, Ray missing, or a SQLite store on a
            cluster of more than one node.
        RayBatchError: some Ray tasks failed for good (after every other run finished).
    """
    if len(tasks) != len(keys):
        raise ConfigError(f"got {len(tasks)} task(s) but {len(keys)} key(s)", field="keys")
    if lease_ttl_s <= 0:
        raise ConfigError("must be positive", field="lease_ttl_s")
    if max_retries < 0:
        raise ConfigError("must be zero or more", field="max_retries")
    if num_cpus_per_task <= 0:
        raise ConfigError("must be positive", field="num_cpus_per_task")
    ray = _import_ray()
    spec = str(Path(spec_path).expanduser().resolve())
    loop = load_spec(spec)  # a bad spec fails here, before anything is created or submitted
    url = absolute_store_url(store_url)
    with Runtime(url, lease_ttl_s=lease_ttl_s) as rt:
        run_ids = [
            rt.create(loop, task, task_key=key, by=by)[0].run_id
            for task, key in zip(tasks, keys, strict=True)
        ]
        started = _connect(ray, address)
        try:
            if _is_sqlite(url):
                nodes = [n for n in ray.nodes() if n.get("Alive")]
                if len(nodes) > 1:
                    raise ConfigError(
                        f"a SQLite store is a file on one host, but this Ray cluster has "
                        f"{len(nodes)} nodes; use a PostgreSQL store (postgresql://…)",
                        field="store",
                    )
            remote = ray.remote(
                max_retries=max_retries,
                retry_exceptions=False,
                num_cpus=num_cpus_per_task,
            )(_execute_run)
            by_run = _gather(ray, rt, remote, spec, url, run_ids, lease_ttl_s, on_result)
        finally:
            if started:
                ray.shutdown()
    failures = {rid: why for rid, (_, why) in by_run.items() if why is not None}
    results = [by_run[rid][0] for rid in run_ids]
    if failures:
        raise RayBatchError(failures, results)
    return results


def absolute_store_url(url: str) -> str:
    """The store URL as every Ray worker must see it: a SQLite path made absolute (workers
    do not share the driver's working directory); other URLs unchanged."""
    if "://" not in url:
        if url in ("", ":memory:"):
            raise ConfigError("the Ray executor needs a store file or a server", field="store")
        return str(Path(url).expanduser().resolve())
    path = sqlite_url_path(url)  # open_store's reading: sqlite:///relative.db, %XX decoded
    if path is None:
        return url
    if not path or path == ":memory:":
        raise ConfigError(f"{url!r} names no file", field="store")
    absolute = Path(path).expanduser().resolve()
    query = urlsplit(url).query
    return f"sqlite:///{quote(str(absolute))}" + (f"?{query}" if query else "")


# --- the driver ------------------------------------------------------------------------------
def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(_INSTALL, field="executor") from exc
    return ray


def _is_sqlite(url: str) -> bool:
    return "://" not in url or url.startswith("sqlite:")


def _connect(ray: ModuleType, address: str | None) -> bool:
    """Initialise Ray unless it already is; whether this call started it (and so owns it)."""
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {
        "address": address,
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # A new local instance: sized for this machine, and nothing sent anywhere.
        _check_local_ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        options["num_cpus"] = max(1, min(os.cpu_count() or 1, _LOCAL_MAX_CPUS))
        options["object_store_memory"] = _LOCAL_OBJECT_STORE_BYTES
    try:
        ray.init(**options)
    except ConnectionError as exc:
        raise ConfigError(
            f"cannot reach a Ray cluster at {address!r}: {exc}", field="address"
        ) from exc
    return True


def _check_local_ray() -> None:
    """Recent Ray starts a per-node agent that imports ``opentelemetry.metrics``; when the
    ``opentelemetry`` namespace exists without the API (opentelemetry-proto alone), the agent
    dies and Ray hangs for half a minute before failing. Say so at once instead."""
    recorder = "ray._private.telemetry.open_telemetry_metric_recorder"
    try:
        uses_otel = importlib.util.find_spec(recorder) is not None
        broken = (
            importlib.util.find_spec("opentelemetry") is not None
            and importlib.util.find_spec("opentelemetry.metrics") is None
        )
    except (ImportError, ValueError):
        return
    if uses_otel and broken:
        raise ConfigError(
            "Ray cannot start here: the 'opentelemetry' package has no 'metrics' "
            "(opentelemetry-proto is installed without opentelemetry-api); "
            "pip install opentelemetry-api",
            field="executor",
        )


def _gather(
    ray: ModuleType,
    rt: Runtime,
    remote: Any,
    spec: str,
    url: str,
    run_ids: Sequence[str],
    lease_ttl_s: float,
    on_result: Callable[[RunResult], None] | None,
) -> dict[str, tuple[RunResult, str | None]]:
    """Submit one task per distinct run and collect them in completion order: each run's
    result as the store has it, and why its task failed (``None`` when it did not)."""
    refs = {remote.remote(spec, url, rid, lease_ttl_s): rid for rid in dict.fromkeys(run_ids)}
    pending = list(refs)
    out: dict[str, tuple[RunResult, str | None]] = {}
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                rid = refs[ref]
                why: str | None = None
                try:
                    ray.get(ref)
                except Exception as exc:
                    cause = getattr(exc, "cause", None) or exc
                    why = f"{type(cause).__name__}: {cause}"
                result = rt.result(rid)
                out[rid] = (result, why)
                if on_result is not None:
                    on_result(result)
    except BaseException:
        # Interrupted (or on_result raised): stop what is still queued or running. The runs
        # stay resumable from their checkpoints; running the batch again continues them.
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise
    return out


# --- the worker ------------------------------------------------------------------------------
_LOOPS: dict[tuple[str, int], Loop] = {}


def _loop_for(spec: str) -> Loop:
    """The spec's loop, loaded once per worker process (again if the file changed)."""
    key = (spec, Path(spec).stat().st_mtime_ns)
    loop = _LOOPS.get(key)
    if loop is None:
        loop = _LOOPS[key] = load_spec(spec)
    return loop


def _execute_run(spec: str, store_url: str, run_id: str, lease_ttl_s: float) -> dict[str, Any]:
    """One Ray task: resume the run until it ends or parks. A lease held by an executor that
    is gone (a lost node, not yet expired) is waited out; so is one held by a live executor
    (a duplicate of this task), which either finishes the run or loses its lease."""
    loop = _loop_for(spec)
    poll_s = min(1.0, max(0.05, lease_ttl_s / 10))
    with Runtime(store_url, lease_ttl_s=lease_ttl_s) as rt:
        while True:
            try:
                return rt.resume_sync(run_id, loop).to_dict()
            except (ConflictError, StaleLeaseError):
                time.sleep(poll_s)
