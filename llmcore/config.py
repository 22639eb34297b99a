"""Model profiles: the YAML config file, ``provider:model`` specs and env-only setups.

A profile is one ``Profile`` dataclass; every field is a config key. Unknown keys, bad
values and missing keys are ``ConfigError(path, field, message)``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .base import ConfigError, unknown_key
from .price import Price, parse_price

KINDS = ("anthropic", "openai", "openai-responses", "scripted")
TOOL_MODES = ("native", "text")
SECTIONS = ("models", "agent", "tools", "browser", "mcp_servers")  # mappings besides default
THINKING_MODES = ("adaptive", "enabled", "disabled")
EFFORTS = ("minimal", "low", "medium", "high", "xhigh", "max")
DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY",
                   "openai-responses": "OPENAI_API_KEY"}
DEFAULT_BASE_ENV = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL",
                    "openai-responses": "OPENAI_BASE_URL"}
MAX_CALLS_PER_TURN = 32  # tool calls of one reply that run; the rest get an error result
# set by the runtime (tools.procs.TIE_ENV) in the environment of every process it starts
RUNTIME_CHILD_VAR = "GA_TIE_DIR"
STRIPPED_KEY_HINT = ("; this ga was started by another ga's code, which gets no key variables: "
                     "give the profile its key in config.yaml (api_key), or let {var} through "
                     "with tools.env_keep: [{var}] there (all code the model runs then sees it)")


@dataclass
class Profile:
    """One model profile (SPEC §6). ``name`` is the profile's key in ``models:``."""

    name: str = ""
    provider: str = "openai"
    model: str = ""
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    tool_mode: str = "native"
    tool_choice: str | None = None  # Chat Completions: auto | required | none | a tool name
    extra_body: dict[str, Any] | None = None  # Chat Completions: extra request fields
    context_win: int = 35000  # tokens; GA's default (history budget ≈ 3 chars a token)
    max_tokens: int = 8192
    temperature: float | None = None
    max_retries: int = 5
    timeout: float = 30.0
    read_timeout: float = 120.0
    request_timeout: float = 600.0
    thinking: str | None = None
    thinking_budget: int = 4096
    reasoning_effort: str | None = None
    proxy: str | None = None
    extra_sys_prompt: str | None = None
    retry_after_cap: float = 60.0
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    trim_keep_prefix: int = 0
    mixin: list[str] | None = None
    spring_back: float = 300.0
    max_turn_attempts: int = 12
    script: str | None = None
    vision: bool | None = None  # None: true for the official endpoints, false elsewhere
    price: Price | None = None  # USD per million tokens; without it no cost is shown

    @property
    def sees_images(self) -> bool:
        """Whether the model takes image input (SPEC §10)."""
        if self.vision is not None:
            return self.vision
        return not self.base_url or urlsplit(self.base_url).hostname in OFFICIAL_HOSTS


OFFICIAL_HOSTS = ("api.openai.com", "api.anthropic.com")  # a base_url there is no other model
FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Profile)}
INT_FIELDS = {"context_win", "max_tokens", "max_retries", "thinking_budget", "trim_keep_prefix",
              "max_turn_attempts"}
FLOAT_FIELDS = {"temperature", "timeout", "read_timeout", "request_timeout", "retry_after_cap",
                "backoff_base", "backoff_max", "spring_back"}
BOOL_FIELDS = {"vision"}
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
CHOICES = {"provider": KINDS, "tool_mode": TOOL_MODES, "thinking": THINKING_MODES,
           "reasoning_effort": EFFORTS}


def coerce(path: str | None, name: str, key: str, value: Any) -> Any:
    """Check and convert one profile value (a YAML value or a ``/session.KEY=VALUE`` string)."""
    where = f"models.{name}.{key}" if name else key
    if key not in FIELD_TYPES or key == "name":
        raise unknown_key(path, where, key, (k for k in FIELD_TYPES if k != "name"))
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
        return None if key not in INT_FIELDS | {"provider", "model"} else _bad(path, where, value)
    if key in INT_FIELDS | FLOAT_FIELDS:
        return _number(path, where, key, value)
    if key == "mixin":
        return _mixin(path, where, value)
    if key == "extra_body":
        return _mapping(path, where, value)
    if key == "price":
        return parse_price(path, where, _mapping(path, where, value))
    if key in BOOL_FIELDS:
        return _bool(path, where, value)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(path, where, f"expected a string, got {type(value).__name__}")
    value = str(value)
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(path, where, f"{value!r} is not one of {', '.join(CHOICES[key])}")
    return value


def _bad(path: str | None, where: str, value: Any) -> Any:
    raise ConfigError(path, where, f"a value is required, got {value!r}")


def _number(path: str | None, where: str, key: str, value: Any) -> int | float:
    try:
        if isinstance(value, bool):
            raise ValueError
        num = int(value) if key in INT_FIELDS else float(value)
    except (TypeError, ValueError):
        kind = "an integer" if key in INT_FIELDS else "a number"
        raise ConfigError(path, where, f"expected {kind}, got {value!r}") from None
    if num < 0:
        raise ConfigError(path, where, f"must not be negative, got {value!r}")
    return num


def _mapping(path: str | None, where: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(path, where, f"expected a JSON object: {e}") from None
    if not isinstance(value, dict):
        raise ConfigError(path, where, f"expected a mapping, got {value!r:.40}")
    return value


def _bool(path: str | None, where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE_WORDS + FALSE_WORDS:
        return word in TRUE_WORDS
    raise ConfigError(path, where, f"expected true or false, got {value!r}")


def _mixin(path: str | None, where: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(path, where, "expected a non-empty list of profile names")
    return list(value)


@dataclass
class Config:
    path: str | None = None
    default: str | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)  # working-memory thresholds/texts
    tools: dict[str, Any] = field(default_factory=dict)  # tool safety settings (SPEC §4)
    browser: dict[str, Any] = field(default_factory=dict)  # the browser for web tools (SPEC §9)
    mcp_servers: dict[str, Any] = field(default_factory=dict)  # MCP servers (SPEC §12)

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            known = ", ".join(self.profiles) or "none"
            raise ConfigError(self.path, "model", f"unknown profile {name!r}; known: {known}")
        return self.profiles[name]


@dataclass(frozen=True)
class ToolsSettings:
    """The ``tools:`` section (SPEC §4): what children inherit, how many calls a reply runs."""

    env_keep: tuple[str, ...] = ()
    env_drop: tuple[str, ...] = ()
    max_calls_per_turn: int = MAX_CALLS_PER_TURN


def tools_settings(cfg: Config) -> ToolsSettings:
    """The validated ``tools:`` section; an unknown key or a bad value is a ConfigError."""
    known = [f.name for f in dataclasses.fields(ToolsSettings)]
    values: dict[str, Any] = {}
    for key, value in cfg.tools.items():
        where = f"tools.{key}"
        if key not in known:
            raise unknown_key(cfg.path, where, key, known, "setting")
        if key == "max_calls_per_turn":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(cfg.path, where, f"must be a whole number >= 1, got {value!r}")
        elif not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(cfg.path, where, "must be a list of variable names")
        else:
            value = tuple(value)
        values[key] = value
    return ToolsSettings(**values)


def config_file(config_path: str | None, home: str | Path | None) -> Path:
    if config_path:
        return Path(config_path).expanduser()
    if os.environ.get("GA_CONFIG"):
        return Path(os.environ["GA_CONFIG"]).expanduser()
    return home_dir(home) / "config.yaml"


def config_source(config_path: str | None) -> str | None:
    """What named the config file (``--config``, ``$GA_CONFIG``), None for the home default.
    A file named explicitly must exist."""
    if config_path:
        return "--config"
    return "$GA_CONFIG" if os.environ.get("GA_CONFIG") else None


def open_config(config_path: str | None, home: str | Path | None) -> Config:
    """The config ``ga`` uses: ``--config``, else ``$GA_CONFIG``, else ``<home>/config.yaml``."""
    path = config_file(config_path, home)
    source = config_source(config_path)
    if source and not path.exists():
        raise ConfigError(str(path), None, f"config file not found (named by {source})")
    return load_config(path, required=False)


def home_dir(home: str | Path | None) -> Path:
    if home:
        return Path(home).expanduser()
    return Path(os.environ.get("GA_HOME") or "~/.genericagent").expanduser()


def load_config(path: Path, *, required: bool) -> Config:
    """Read and validate the YAML config; a missing file is an empty config unless required."""
    import yaml

    spath = str(path)
    if not path.exists():
        if required:
            raise ConfigError(spath, None, "config file not found")
        return Config(path=None)
    try:
        # libyaml's loader when PyYAML has it: the same safe parse, ≈ 10× faster per session
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(spath, None, f"cannot read config: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(spath, None, f"invalid YAML: {yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(spath, None, "the config must be a mapping with 'models:'")
    unknown = set(data) - {"default", *SECTIONS}
    if unknown:
        key = sorted(unknown)[0]
        raise unknown_key(spath, key, key, ("default", *SECTIONS), "top-level key")
    sections = {}
    for name in SECTIONS:
        sections[name] = data.get(name) or {}
        if not isinstance(sections[name], dict):
            raise ConfigError(spath, name, f"expected a mapping, got {sections[name]!r:.40}")
    models = sections.pop("models")
    cfg = Config(path=spath, default=data.get("default"), **sections)
    for name, raw in models.items():
        cfg.profiles[str(name)] = parse_profile(spath, str(name), raw)
    _check_refs(cfg)
    return cfg


def yaml_problem(e: Exception) -> str:
    """A YAML error in one line, with the line and column where it was found."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or (str(e).splitlines() or ["syntax error"])[0]
    if mark is None:
        return problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def parse_profile(path: str | None, name: str, raw: Any) -> Profile:
    if not isinstance(raw, dict):
        raise ConfigError(path, f"models.{name}", "expected a mapping of settings")
    values = {k: coerce(path, name, str(k), v) for k, v in raw.items()}
    prof = Profile(name=name, **values)
    if not prof.mixin and not prof.model and prof.provider != "scripted":
        raise ConfigError(path, f"models.{name}.model", "missing: the model id to use")
    if prof.provider == "scripted" and not prof.mixin and not prof.script:
        raise ConfigError(path, f"models.{name}.script", "missing: path of the script file")
    if prof.mixin and prof.price:
        raise ConfigError(path, f"models.{name}.price", "a mixin profile is priced by the "
                          "profile that serves each request: give each of them its price")
    return prof


def _check_refs(cfg: Config) -> None:
    for prof in cfg.profiles.values():
        for member in prof.mixin or []:
            target = cfg.profiles.get(member)
            if target is None or target.mixin:
                raise ConfigError(cfg.path, f"models.{prof.name}.mixin",
                                  f"{member!r} is not a plain profile in models")
    if cfg.default is not None and cfg.default not in cfg.profiles and ":" not in cfg.default:
        raise ConfigError(cfg.path, "default", f"{cfg.default!r} is not a profile in models")


def known_profiles(path: str | None, profiles: Any) -> str:
    if profiles:
        return f"; profiles: {', '.join(profiles)}"
    return f"; {path} has no profiles" if path else "; no config file (see: ga config path)"


def spec_profile(spec: str, path: str | None = None, profiles: Any = None) -> Profile:
    """A profile for ``provider:model`` (base URL from the SDK's standard env var).
    ``scripted:PATH`` is named by its absolute path, so the name a session records works
    from any folder."""
    kind, _, model = spec.partition(":")
    if kind not in KINDS or not model:
        raise ConfigError(path, "model", f"{spec!r} is not a profile name or provider:model "
                          f"(providers: {', '.join(KINDS)}){known_profiles(path, profiles)}")
    if kind == "scripted":
        script = os.path.abspath(os.path.expanduser(model))
        return Profile(name=f"{kind}:{script}", provider=kind, model="scripted", script=script)
    base = os.environ.get(DEFAULT_BASE_ENV[kind]) or None
    return Profile(name=spec, provider=kind, model=model, base_url=base)


def resolve_key(prof: Profile, path: str | None) -> str | None:
    """The profile's API key: ``api_key``, else ``$api_key_env``, else the SDK's variable
    (``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``) — that one only for the vendor's own endpoint
    or the base URL of the SDK's variable, never for a profile's own ``base_url``, so one
    vendor's key never reaches another server. None: no key is sent."""
    if prof.provider == "scripted" or prof.mixin:
        return None
    if prof.api_key:
        return prof.api_key
    if prof.api_key_env:
        key = os.environ.get(prof.api_key_env)
        if not key:
            raise ConfigError(path, f"models.{prof.name}.api_key_env",
                              f"environment variable {prof.api_key_env} is not set"
                              + stripped_key_hint(prof.api_key_env))
        return key
    if prof.base_url and not base_url_from_env(prof):
        return None
    env = DEFAULT_KEY_ENV[prof.provider]
    key = os.environ.get(env)
    if key or prof.base_url:
        return key or None
    if path is None or ":" in prof.name:  # provider:model from -m or GA_MODEL
        raise ConfigError(None, prof.name, f"no API key: set the environment variable {env}"
                          + stripped_key_hint(env))
    raise ConfigError(path, f"models.{prof.name}",
                      f"no API key: set the environment variable {env}, or api_key_env"
                      + stripped_key_hint(env))


def stripped_key_hint(var: str) -> str:
    """Why ``var`` may be missing in a ga started by a ga's code (keys are not passed on)."""
    return STRIPPED_KEY_HINT.format(var=var) if os.environ.get(RUNTIME_CHILD_VAR) else ""


def base_url_from_env(prof: Profile) -> bool:
    """True for a ``provider:model`` profile whose base URL is the SDK's variable's
    (``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``): an env-only setup, key and URL together."""
    return ":" in prof.name and bool(prof.base_url) and (
        prof.base_url == os.environ.get(DEFAULT_BASE_ENV[prof.provider]))


def select(cfg: Config, model: str | None) -> Profile:
    """The profile named by ``-m``, else config ``default``, else ``$GA_MODEL``."""
    spec = model or cfg.default or os.environ.get("GA_MODEL")
    if not spec:
        raise ConfigError(cfg.path, "model", "no model chosen: pass -m PROFILE or provider:model, "
                          "set 'default' in the config, or set GA_MODEL")
    if spec in cfg.profiles:
        return cfg.profiles[spec]
    return spec_profile(spec, cfg.path, cfg.profiles)
