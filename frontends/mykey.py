"""An original GenericAgent ``mykey.py`` as our profile settings (``ga config import``).

The file is parsed with ``ast`` and never run: only module-level ``NAME = literal``
assignments are read. The original's rules (``load_llm_sessions``, ``resolve_session``) pick
the sessions and their kinds by the variable names, in file order (``session_kind``); the
global ``proxy`` goes to every session without its own.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmcore.base import ConfigError

SESSION_WORDS = ("api", "config", "cookie")  # a variable whose name has none is no session
ONE_M_SUFFIX = re.compile(r"\[1m\]", re.IGNORECASE)
VERSION_PATH = re.compile(r"/v\d+(/|$)")
ENDPOINTS = {"openai": "/chat/completions", "openai-responses": "/responses",
             "anthropic": "/messages"}
KIND_LABELS = {"native-claude": "native Claude", "native-oai": "native OpenAI",
               "claude": "Claude, text tool protocol", "oai": "OpenAI, text tool protocol"}
# The original's session settings that have the same meaning here, under our names.
SAME_MEANING = {
    "temperature": "temperature", "max_retries": "max_retries",
    "read_timeout": "read_timeout", "timeout": "timeout", "connect_timeout": "timeout",
    "context_win": "context_win", "max_tokens": "max_tokens",
    "thinking_type": "thinking", "thinking_budget_tokens": "thinking_budget",
    "reasoning_effort": "reasoning_effort", "proxy": "proxy",
    "extra_sys_prompt": "extra_sys_prompt", "trim_keep_prefix": "trim_keep_prefix",
    "max_retry_after": "retry_after_cap",
}
READ_ELSEWHERE = ("name", "apikey", "apibase", "model", "api_mode")
CLAUDE_ONLY = ("thinking_type", "thinking_budget_tokens")  # the original sent these to Claude only
CLAUDE_EFFORT = {"xhigh": "max", "none": None, "minimal": None}  # the original's, for Claude
NOT_EXPRESSIBLE = {
    "stream": "requests here always stream",
    "user_agent": "the SDK sends its own User-Agent",
    "fake_cc_system_prompt": "no Claude Code system prompt is sent here",
    "service_tier": "there is no setting for it",
    "omit_thinking": "thinking stays in the history, as the APIs require",
    "verify": "TLS certificates are always verified",
    "extra_sys_prompt_file": "put the file's text into extra_sys_prompt",
    "base_delay": "a failover waits by each member's own backoff (backoff_base)",
}
ONE_M_NOTE = ("[1m] taken off the model: the 1M-context beta header "
              "(context-1m-2025-08-07) cannot be set in this config, so the model keeps its "
              "standard context window")
BEARER_NOTE = ("this key does not start with sk-ant-: the original sent such keys as a Bearer "
               "token, here it goes in x-api-key, and there is no setting for Bearer")


@dataclass
class Profile:
    """One imported profile: where it came from, its settings, what to tell the user."""

    source: str  # the mykey.py variable
    name: str  # the profile name
    label: str  # what kind of session it was
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass
class Import:
    profiles: list[Profile] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (what, why)

    @property
    def default(self) -> str | None:
        return self.profiles[0].name if self.profiles else None


# ---- reading the file without running it ---------------------------------------------------
def read_literals(path: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The module-level ``NAME = literal`` values of ``path`` in file order, and the rest
    as (what, why) pairs. Nothing of the file is executed."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except OSError as e:
        raise ConfigError(str(path), None, f"cannot read: {e.strerror or e}") from None
    except SyntaxError as e:
        raise ConfigError(str(path), None, f"not valid Python (line {e.lineno}: {e.msg}); "
                          "nothing was imported") from None
    except ValueError as e:  # a NUL byte
        raise ConfigError(str(path), None, f"not valid Python ({e}); nothing was imported") \
            from None
    except (RecursionError, MemoryError):  # the parser's stack ran out
        raise ConfigError(str(path), None, "not valid Python here (an expression nested too "
                          "deeply to read); nothing was imported") from None
    values: dict[str, Any] = {}
    skipped: list[tuple[str, str]] = []
    for node in tree.body:
        names = _assigned_names(node)
        if names is None:
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                skipped.append((f"line {node.lineno}", f"{type(node).__name__} statement, not "
                                "run: only NAME = literal assignments are read"))
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            for name in names:
                values.pop(name, None)
                skipped.append((name, f"line {node.lineno}: its value is not a literal "
                                "(it would need running the file)"))
            continue
        for name in names:
            values[name] = value
    return values, skipped


def _assigned_names(node: ast.stmt) -> list[str] | None:
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        return [t.id for t in node.targets]
    if isinstance(node, ast.AnnAssign) and node.value and isinstance(node.target, ast.Name):
        return [node.target.id]
    return None


# ---- the original's sessions as our profiles -----------------------------------------------
class LeftOut(Exception):
    """A variable that becomes no profile; the message says why."""


def session_kind(name: str) -> str | None:
    """The original's session kind for a variable name (``resolve_session``), or None."""
    if "native" in name:
        return "native-claude" if "claude" in name else "native-oai"
    if "claude" in name:
        return "claude"
    return "oai" if "oai" in name else None


def not_a_session(name: str, value: Any) -> str:
    """Why the variable ``name`` is no session ("" when it is one)."""
    if name.startswith("_"):
        return "a private name (starts with _), which the original ignores"
    if not any(word in name for word in SESSION_WORDS):
        return "not a model session (its name has none of api, config, cookie)"
    if not isinstance(value, dict):
        return f"not a dict of settings but a {type(value).__name__}"
    if "mixin" not in name and session_kind(name) is None:
        return "no session kind in its name (native, claude or oai), so the original skips it"
    return ""


def plan(values: dict[str, Any]) -> Import:
    """The profiles the variables of a mykey.py make, in file order, and what is left out."""
    result = Import()
    proxy = values.get("proxy")
    if proxy is not None and not isinstance(proxy, str):
        result.left_out.append(("proxy", "not a string"))
        proxy = None
    entries: list[Profile | None] = []  # the original's session list; None: a mixin
    mixins: dict[int, tuple[str, dict]] = {}
    names: dict[str, str] = {}  # the original's session name (name, else model) -> profile
    taken: set[str] = set()
    for var, value in values.items():
        why = "" if var == "proxy" else not_a_session(var, value)
        if why:
            result.left_out.append((var, why))
        elif var == "proxy":
            continue
        elif "mixin" in var:
            mixins[len(entries)] = (var, value)
            entries.append(None)
        else:
            try:
                prof = session_profile(var, value, proxy, taken)
            except LeftOut as e:
                result.left_out.append((var, str(e)))
                continue
            names.setdefault(str(value.get("name", value.get("model", ""))), prof.name)
            entries.append(prof)
    for at, (var, value) in mixins.items():
        try:
            entries[at] = mixin_profile(var, value, entries, names, taken)
        except LeftOut as e:
            result.left_out.append((var, str(e)))
    result.profiles = [p for p in entries if p is not None]
    return result


def profile_name(var: str, cfg: dict, taken: set[str]) -> tuple[str, list[str]]:
    """The session's ``name`` (else its variable's), unique among the profiles."""
    given = cfg.get("name")
    name = given.strip() if isinstance(given, str) and given.strip() else var
    name = name.replace(":", "-")  # provider:model is how -m names a model without a profile
    base, n = name, 2
    while name in taken:
        name = f"{base}-{n}"
        n += 1
    taken.add(name)
    return name, ([f"named {name}: {base} was taken"] if name != base else [])


def session_profile(var: str, cfg: dict, proxy: str | None, taken: set[str]) -> Profile:
    from llmcore.config import parse_profile

    kind = session_kind(var) or "oai"
    for key in ("apikey", "apibase", "model"):
        if not isinstance(cfg.get(key), str) or (key == "model" and not cfg[key].strip()):
            raise LeftOut(f"no {key}, which a session needs")
    provider = _provider(kind, cfg)
    notes: list[str] = []
    model = cfg["model"].strip()
    if ONE_M_SUFFIX.search(model):
        model = ONE_M_SUFFIX.sub("", model).strip()
        notes.append(ONE_M_NOTE)
    base, note = base_url(cfg["apibase"], provider)
    settings: dict[str, Any] = {"provider": provider, "model": model, "base_url": base}
    notes += note
    if cfg["apikey"]:
        settings["api_key"] = cfg["apikey"]
    if kind in ("claude", "oai"):
        settings["tool_mode"] = "text"
    if kind == "native-claude" and cfg["apikey"] and not cfg["apikey"].startswith("sk-ant-"):
        notes.append(BEARER_NOTE)
    for key, value in cfg.items():
        _map_setting(key, value, provider, settings, notes)
    if proxy and "proxy" not in cfg:
        settings["proxy"] = proxy
        notes.append("proxy: the file's global proxy")
    name, renamed = profile_name(var, cfg, taken)
    try:
        parse_profile(None, name, settings)  # what the loader will say of it, now
    except ConfigError as e:
        raise LeftOut(e.message) from None
    return Profile(var, name, KIND_LABELS[kind], settings, renamed + notes)


def _provider(kind: str, cfg: dict) -> str:
    if kind in ("native-claude", "claude"):
        return "anthropic"
    mode = str(cfg.get("api_mode", "chat_completions")).strip().lower().replace("-", "_")
    return "openai-responses" if mode in ("responses", "response") else "openai"


def base_url(apibase: str, provider: str) -> tuple[str, list[str]]:
    """Our ``base_url`` for the original's ``apibase`` (which it completed to the endpoint:
    ``/v1/...`` added unless a ``/vN`` is there, the URL used whole when it ends in the
    endpoint or in ``$``), and a note when the SDK cannot reach the same URL."""
    url = apibase.strip().rstrip("/")
    whole = url.endswith("$")
    url = url.rstrip("$").rstrip("/")
    endpoint = ENDPOINTS[provider]
    if url.endswith(endpoint):
        url, whole = url[: -len(endpoint)], False
    has_version = VERSION_PATH.search(urlsplit(url).path) is not None
    if provider == "anthropic":  # the SDK adds /v1/messages to its base URL
        odd = has_version and not url.endswith("/v1")
        url = url[: -len("/v1")] if url.endswith("/v1") else url
    else:  # the SDK adds the endpoint to a base URL that names its version
        odd = False
        url = url if has_version else f"{url}/v1"
    if whole or odd:
        return url, [f"the original posted to {apibase.rstrip('$')} as given; the SDK posts "
                     f"to {url}{'/v1' if provider == 'anthropic' else ''}{endpoint}: check "
                     "the base_url"]
    return url, []


def _map_setting(key: str, value: Any, provider: str, settings: dict, notes: list[str]) -> None:
    """One session setting into ``settings`` under our name, or a note why it is left out."""
    from llmcore.config import coerce

    if key in READ_ELSEWHERE:
        return
    if key in NOT_EXPRESSIBLE:
        notes.append(f"{key} left out: {NOT_EXPRESSIBLE[key]}")
        return
    target = SAME_MEANING.get(key)
    if target is None:
        notes.append(f"{key} left out: there is no such setting here")
        return
    if key in CLAUDE_ONLY and provider != "anthropic":
        notes.append(f"{key} left out: the original sends it to Claude only")
        return
    if key == "reasoning_effort" and provider == "anthropic" and isinstance(value, str):
        effort = value.strip().lower()
        if CLAUDE_EFFORT.get(effort, effort) is None:
            notes.append(f"reasoning_effort {value!r} left out: Claude has no such level")
            return
        value = CLAUDE_EFFORT.get(effort, effort)
    try:
        ours = coerce(None, "", target, value)
    except ConfigError as e:
        notes.append(f"{key} left out: {e.message}")
        return
    if ours is not None:
        settings[target] = ours
    elif value is not None:
        notes.append(f"{key} {value!r} left out: it cannot be set here (unset: the default)")


def mixin_profile(var: str, cfg: dict, entries: list[Profile | None], names: dict[str, str],
                  taken: set[str]) -> Profile:
    """A failover profile over the sessions ``llm_nos`` names (by name or list index)."""
    from llmcore.config import coerce

    nos = cfg.get("llm_nos")
    if not isinstance(nos, (list, tuple)) or not nos:
        raise LeftOut("its llm_nos lists no session: a failover over nothing")
    settings: dict[str, Any] = {"mixin": [_member(no, entries, names) for no in nos]}
    notes: list[str] = []
    for key, value in cfg.items():
        if key == "llm_nos":
            continue
        if key in ("max_retries", "spring_back"):
            target = "spring_back" if key == "spring_back" else "max_turn_attempts"
            try:
                number = coerce(None, "", target, value)
            except ConfigError as e:
                notes.append(f"{key} left out: {e.message}")
                continue
            settings[target] = number if key == "spring_back" else number + 1
            if key == "max_retries":
                notes.append(f"max_retries {value} -> max_turn_attempts {number + 1} "
                             "(tries per turn over all members)")
        else:
            notes.append(f"{key} left out: {NOT_EXPRESSIBLE.get(key, 'no such setting here')}")
    name, renamed = profile_name(var, {}, taken)
    return Profile(var, name, "failover", settings, renamed + notes)


def _member(no: Any, entries: list[Profile | None], names: dict[str, str]) -> str:
    if isinstance(no, int) and not isinstance(no, bool):
        if not 0 <= no < len(entries):
            raise LeftOut(f"llm_nos index {no} is past the {len(entries)} sessions")
        prof = entries[no]
        if prof is None or prof.label == "failover":
            raise LeftOut(f"llm_nos index {no} is a mixin itself")
        return prof.name
    if isinstance(no, str) and no in names:
        return names[no]
    raise LeftOut(f"llm_nos names {no!r}, which is no session of the file")
