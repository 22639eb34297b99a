"""``ga batch --ray [ADDRESS]`` (SPEC §14): the same batch on a Ray cluster. Imported only with
``--ray``; Ray is the optional extra ``genericagent[ray]``.

Each task is a Ray task (``--cpus-per-task`` CPUs, fractions allowed) that runs it in its
worker process as the local pool does (``batch_task.run_task``); at most ``--workers`` are in
flight, and ``ray.wait`` streams their results to the driver, which alone writes them. A
task whose worker process or node dies is run once more by Ray, then recorded ``failed``.
``--rpm`` is one ``RequestCap`` in an actor that every task asks before each model request.
The job's runtime environment carries what the workers need: this runtime's code
(``py_modules``, so the nodes need only its dependencies), and in ``env_vars`` the config
file's text and the key variables its profiles name, sealed: Ray writes a job's runtime
environment into its own logs on every node, so the variable holds them XORed with a
one-time pad of random bytes that goes to the workers with the tasks (never logged). No
key goes through the results or any log.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import signal
import threading
import time
from typing import Any

from llmcore.base import ConfigError

from .batch_fork import ROOT
from .batch_pool import RPM_WINDOW_SECONDS, RequestCap

INSTALL = 'pip install "genericagent[ray]"'
CODE = ("agent_loop.py", "ga.py", "frontends", "llmcore", "memory", "sop", "tools")
EXCLUDES = ["__pycache__", "*.pyc"]
SEALED_VAR = "GA_BATCH_SEALED_SECRET"  # config and keys, sealed (children never get it)
CONFIG_NAME = "batch-config.yaml"  # where a worker keeps it: its runtime's private temp dir
PASSED_VARS = ("GA_MODEL", "GA_LANG", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
RETRIES = 1  # a task whose worker dies is run once more
LOCAL = "local"  # ray.init's word for a new local Ray


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(None, "--ray", f"Ray is not installed: {INSTALL}") from None
    return ray


def worker_env(setup: dict) -> dict:
    """What every worker needs from here: the config's text, and each key variable a profile
    names (or the SDK's, for a profile without a key) that is set here."""
    from llmcore.config import DEFAULT_KEY_ENV, config_file, open_config

    home = setup["home"]
    cfg = open_config(setup["config"], home)
    text = config_file(setup["config"], home).read_text(encoding="utf-8") if cfg.path else ""
    names = set(PASSED_VARS) | set(DEFAULT_KEY_ENV.values())
    names |= {p.api_key_env for p in cfg.profiles.values() if p.api_key_env}
    env = {name: os.environ[name] for name in sorted(names) if os.environ.get(name)}
    return {"config": text, "env": env}


def seal(values: dict) -> tuple[str, str]:
    """``values`` as (sealed text, pad): JSON XORed with as many random bytes."""
    data = json.dumps(values).encode()
    pad = secrets.token_bytes(len(data))
    return _b64(_xor(data, pad)), _b64(pad)


def unseal(sealed: str, pad: str) -> dict:
    return json.loads(_xor(base64.b64decode(sealed), base64.b64decode(pad)))


def _xor(data: bytes, pad: bytes) -> bytes:
    mixed = int.from_bytes(data, "big") ^ int.from_bytes(pad, "big")
    return mixed.to_bytes(len(data), "big")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def ray_address(given: str | None) -> str:
    """The cluster to use: ``--ray ADDRESS``, else ``$RAY_ADDRESS`` (Ray's own variable),
    else a new local Ray (never one found lying around)."""
    return given or os.environ.get("RAY_ADDRESS") or LOCAL


def connect(ray: Any, address: str | None, sealed: str) -> None:
    """Join the cluster at ``address`` with the job's runtime environment. Ray's own
    handler for SIGTERM gives way to ours again."""
    address = ray_address(address)
    runtime_env = {"py_modules": [str(ROOT / name) for name in CODE], "excludes": EXCLUDES,
                   "env_vars": {SEALED_VAR: sealed}}
    extra = {"include_dashboard": False} if address == LOCAL else {}
    on_main = threading.current_thread() is threading.main_thread()
    saved = signal.getsignal(signal.SIGTERM) if on_main else None
    try:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False,
                 logging_level=logging.ERROR, **extra)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise ConfigError(None, "--ray", f"cannot use the Ray cluster at {address}: {e}"
                          ) from None
    finally:
        if on_main:
            signal.signal(signal.SIGTERM, saved)


class RayPool:
    """The batch's tasks as Ray tasks, at most ``capacity`` in flight."""

    def __init__(self, address: str | None, setup: dict, workers: int, cpus: float,
                 rpm: int | None) -> None:
        ray = self.ray = import_ray()
        sealed, pad = seal(worker_env(setup))
        connect(ray, address, sealed)
        self.capacity = workers
        self.common = {k: v for k, v in setup.items() if k != "home_named"}
        self.common["pad"] = pad
        if not setup.get("home_named"):
            self.common["home"] = None  # each node's own home
        self.cap = None
        if rpm:
            actor = ray.remote(num_cpus=0)(RequestCap)
            self.cap = actor.remote(rpm, RPM_WINDOW_SECONDS)
        self.task = ray.remote(run_remote).options(num_cpus=cpus, max_retries=RETRIES)
        self.refs: dict[Any, Any] = {}  # in flight: ref -> task id
        self.reason = "interrupted"
        self.counted = 0  # model requests granted so far

    def submit(self, spec: dict) -> None:
        self.refs[self.task.remote(spec, self.common, self.cap)] = spec["id"]

    def wait(self, timeout: float) -> list[tuple[str, Any, Any]]:
        """Results within ``timeout`` seconds. Ray's own calls check for signals and would
        wrap our stop in an error of theirs: a signal waits for the call to return."""
        from .signals import held

        if not self.refs:
            time.sleep(timeout)
            return []
        with held():
            return self._collect(timeout)

    def _collect(self, timeout: float) -> list[tuple[str, Any, Any]]:
        ready, rest = self.ray.wait(list(self.refs), num_returns=1, timeout=timeout)
        if ready and rest:
            ready += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        events = [self._outcome(ref) for ref in ready]
        if self.cap is not None:
            granted = self.ray.get(self.cap.granted.remote())
            events.append(("request", None, granted - self.counted))
            self.counted = granted
        return events

    def _outcome(self, ref: Any) -> tuple[str, Any, Any]:
        task_id = self.refs.pop(ref)
        errors = self.ray.exceptions
        try:
            return "result", task_id, self.ray.get(ref)
        except errors.TaskCancelledError:
            return "lost", task_id, ("interrupted", self.reason)
        except errors.RayTaskError as e:  # our code raised: its message says what
            return "lost", task_id, ("failed", f"{type(e.cause).__name__}: {e.cause}")
        except errors.RayError as e:  # the worker or its node died, twice
            kind = type(e).__name__
            return "lost", task_id, ("failed", f"its Ray worker was lost ({kind}) on both "
                                     f"tries: {str(e).splitlines()[0] if str(e) else kind}")

    def interrupt(self, reason: str) -> None:
        """Ctrl-C in each running task: it aborts and journals its end."""
        self.reason = reason
        for ref in self.refs:
            self.ray.cancel(ref)

    def kill(self) -> None:
        for ref in self.refs:
            self.ray.cancel(ref, force=True)

    def close(self) -> None:
        from .signals import held

        with held():
            self.kill()
            self.ray.shutdown()


# ---- in the Ray worker -----------------------------------------------------------------
def run_remote(spec: dict, common: dict, cap: Any) -> dict:
    """A Ray task: one batch task in this worker process."""
    from .batch_task import Running, run_task

    running = Running()
    wait = (lambda: wait_for_cap(cap, running)) if cap is not None else None
    return run_task(spec, node_common(common), running, None, wait)


def node_common(common: dict) -> dict:
    """The shared settings on this node. The first task in a worker opens the sealed
    variable (taking it out of the environment: no child inherits it), sets the key
    variables and writes the config; the home is the one named, else this node's own."""
    from llmcore.config import home_dir
    from tools.fsutil import atomic_write
    from tools.procs import runtime_dir

    path = runtime_dir() / CONFIG_NAME
    sealed = os.environ.pop(SEALED_VAR, None)
    if sealed is not None:
        opened = unseal(sealed, common["pad"])
        os.environ.update(opened["env"])
        atomic_write(path, opened["config"])
        path.chmod(0o600)
    shared = {k: v for k, v in common.items() if k != "pad"}
    return {**shared, "config": str(path) if path.exists() else None,
            "home": common.get("home") or str(home_dir(None))}


def wait_for_cap(cap: Any, running: Any) -> None:
    """Before a model request: wait for the batch's request cap (or an abort)."""
    import ray

    while not running.aborted.is_set():
        seconds = ray.get(cap.take.remote())
        if seconds <= 0:
            return
        running.aborted.wait(seconds)

