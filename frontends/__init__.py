"""Front ends: the command line, the REPL, task and batch modes, the editor protocol."""

from functools import lru_cache


@lru_cache(maxsize=1)
def version() -> str:
    """The installed package's version (``ga --version``, ACP ``agentInfo``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("genericagent")
    except PackageNotFoundError:
        return "unknown"
