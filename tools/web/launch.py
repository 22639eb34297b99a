"""Where the browser comes from: the ``browser:`` config, finding Chromium, launching it
tied to the runtime, and finding the websocket of a browser to attach to.

A launched Chromium is tied to the runtime (``tools.procs``): whatever ends the runtime,
SIGKILL included, ends the browser's whole process group, and its run folder (temp
profile, the browser's TMPDIR, its log) sits in the runtime's own temp dir, removed with
it. Its environment is the one every child of the runtime gets (``EnvPolicy``: no secrets),
with TMPDIR pointing into its run folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from llmcore.base import ConfigError, unknown_key
from llmcore.secrets import EnvPolicy
from tools.procs import end_group, owned_dir, popen_tied, release, runtime_dir, sweep_owned

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
VERSION_TIMEOUT = 5.0
LOG_TAIL_CHARS = 600
PORT_FILE = re.compile(r"(\d+)\n(/devtools/browser/[0-9a-f-]{36})")
SOCKET_PATH_MAX = 107  # bytes of a unix socket path (sun_path less its NUL)
SOCKET_SUFFIX_CHARS = len("/org.chromium.Chromium.123456/SingletonSocket")
SHORT_TMP = Path("/tmp")  # the run folder's place when the runtime's temp dir is too long
RUN_PREFIX = "ga-chromium-"
FLAGS = (
    "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-breakpad", "--disable-crash-reporter",
    "--password-store=basic",
    "--disable-blink-features=AutomationControlled", "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows",
    "--remote-debugging-port=0",
)
XDG_DIRS = {"XDG_CONFIG_HOME": ".config", "XDG_CACHE_HOME": ".cache",
            "XDG_DATA_HOME": ".local/share", "XDG_STATE_HOME": ".local/state"}
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
                raise unknown_key(path, f"browser.{key}", key, known, "setting")
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

    def named_executable(self) -> str | None:
        """The browser binary the user named (the config, else $GA_CHROMIUM), if any."""
        return self.executable or os.environ.get(EXECUTABLE_ENV) or None

    def find_executable(self) -> str:
        """The browser binary to launch, or BrowserUnavailable saying what is missing."""
        named = self.named_executable()
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
        """Why the web tools cannot be offered, or None when a browser is configured or
        found. A ``browser.executable`` that cannot start keeps them offered: each call
        answers with an install hint (SPEC §9)."""
        if self.attach or self.executable:
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
def browser_env(run_dir: Path, temp: Path, policy: EnvPolicy) -> dict[str, str]:
    """The children's environment (``policy``) with Chromium's temp files, home and XDG
    folders (crash reports, dconf, caches) in its run folder, removed with it."""
    env = policy.child_env()
    home = run_dir / "home"
    if "XAUTHORITY" not in env and "HOME" in env:  # a display's key is found through HOME
        xauth = Path(env["HOME"], ".Xauthority")
        if xauth.is_file():
            env["XAUTHORITY"] = str(xauth)
    env.update({"TMPDIR": str(temp), "HOME": str(home)})
    env.update({var: str(home / sub) for var, sub in XDG_DIRS.items()})
    return env


@dataclass
class Launched:
    """A Chromium this runtime started, with its run folder."""

    proc: subprocess.Popen
    run_dir: Path
    profile: Path
    ws_url: str
    temp_profile: bool

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, graceful: bool = False) -> None:
        """End the browser and its children and remove the run folder."""
        if graceful and self.alive():
            try:
                self.proc.wait(CLOSE_GRACE)
            except subprocess.TimeoutExpired:
                log.warning("the browser did not close in %.0f s; killing it", CLOSE_GRACE)
        end_group(self.proc)
        self.proc.wait()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        release(self.proc)

    def log_tail(self) -> str:
        try:
            text = (self.run_dir / "chromium.log").read_text(errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in text.splitlines() if "dbus" not in ln.lower() and ln.strip()]
        return "\n".join(lines)[-LOG_TAIL_CHARS:]


def launch(cfg: BrowserConfig, policy: EnvPolicy) -> Launched:
    """Start Chromium with a DevTools port, its environment from ``policy``; raise
    BrowserUnavailable when it cannot start."""
    exe = cfg.find_executable()
    run_dir, temp = _run_dirs()
    profile = Path(cfg.profile_dir).expanduser() if cfg.profile_dir else run_dir / "profile"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "DevToolsActivePort").unlink(missing_ok=True)
    argv = [exe, *FLAGS, f"--user-data-dir={profile}",
            "--window-size={},{}".format(*cfg.window_size)]
    if cfg.is_headless():
        argv.append("--headless")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    argv.append("about:blank")
    with open(run_dir / "chromium.log", "wb") as errlog:
        try:
            proc = popen_tied(argv, stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog,
                              env=browser_env(run_dir, temp, policy), cwd=run_dir)
        except OSError as e:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise BrowserUnavailable(f"cannot start {exe}: {e.strerror}: {INSTALL_HINT}"
                                     ) from None
    launched = Launched(proc, run_dir, profile, "", not cfg.profile_dir)
    launched.ws_url = _wait_port(launched, exe)
    return launched


def _run_dirs() -> tuple[Path, Path]:
    """The run folder (profile, log) and Chromium's TMPDIR, both removed with the runtime's
    temp dir however the runtime ends. Chromium puts a unix socket in its TMPDIR and a
    socket path has at most 107 bytes: a runtime dir too long for that gives way to a run
    folder in /tmp that the runtime owns (``owned_dir``: removed with it, and swept by a
    later start if it was left)."""
    runtime = runtime_dir()
    if not os.access(SHORT_TMP, os.W_OK):
        return Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=runtime)), runtime
    if len(str(runtime)) + SOCKET_SUFFIX_CHARS <= SOCKET_PATH_MAX:
        sweep_owned(SHORT_TMP, RUN_PREFIX)  # left by a killed runtime with a longer temp dir
        return Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=runtime)), runtime
    run_dir = owned_dir(SHORT_TMP, RUN_PREFIX)
    return run_dir, run_dir


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
    tail = launched.log_tail()
    launched.stop()
    raise BrowserUnavailable(f"{exe} did not open its DevTools port in {START_TIMEOUT:g} s"
                             f"{': ' + tail if tail else ''}")


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
