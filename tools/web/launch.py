"""Where the browser comes from: the ``browser:`` config, finding Chromium, launching it
tied to the runtime, and finding the websocket of a browser to attach to.

A launched Chromium runs in its own session with a parent-death signal, from a thread
that lives exactly as long as the child (Linux sends that signal when the *thread* that
forked the child ends). A small watcher process (``watcher.py``) kills the browser and
removes its run folder (temp profile, TMPDIR, log) when the runtime is gone, SIGKILL
included. Nothing of the user's environment but what a browser needs reaches it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from llmcore.base import ConfigError

from .watcher import kill_group

log = logging.getLogger("ga.web")

MODES = ("launch", "attach")
DEBIAN_CHROMIUM = "/usr/lib/chromium/chromium"  # the binary; /usr/bin/chromium is a wrapper
PATH_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
EXECUTABLE_ENV = "GA_CHROMIUM"
DEFAULT_CDP_URL = "http://127.0.0.1:9222"
DEFAULT_WINDOW = (1280, 1000)
START_TIMEOUT = 20.0  # seconds for a launched browser to open its DevTools port
START_POLL = 0.01
CLOSE_GRACE = 3.0  # seconds a browser with the user's profile gets to close cleanly
GONE_WAIT = 5.0
VERSION_TIMEOUT = 5.0
LOG_TAIL_CHARS = 600
PR_SET_PDEATHSIG = 1
PORT_FILE = re.compile(r"(\d+)\n(/devtools/browser/[0-9a-f-]{36})")
SOCKET_PATH_MAX = 107  # bytes of a unix socket path (sun_path less its NUL)
RUN_DIR_CHARS = len("/ga-chromium-12345678")
SOCKET_SUFFIX_CHARS = len("/org.chromium.Chromium.123456/SingletonSocket")
FLAGS = (
    "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-breakpad", "--password-store=basic",
    "--disable-blink-features=AutomationControlled", "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
    "--remote-debugging-port=0",
)
ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
            "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
            "XDG_CACHE_HOME", "DBUS_SESSION_BUS_ADDRESS", "FONTCONFIG_PATH", "HTTP_PROXY",
            "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy",
            "all_proxy")
PROFILE_IN_USE = " (is the profile {} open in another browser?)"
INSTALL_HINT = (
    "install Chromium (Debian/Ubuntu: apt-get install chromium), or name a Chrome/Chromium "
    "binary with browser.executable in config.yaml or $GA_CHROMIUM, or attach to your own "
    "Chrome started with --remote-debugging-port=9222 (browser.cdp_url)")


class BrowserUnavailable(Exception):
    """No browser can be started or reached; the message says why and what to do."""

    for_model = True


@dataclass
class BrowserConfig:
    """The ``browser:`` section of config.yaml (SPEC §9)."""

    mode: str | None = None  # launch | attach; default: attach when cdp_url is set
    executable: str | None = None
    cdp_url: str | None = None
    headless: bool | None = None  # default: true without a display
    profile_dir: str | None = None  # kept between runs; default: a temp profile, removed
    window_size: tuple[int, int] = DEFAULT_WINDOW

    @classmethod
    def from_dict(cls, data: dict | None, path: str | None = None) -> BrowserConfig:
        known = [f.name for f in fields(cls)]
        values: dict[str, Any] = {}
        for key, value in (data or {}).items():
            if key not in known:
                raise ConfigError(path, f"browser.{key}",
                                  f"unknown setting; known: {', '.join(known)}")
            if value is not None:
                values[key] = _check(path, key, value)
        return cls(**values)

    @property
    def attach(self) -> bool:
        return (self.mode or ("attach" if self.cdp_url else "launch")) == "attach"

    def is_headless(self) -> bool:
        if self.headless is not None:
            return self.headless
        return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))

    def find_executable(self) -> str:
        """The browser binary to launch, or BrowserUnavailable saying what is missing."""
        named = self.executable or os.environ.get(EXECUTABLE_ENV)
        if named:
            where = "browser.executable" if self.executable else f"${EXECUTABLE_ENV}"
            found = shutil.which(os.path.expanduser(named))
            if not found:
                raise BrowserUnavailable(f"{where} names {named}, which is not an executable "
                                         f"file: {INSTALL_HINT}")
            return found
        if os.access(DEBIAN_CHROMIUM, os.X_OK):
            return DEBIAN_CHROMIUM
        for name in PATH_NAMES:
            found = shutil.which(name)
            if found:
                return found
        raise BrowserUnavailable(f"no Chrome or Chromium found: {INSTALL_HINT}")

    def unavailable_reason(self) -> str | None:
        """Why the web tools cannot be offered, or None when a browser is configured/found."""
        if self.attach:
            return None
        try:
            self.find_executable()
        except BrowserUnavailable as e:
            return str(e)
        return None


def _check(path: str | None, key: str, value: Any) -> Any:
    where = f"browser.{key}"
    if key == "headless":
        if not isinstance(value, bool):
            raise ConfigError(path, where, f"must be true or false, got {value!r}")
        return value
    if key == "window_size":
        return _window_size(path, where, value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, where, f"must be a non-empty string, got {value!r}")
    if key == "mode" and value not in MODES:
        raise ConfigError(path, where, f"{value!r} is not one of {', '.join(MODES)}")
    if key == "cdp_url" and not value.startswith(("http://", "https://", "ws://", "wss://")):
        raise ConfigError(path, where, f"must be http://host:port or a ws:// URL, got {value!r}")
    return value


def _window_size(path: str | None, where: str, value: Any) -> tuple[int, int]:
    parts = value.lower().replace(",", "x").split("x") if isinstance(value, str) else value
    try:
        width, height = (int(p) for p in parts)
        if width < 100 or height < 100:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(path, where, f"must be WIDTHxHEIGHT (e.g. 1280x1000), got {value!r}"
                          ) from None
    return width, height


# ---- launching ---------------------------------------------------------------------------
def _die_with_parent() -> Any:
    """A preexec function: the child gets SIGKILL when its parent thread ends (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def spawn_tied(argv: list[str], name: str, **popen: Any) -> subprocess.Popen:
    """Start ``argv`` in its own session, tied to this process: the thread that forks it
    waits for it, so the parent-death signal fires only when the runtime itself dies."""
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        try:
            box["proc"] = subprocess.Popen(argv, start_new_session=True,
                                           preexec_fn=_die_with_parent(), **popen)
        except OSError as e:
            box["error"] = e
        started.set()
        if "proc" in box:
            box["proc"].wait()

    threading.Thread(target=run, name=f"ga-{name}", daemon=True).start()
    started.wait()
    if "error" in box:
        raise box["error"]
    return box["proc"]


def browser_env(run_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ENV_KEEP}
    env["TMPDIR"] = str(run_dir)  # Chromium's own temp files go where the watcher cleans
    return env


@dataclass
class Launched:
    """A Chromium this runtime started, with its run folder and its watcher."""

    proc: subprocess.Popen
    watcher: subprocess.Popen
    run_dir: Path
    profile: Path
    ws_url: str
    temp_profile: bool

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, graceful: bool = False) -> None:
        """End the browser and its children, remove the run folder, release the watcher."""
        if graceful and self.alive():
            try:
                self.proc.wait(CLOSE_GRACE)
            except subprocess.TimeoutExpired:
                log.warning("the browser did not close in %.0f s; killing it", CLOSE_GRACE)
        kill_group(self.proc.pid)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.watcher.stdin:
            self.watcher.stdin.close()
        try:
            self.watcher.wait(GONE_WAIT)
        except subprocess.TimeoutExpired:
            log.warning("the browser watcher (pid %d) did not exit", self.watcher.pid)

    def log_tail(self) -> str:
        try:
            text = (self.run_dir / "chromium.log").read_text(errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in text.splitlines() if "dbus" not in ln.lower() and ln.strip()]
        return "\n".join(lines)[-LOG_TAIL_CHARS:]


def launch(cfg: BrowserConfig) -> Launched:
    """Start Chromium with a DevTools port; raise BrowserUnavailable when it cannot start."""
    exe = cfg.find_executable()
    run_dir = Path(tempfile.mkdtemp(prefix="ga-chromium-", dir=_short_temp()))
    profile = Path(cfg.profile_dir).expanduser() if cfg.profile_dir else run_dir / "profile"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "DevToolsActivePort").unlink(missing_ok=True)
    # the watcher must outlive a killed runtime to clean up: its own session, no tie
    watcher = subprocess.Popen(
        [sys.executable, "-I", "-S", str(Path(__file__).with_name("watcher.py")), str(run_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    argv = [exe, *FLAGS, f"--user-data-dir={profile}",
            "--window-size={},{}".format(*cfg.window_size)]
    if cfg.is_headless():
        argv.append("--headless")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    argv.append("about:blank")
    with open(run_dir / "chromium.log", "wb") as errlog:
        try:
            proc = spawn_tied(argv, "browser", stdin=subprocess.DEVNULL, stdout=errlog,
                              stderr=errlog, env=browser_env(run_dir), cwd=run_dir)
        except OSError as e:
            _release(watcher, run_dir)
            raise BrowserUnavailable(f"cannot start {exe}: {e.strerror}: {INSTALL_HINT}"
                                     ) from None
    watcher.stdin.write(f"{proc.pid}\n".encode())
    watcher.stdin.flush()
    launched = Launched(proc, watcher, run_dir, profile, "", not cfg.profile_dir)
    launched.ws_url = _wait_port(launched, exe)
    return launched


def _short_temp() -> str | None:
    """The temp dir for the run folder: Chromium puts a unix socket in its TMPDIR, and a
    socket path has at most 107 bytes, so a long $TMPDIR gives way to /tmp."""
    base = tempfile.gettempdir()
    if len(base) + RUN_DIR_CHARS + SOCKET_SUFFIX_CHARS <= SOCKET_PATH_MAX:
        return None
    return "/tmp" if os.access("/tmp", os.W_OK) else None


def _release(watcher: subprocess.Popen, run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)
    watcher.stdin.close()
    watcher.wait(GONE_WAIT)


def _wait_port(launched: Launched, exe: str) -> str:
    port_file = launched.profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if not launched.alive():
            tail = launched.log_tail()
            launched.stop()
            in_use = "" if launched.temp_profile else PROFILE_IN_USE.format(launched.profile)
            raise BrowserUnavailable(f"{exe} exited at start (code {launched.proc.returncode})"
                                     f"{': ' + tail if tail else ''}{in_use}. {INSTALL_HINT}")
        found = PORT_FILE.fullmatch(_read(port_file).strip())
        if found:  # a whole file: it may be read while it is being written
            return f"ws://127.0.0.1:{found.group(1)}{found.group(2)}"
        time.sleep(START_POLL)
    launched.stop()
    raise BrowserUnavailable(f"{exe} did not open its DevTools port in {START_TIMEOUT:g} s")


def _read(path: Path) -> str:
    """The file's text, or "" while it does not exist yet."""
    try:
        return path.read_text()
    except OSError:
        return ""


# ---- attaching ---------------------------------------------------------------------------
def attach_url(cdp_url: str) -> str:
    """The browser websocket for ``cdp_url`` (``ws://…`` as is; ``http://host:port`` asks
    ``/json/version``)."""
    import urllib.error
    import urllib.request

    if cdp_url.startswith(("ws://", "wss://")):
        return cdp_url
    url = cdp_url.rstrip("/") + "/json/version"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=VERSION_TIMEOUT) as resp:
            info = json.loads(resp.read().decode("utf-8"))
    except (OSError, urllib.error.URLError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise BrowserUnavailable(
            f"no browser answers at {cdp_url} ({reason}): start Chrome with "
            f"--remote-debugging-port=9222 (and a --user-data-dir), or fix browser.cdp_url"
        ) from None
    ws = info.get("webSocketDebuggerUrl")
    if not ws:
        raise BrowserUnavailable(f"{url} gave no webSocketDebuggerUrl")
    return ws
