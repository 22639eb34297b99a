"""``ga config import MYKEY.py``: the profiles of an original GenericAgent ``mykey.py``
(``frontends.mykey``), keys included, written to a file only its owner can read, with each
mapping printed (keys masked) and each name left out said with why.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from llmcore.base import ConfigError

from .mykey import Import, Profile, plan, read_literals

PRIVATE_MODE = 0o600  # the written config holds keys: readable by its owner only
KEY_SHOWN_CHARS = 4  # a key is printed as ***WXYZ, its last few characters
KEY_SHOWN_MIN_LEN = 16  # a shorter key is printed as *** alone
HEADLINE_KEYS = ("provider", "model", "base_url", "api_key", "tool_mode", "mixin")


def render(result: Import, source: Path) -> str:
    """The config file's text: ``default`` (the first session) and ``models``."""
    import yaml

    data = {"default": result.default,
            "models": {p.name: p.settings for p in result.profiles}}
    head = (f"# Imported from {source} by `ga config import`.\n"
            "# It holds API keys: keep it readable by you only.\n")
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def masked_key(key: str) -> str:
    if len(key) < KEY_SHOWN_MIN_LEN:
        return "***"
    return "***" + key[-KEY_SHOWN_CHARS:]


def masked_url(url: str) -> str:
    """``url`` with its user-info (``user:pass@``) masked."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def describe(prof: Profile) -> list[str]:
    """How one profile was mapped, keys masked: a headline, its settings, its notes."""
    s = prof.settings
    if "mixin" in s:
        head = f"failover over {', '.join(s['mixin'])}"
    else:
        key = f"key {masked_key(s['api_key'])}" if s.get("api_key") else "no key"
        head = (f"{s['provider']} {s['model']} at {masked_url(s['base_url'])}, "
                f"{s.get('tool_mode', 'native')} tools, {key}")
    shown = {k: v for k, v in s.items() if k not in HEADLINE_KEYS}
    lines = [f"  {prof.source} -> {prof.name} ({prof.label}): {head}"]
    if shown:
        lines.append("      " + ", ".join(f"{k}: {masked_url(str(v))}" for k, v in shown.items()))
    lines += [f"      note: {note}" for note in prof.notes]
    return lines


def report(result: Import, source: Path) -> list[str]:
    lines = [f"read {source} without running it"]
    if result.profiles:
        lines.append(f"imported (default: {result.default}, the first session):")
        for prof in result.profiles:
            lines += describe(prof)
    if result.left_out:
        lines.append("left out:")
        lines += [f"  {what}: {why}" for what, why in result.left_out]
    return lines


def import_mykey(source: str | Path, target: Path, force: bool = False) -> Import:
    """Read ``source`` (never run), print the mapping, write ``target`` mode 0600."""
    from llmcore.secrets import Redactor
    from tools.fsutil import atomic_write

    from .terminal import echo

    src = Path(source).expanduser()
    if target.exists() and not force:
        raise ConfigError(str(target), None, "already exists; nothing was written. Add --force "
                          "to replace it, or --out FILE to write another file")
    values, skipped = read_literals(src)
    result = plan(values)
    result.left_out += skipped
    redact = Redactor(p.settings.get("api_key") for p in result.profiles)
    for line in report(result, src):
        echo(redact(line))  # names and values from the file: shown, never obeyed
    if not result.profiles:
        raise ConfigError(str(src), None, "no model session to import; nothing was written")
    try:
        atomic_write(target, render(result, src), mode=PRIVATE_MODE)
    except OSError as e:
        raise ConfigError(str(target), None, f"cannot write: {e.strerror or e}") from None
    echo(f"wrote {target} (mode 600: only you can read it): {len(result.profiles)} "
         f"profile(s), default {result.default}")
    return result
