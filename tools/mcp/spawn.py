"""Starting a stdio server's process: tied to the runtime like every child (``tools.procs``),
its stderr appended to its log, its environment only the SDK's safe default set plus the
server's ``env_vars`` and ``env``. Imports nothing of the ``mcp`` package, so a session
starts its servers first and loads the package while they boot."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tools.procs import end_group, popen_tied, release

from .config import ServerConfig

LOG_START = "--- ga:"  # begins the line written to a server's log each time it starts
# what the SDK's get_default_environment() passes on (mcp.client.stdio; a test compares)
SAFE_ENV_VARS = (("APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT",
                  "PROCESSOR_ARCHITECTURE", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME",
                  "USERPROFILE") if sys.platform == "win32"
                 else ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"))


def server_env(cfg: ServerConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The safe default variables (shell functions left out, as the SDK does), then the
    ``env_vars`` passed through, then ``env``: never the rest of the runtime's."""
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in SAFE_ENV_VARS if k in source and not source[k].startswith("()")}
    env.update({var: source[var] for var in cfg.env_vars if var in source})
    env.update(cfg.env)
    return env


def spawn(cfg: ServerConfig, cwd: Path, log_path: Path | None) -> subprocess.Popen:
    """Start the server's process, its stdin and stdout pipes for the protocol."""
    folder = Path(cwd) / os.path.expanduser(cfg.cwd) if cfg.cwd else Path(cwd)
    if not folder.is_dir():  # else Popen's error would name the folder as if the command
        raise NotADirectoryError(f"its folder (cwd) is not a folder: {folder}")
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"{LOG_START} {time.strftime('%Y-%m-%d %H:%M:%S')} starting {cfg.name}\n")
    with open(log_path or os.devnull, "ab") as errlog:
        return popen_tied([cfg.command, *cfg.args], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=errlog, env=server_env(cfg),
                          cwd=str(folder))


def stop(proc: subprocess.Popen) -> None:
    """End the server's whole session (whatever it started too), then forget it."""
    end_group(proc)
    proc.wait()
    release(proc)


def log_file(logs: Path | None, name: str) -> Path | None:
    """Where server ``name``'s stderr goes: ``<home>/logs/mcp-NAME.log``."""
    return logs / f"mcp-{name}.log" if logs is not None else None
