"""The input of ``ga batch``: its options, and every task checked before anything runs.

A bad task — not JSON, no ``task``, an unknown field, a duplicate ``id``, a ``cwd`` that is
no folder, an image that is no usable file, a model that cannot be used — is a
``ConfigError`` naming the file and the line (exit 2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from llmcore.base import ConfigError, unknown_key

FIELDS = ("task", "id", "cwd", "model", "max_turns", "max_tokens", "images", "context")
SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
NAME_HASH_CHARS = 8  # a folder name changed to be safe gets this much of the id's hash
FOLDER_NAME_CHARS = 100  # a longer id's folder name is cut (file names end at 255 bytes)


def parse_args(argv: list[str]) -> argparse.Namespace | int:
    """The options of ``ga batch``, or the exit code of ``--help`` / a usage error."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    if args.cwd:
        raise ConfigError(None, "-C", "ga batch takes each task's folder from its cwd field; "
                          "a task without one acts in a fresh OUT.work/ID/ folder")
    args.plugins = tuple(str(Path(f).expanduser().absolute()) for f in args.plugin or ())
    args.config = str(Path(args.config).expanduser().absolute()) if args.config else None
    args.mcp_config = [str(Path(f).expanduser().absolute()) for f in args.mcp_config or ()]
    return args


def build_parser() -> argparse.ArgumentParser:
    from .batch_task import RETRYABLE
    from .commands import (
        CommandParser,
        add_global_options,
        add_limit_options,
        add_sandbox_options,
        add_tool_options,
        positive_int,
    )

    p = CommandParser(prog="ga batch", description=(
        "Run many tasks, one JSON object a line ({\"task\": ..., \"id\": ..., \"cwd\": ...}), "
        "each an ordinary one-shot task with its own session. Finished ids are skipped when "
        "run again; results: one JSON line per task."))
    p.add_argument("tasks", metavar="TASKS.jsonl", help="the tasks, one JSON object a line")
    p.add_argument("--out", metavar="RESULTS.jsonl",
                   help="results file (default: TASKS.results.jsonl)")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="tasks at a time (default min(4, CPUs))")
    p.add_argument("--ray", nargs="?", const=True, metavar="ADDRESS",
                   help="run on Ray: the cluster at ADDRESS, else $RAY_ADDRESS, else a local "
                        "Ray (pip install \"genericagent[ray]\")")
    p.add_argument("--cpus-per-task", type=positive_float, default=1.0, metavar="X",
                   help="with --ray: CPUs a task reserves (default 1; 0.25 packs four a core)")
    p.add_argument("--rpm", type=positive_int, metavar="N",
                   help="model requests per minute, across the whole batch")
    p.add_argument("--max-tokens-total", type=positive_int, metavar="N",
                   help="start no more tasks once the batch has spent N tokens")
    p.add_argument("--retry", type=statuses, default=(), metavar="STATUS",
                   help=f"run tasks that ended so again ({', '.join(RETRYABLE)}; "
                        "comma-separated)")
    add_limit_options(p, tasks_may_set=True)
    add_global_options(p)
    add_tool_options(p)
    add_sandbox_options(p)
    return p


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def statuses(text: str) -> tuple[str, ...]:
    from .batch_task import RETRYABLE

    names = tuple(s.strip() for s in text.split(",") if s.strip())
    for name in names:
        if name not in RETRYABLE:
            raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(RETRYABLE)}")
    return names


# ---- the tasks ---------------------------------------------------------------------------
def load_tasks(path: Path, work: Path) -> list[dict]:
    """The tasks of a JSONL file; a relative ``cwd`` or image path is taken from the file's
    folder."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(str(path), None, "tasks file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), None, f"cannot read the tasks: {e}") from None
    items = []
    for n, line in enumerate(jsonl_lines(text), 1):
        if not line.strip():
            continue
        try:
            items.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            raise ConfigError(str(path), f"line {n}", f"not JSON: {e.msg} (column {e.colno})"
                              ) from None
    return check_tasks(items, path.parent, work, str(path), "line")


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text: cut at "\\n" only (a JSON string may hold U+2028, U+0085
    and the like raw, where ``str.splitlines`` would cut too), a trailing "\\r" dropped."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def tasks_from_list(tasks: list, base: Path, work: Path) -> list[dict]:
    """The tasks a program gives ``run_batch`` (counted from 1 in messages)."""
    return check_tasks(list(enumerate(tasks, 1)), base, work, "tasks", "task")


def check_tasks(items: list[tuple[int, Any]], base: Path, work: Path, where: str,
                label: str) -> list[dict]:
    if not items:
        raise ConfigError(where, None, "no tasks")
    seen: dict[str, int] = {}
    specs = []
    for n, raw in items:
        spec = check_task(raw, n, base, work, where, f"{label} {n}")
        key = str(spec["id"])
        if key in seen:
            raise ConfigError(where, f"{label} {n}: id", f"duplicate id {spec['id']!r} (also "
                              f"on {label} {seen[key]})")
        seen[key] = n
        specs.append(spec)
    return specs


def check_task(raw: Any, n: int, base: Path, work: Path, where: str, at: str) -> dict:
    """One task as a worker gets it: id, the task text (with its context), folder, images
    (absolute), model and limits."""
    from .task_input import with_context

    if not isinstance(raw, dict):
        raise ConfigError(where, at, 'expected a JSON object such as {"task": "..."}')
    for key, value in raw.items():
        if key not in FIELDS:
            raise unknown_key(where, f"{at}: {key}", str(key), FIELDS)
        if not _storable(value):
            raise ConfigError(where, f"{at}: {key}", "holds half of a UTF-16 surrogate pair "
                              "(an escape such as \\ud800 alone), which is no text; write the "
                              "whole character")
    task = raw.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ConfigError(where, f"{at}: task", "missing: the task text (a string)")
    task_id = raw.get("id", n)
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or task_id == "":
        raise ConfigError(where, f"{at}: id", "must be a string or a whole number")
    spec = {"id": task_id, "line": at, "task": task,
            "model": _text(raw, "model", where, at), "images": _images(raw, base, where, at)}
    for key in ("max_turns", "max_tokens"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ConfigError(where, f"{at}: {key}", f"must be a whole number >= 1, got {value!r}")
        spec[key] = value
    context = raw.get("context")
    if context is not None:
        if not isinstance(context, str):
            raise ConfigError(where, f"{at}: context", "must be text (a string)")
        spec["task"] = with_context(task, context)
    cwd = _text(raw, "cwd", where, at)
    if cwd is None:
        spec.update(cwd=str(work / folder_name(task_id)), fresh=True)
        return spec
    folder = (base / Path(cwd).expanduser()).resolve()
    if not folder.is_dir():
        raise ConfigError(where, f"{at}: cwd", f"not a folder: {folder}")
    spec.update(cwd=str(folder), fresh=False)
    return spec


def _storable(value: Any) -> bool:
    """Whether the text of ``value`` (a string, or a list of them) can be written as UTF-8."""
    for item in value if isinstance(value, list) else [value]:
        try:
            if isinstance(item, str):
                item.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


def _text(raw: dict, key: str, where: str, at: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(where, f"{at}: {key}", "must be a non-empty string")
    return value


def _images(raw: dict, base: Path, where: str, at: str) -> list[str]:
    from llmcore.images import open_image

    items = raw.get("images") or []
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ConfigError(where, f"{at}: images", "must be a list of image file paths")
    paths = []
    for item in items:
        path = (base / Path(item).expanduser()).resolve()
        try:
            open_image(path.read_bytes(), str(path), load=False)
        except OSError as e:
            raise ConfigError(where, f"{at}: images", f"cannot read {path}: {e.strerror}"
                              ) from None
        except ConfigError as e:
            raise ConfigError(where, f"{at}: images", f"{path}: {e.message}") from None
        paths.append(str(path))
    return paths


def folder_name(task_id: Any) -> str:
    """A task's folder under ``OUT.work``: the id when it is a safe name of at most
    ``FOLDER_NAME_CHARS``, else the id made safe and cut there, plus a piece of its hash (so
    two ids never share a folder)."""
    text = str(task_id)
    safe = SAFE_NAME.sub("_", text)
    if safe == text and not text.startswith(".") and len(text) <= FOLDER_NAME_CHARS:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:NAME_HASH_CHARS]
    return f"{safe.lstrip('.')[:FOLDER_NAME_CHARS] or 'task'}-{digest}"


# ---- the setup every task shares ---------------------------------------------------------
def check_setup(specs: list[dict], opts: Any, home: Path, where: str) -> dict:
    """What every worker needs (home, config, default model, plugins, limits), checked as a
    run would check it: the config, the plugins, and each model the tasks name (its key set,
    its script readable, images only for a model that takes them)."""
    from llmcore.config import open_config, tools_settings
    from memory.working import Settings

    from .runner import load_tools

    cfg = open_config(opts.config, home)
    Settings.from_dict(cfg.agent, cfg.path)
    tools_settings(cfg)
    load_tools(argparse.Namespace(plugin=list(opts.plugins)), home)
    from .approve import permissions

    permissions(opts, cfg.agent, cfg.path)  # nobody answers a batch: `always` is refused now
    kinds: set[str] = set()
    checked: dict[str | None, Any] = {}
    for spec in specs:
        name = spec["model"] or opts.model
        if name not in checked:
            field = f"{spec['line']}: model" if spec["model"] else None
            checked[name] = check_model(cfg, name, where, field, kinds)
        profile = checked[name]
        if opts.max_cost and any(p.price is None for p in profile_members(cfg, profile)):
            raise ConfigError(where, f"{spec['line']}: model" if spec["model"] else "--max-cost",
                              f"model {profile.name} has no price, so --max-cost cannot be "
                              "kept; give its profile price: {input: USD, output: USD}")
        if spec["images"] and not profile.sees_images:
            raise ConfigError(where, f"{spec['line']}: images", f"model {profile.name} cannot "
                              "see images (vision: false); pick a vision model for this task")
    from llmcore import PROVIDERS

    return {"home": str(home), "home_named": bool(opts.home or os.environ.get("GA_HOME")),
            "config": opts.config, "model": opts.model,
            "plugins": list(opts.plugins), "no_user_tools": opts.no_user_tools,
            "max_turns": opts.max_turns, "max_tokens": opts.max_tokens,
            "max_cost": opts.max_cost, "mcp_config": opts.mcp_config,
            "sandbox": opts.sandbox, "approval": opts.approval, "yolo": opts.yolo,
            "preload": sorted(PROVIDERS[k].partition(":")[0] for k in kinds)}


def profile_members(cfg: Any, profile: Any) -> list:
    """The profiles that may serve a request of ``profile`` (a mixin's members)."""
    return [cfg.profile(m) for m in profile.mixin] if profile.mixin else [profile]


def check_model(cfg: Any, name: str | None, where: str, field: str | None,
                kinds: set[str]) -> Any:
    """The profile ``name`` selects, with each member's key resolved now; a problem is named
    at ``field`` of ``where`` (a task's line), or as the config names it (the default)."""
    from llmcore.config import resolve_key, select
    from llmcore.scripted import load_script

    try:
        profile = select(cfg, name)
        for member in profile_members(cfg, profile):
            kinds.add(member.provider)
            if member.provider == "scripted":
                load_script(member.script)
            resolve_key(member, cfg.path)
    except ConfigError as e:
        if field is None:
            raise
        raise ConfigError(where, field, str(e)) from None
    return profile
