"""What the model's actions may write (SPEC §11): the sandbox modes, the path rule the file
tools follow, and the kernel mechanism that confines code_run's processes.

    sandbox = Sandbox("workspace-write", roots=[...], network=True)
    places = sandbox.places(workspace, memory_dir)      # where writes are allowed
    sandbox.check_write(path, places)                    # file tools: ToolError outside
    jail = sandbox.confinement(places)                   # code_run: None when unconfined
    argv = jail.wrap(argv, python=True); env = jail.env(env)

Mechanisms, the first that works: Landlock when the kernel has signal scoping (ABI 6,
Linux >= 6.12), else bubblewrap, else Landlock without it, else none: then code_run is not
confined (one warning says so) and only the file tools' rule holds. With ``network: false``
bubblewrap comes first (its own network namespace cuts every protocol; Landlock denies TCP
only, and a warning says so when it is used). ``$GA_SANDBOX_MECHANISM`` (landlock, bwrap or
none) forces one, for tests.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from llmcore.base import ConfigError
from tools import ToolError

MODES = ("read-only", "workspace-write", "full-access")
APPROVALS = ("never", "on-request", "always")
MECHANISMS = ("landlock", "bwrap", "none")
DEFAULT_MODE = "workspace-write"
MECHANISM_ENV = "GA_SANDBOX_MECHANISM"
SETTINGS = ("sandbox", "approval", "writable_roots", "network")  # keys of config agent:
TEMP_DIR = "tmp"  # in the runtime's private folder: the children's $TMPDIR
TEMP_VARS = ("TMPDIR", "TMP", "TEMP")
PROBE_SECONDS = 5  # a bubblewrap that cannot start a sandbox in this long is not used
# the Landlock wrapper, run as `python -I -S -c LANDLOCK ARGS`: the module is imported, so
# its compiled form is cached (a script named on the command line is compiled every time);
# isolated and without site, so nothing from the workspace, $PYTHONPATH (the writable
# memory folder) or site-packages is imported before the process is confined
LANDLOCK = ("import sys; sys.path.insert(0, {folder!r}); import landlock; del sys.path[0]; "
            "landlock.main(sys.argv[1:])").format(folder=str(Path(__file__).absolute().parent))
RUNTIME_CODE = Path(os.path.realpath(__file__)).parent.parent  # the modules ga imports
ISOLATED = ("-I", "-S")  # the wrapper's interpreter: no environment, user site or site
BWRAP_BASE = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--cap-drop", "ALL",
              "--unshare-pid", "--unshare-ipc", "--die-with-parent")
BACKGROUND_HINTS = ("&", "nohup", "setsid", "disown", "Popen", "fork", "daemon")
TCP_ONLY = ("network: false blocks only TCP under Landlock: UDP and other protocols still "
            "reach the network from code_run (install bubblewrap to cut them all: apt-get "
            "install bubblewrap)")
NO_MECHANISM = ("no sandbox mechanism here (Landlock or bubblewrap): code_run is not "
                "confined; the file tools still refuse writes outside the workspace")


@dataclass(frozen=True)
class Settings:
    """``agent: {sandbox, approval, writable_roots, network}`` and the flags. ``approval``
    None: on-request where a person can answer, never elsewhere."""

    sandbox: str = DEFAULT_MODE
    approval: str | None = None
    writable_roots: tuple[str, ...] = ()
    network: bool = True

    @classmethod
    def from_dict(cls, agent: dict, path: str | None = None) -> Settings:
        """The sandbox keys of a config's ``agent:`` section, validated (ConfigError)."""
        values: dict[str, Any] = {}
        for key, allowed in (("sandbox", MODES), ("approval", APPROVALS)):
            if key in agent:
                values[key] = choice(agent[key], allowed, path, f"agent.{key}")
        roots = agent.get("writable_roots", [])
        if not isinstance(roots, list) or not all(isinstance(r, str) and r for r in roots):
            raise ConfigError(path, "agent.writable_roots", f"must be a list of folders, got "
                              f"{roots!r}")
        values["writable_roots"] = tuple(roots)
        network = agent.get("network", True)
        if not isinstance(network, bool):
            raise ConfigError(path, "agent.network", f"must be true or false, got {network!r}")
        return cls(network=network, **values)


def choice(value: Any, allowed: tuple[str, ...], path: str | None, field: str) -> str:
    """``value`` when it is one of ``allowed``; else a ConfigError naming the field (and the
    close match of a misspelling)."""
    if value in allowed:
        return value
    import difflib

    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise ConfigError(path, field, f"must be one of {', '.join(allowed)}, got {value!r}{hint}")


# ---- the mechanism ------------------------------------------------------------------------
def bwrap_works(network: bool = True) -> bool:
    """Whether bubblewrap is installed and can start a sandbox here (user namespaces or root,
    a /proc it may mount)."""
    import subprocess

    exe = shutil.which("bwrap")
    if exe is None:
        return False
    argv = [exe, *BWRAP_BASE, *(() if network else ("--unshare-net",)), "--", "true"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=PROBE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def detect(network: bool = True) -> tuple[str, str | None]:
    """(mechanism, a warning for the user or None). ConfigError when ``$GA_SANDBOX_MECHANISM``
    names one that is unknown or does not work here."""
    from tools import landlock

    forced = os.environ.get(MECHANISM_ENV, "").strip()
    abi = landlock.abi()
    if forced:
        choice(forced, MECHANISMS, None, f"${MECHANISM_ENV}")
        if forced == "landlock" and abi < 1:
            raise ConfigError(None, f"${MECHANISM_ENV}", "Landlock is not available here")
        if forced == "bwrap" and not bwrap_works(network):
            raise ConfigError(None, f"${MECHANISM_ENV}", "bubblewrap (bwrap) cannot start a "
                              "sandbox here; install it: apt-get install bubblewrap")
        if forced == "none":
            return forced, NO_MECHANISM
        return forced, TCP_ONLY if forced == "landlock" and not network else None
    if not network and bwrap_works(network):
        return "bwrap", None
    if abi >= landlock.SCOPE_ABI:
        return "landlock", None if network else TCP_ONLY
    if bwrap_works(network):
        return "bwrap", None
    if abi >= 1:
        return "landlock", _old_landlock_warning(abi, network)
    return "none", NO_MECHANISM


def _old_landlock_warning(abi: int, network: bool) -> str:
    from tools import landlock

    warning = (f"Landlock here is ABI {abi}: code_run can still signal other processes "
               "(Linux >= 6.12 or bubblewrap closes that)")
    if network:
        return warning
    if abi < landlock.NET_ABI:
        return warning + "; network: false cannot cut its network (install bubblewrap)"
    return f"{warning}; {TCP_ONLY}"


def run_temp_dir(create: bool = True) -> Path | None:
    """The run's own temporary folder (children's $TMPDIR), removed with the runtime.
    ``create=False``: only when the runtime has its folder already (None otherwise)."""
    from tools import procs

    base = procs.runtime_dir() if create else procs.started_dir()
    if base is None:
        return None
    path = base / TEMP_DIR
    path.mkdir(exist_ok=True)
    return path


@dataclass(frozen=True)
class Confinement:
    """How one code_run is confined: the mechanism, the folders it may write, network."""

    mechanism: str
    writable: tuple[str, ...]
    network: bool = True

    def wrap(self, argv: list[str], python: bool = False) -> list[str]:
        """``argv`` started confined. ``python``: argv is ``[python, flags…, SCRIPT]``."""
        if self.mechanism == "landlock":
            opts = [x for path in self.writable for x in ("--write", path)]
            opts += [] if self.network else ["--no-net"]
            if python:
                return [argv[0], *ISOLATED, *argv[1:-1], "-c", LANDLOCK, *opts, "--python",
                        argv[-1]]
            return [sys.executable, *ISOLATED, "-c", LANDLOCK, *opts, "--", *argv]
        if self.mechanism == "bwrap":
            binds = [x for path in self.writable for x in ("--bind-try", path, path)]
            net = [] if self.network else ["--unshare-net"]
            return [shutil.which("bwrap") or "bwrap", *BWRAP_BASE, *binds, *net, "--", *argv]
        return list(argv)

    def env(self, env: dict[str, str], temp: Path) -> dict[str, str]:
        """The child's environment with the run's temporary folder as its temp dir."""
        return {**env, **dict.fromkeys(TEMP_VARS, str(temp))}

    def background_note(self, code: str) -> str | None:
        """Under bubblewrap's PID namespace a background process ends with its command:
        said when the code looks like it starts one."""
        if self.mechanism != "bwrap" or not any(h in code for h in BACKGROUND_HINTS):
            return None
        return ("under the bubblewrap sandbox, background processes end when this command "
                "ends; keep a service in the foreground of its own code_run call")


class Sandbox:
    """The sandbox mode in force (the REPL may change it), with the writable roots and
    network setting of the config; the mechanism is found at first use."""

    def __init__(self, mode: str = DEFAULT_MODE, roots: Iterable[str | Path] = (),
                 network: bool = True) -> None:
        self.mode = choice(mode, MODES, None, "sandbox")
        self.roots = tuple(Path(os.path.expanduser(str(r))) for r in roots)
        self.network = network
        self._mechanism: tuple[str, str | None] | None = None

    @property
    def confining(self) -> bool:
        return self.mode != "full-access"

    def mechanism(self) -> tuple[str, str | None]:
        """(landlock | bwrap | none, a warning or None); found once."""
        if self._mechanism is None:
            self._mechanism = detect(self.network)
        return self._mechanism

    def places(self, workspace: Path, memory: Path, create: bool = True) -> tuple[Path, ...]:
        """The folders writes may go to (real paths): none under full-access (all may).
        ``create=False`` (file tools): the run's temp folder only if it exists already."""
        temp = run_temp_dir(create)
        if self.mode == "read-only":
            found: list[Path | None] = [temp]
        elif self.mode == "workspace-write":
            found = [workspace, memory, temp, *self.roots]
        else:
            return ()
        return tuple(dict.fromkeys(Path(os.path.realpath(p)) for p in found if p is not None))

    def exposed_code(self, workspace: Path, memory: Path) -> str | None:
        """The warning when this runtime's own code lies in a folder confined code may write:
        changed there, the next module ga (or the Landlock wrapper) imports would run
        unconfined. None when it does not (an installed copy, another workspace)."""
        if not self.confining:
            return None
        for place in self.places(workspace, memory, create=False):
            if RUNTIME_CODE == place or RUNTIME_CODE.is_relative_to(place):
                return (f"ga's own code ({RUNTIME_CODE}) is inside {place}, which code_run "
                        "may write: code that changes it would run outside the sandbox when "
                        "ga loads it; work in another folder (-C) or run an installed ga")
        return None

    def allows(self, path: Path, places: tuple[Path, ...]) -> bool:
        """Whether the file tools may write ``path``: its real path (symlinks and ``..``
        resolved) lies in one of ``places``; under read-only they write nothing."""
        if self.mode == "full-access":
            return True
        if self.mode == "read-only":
            return False
        real = Path(os.path.realpath(path))
        return any(real == place or real.is_relative_to(place) for place in places)

    def check_write(self, path: Path, places: tuple[Path, ...], escalate_hint: bool) -> None:
        """Refuse (ToolError) a file-tool write that the mode does not allow."""
        if self.allows(path, places):
            return
        if self.mode == "read-only":
            why = f"sandbox read-only: no file is written ({path})"
        else:
            shown = ", ".join(map(str, places))
            why = (f"sandbox {self.mode}: {os.path.realpath(path)} is outside the writable "
                   f"places ({shown})")
        hint = ("; if it must be written, call again with escalate: true and a reason (the "
                "user is asked)" if escalate_hint else "; approval is never, so nothing is "
                "asked: write inside them instead")
        raise ToolError(f"refused: {why}{hint}")

    def confinement(self, places: tuple[Path, ...]) -> Confinement | None:
        """How code_run is confined now; None under full-access."""
        if not self.confining:
            return None
        mechanism, _ = self.mechanism()
        return Confinement(mechanism, tuple(map(str, places)), self.network)

    def annotate(self, result: dict, jail: Confinement, places: tuple[Path, ...], code: str,
                 escalate_hint: bool) -> None:
        """Notes for the model on a confined run's result: a failed run ends with the mode
        and the writable places; under bubblewrap, that background processes end with it."""
        if jail.mechanism == "none":
            return  # nothing confined it
        note = jail.background_note(code)
        if note:
            result["background"] = note
        if result.get("exit_code") not in (None, 0):
            result["sandbox"] = self.failure_note(places, escalate_hint)

    def failure_note(self, places: tuple[Path, ...], escalate_hint: bool) -> str:
        """The line ending a confined code_run that failed: the mode and where it may write."""
        where = ", ".join(map(str, places))
        note = f"[sandbox {self.mode}] this code could write only in: {where}"
        if not self.network:
            note += "; no network"
        if escalate_hint:
            note += ". If it must write elsewhere, run it again with escalate: true and a reason"
        return note

    def describe(self) -> str:
        """``workspace-write (landlock)``: the mode and, when it confines, the mechanism."""
        if not self.confining:
            return self.mode
        return f"{self.mode} ({self.mechanism()[0]})"
