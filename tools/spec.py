"""Tool definitions from code: ``@tool`` turns a typed, documented ``do_`` method into a
tool whose JSON schema comes from its signature and docstring.

The decorated method keeps the public call form ``do_x(args, response)``: argument
values are checked and coerced (``"false"`` → False, ``"30"`` → 30); a missing or
wrong argument becomes an error result for the model, never an exception.
Keyword-only parameters ``response``, ``_index`` and ``_tool_num`` are filled by the
runtime and stay out of the schema.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from agent_loop import StepOutcome

RUNTIME_PARAMS = ("response", "_index", "_tool_num")
SCHEMA_CHARS_PER_TOKEN = 4  # the tool-list economy's measure (SPEC §12): JSON chars / 4
_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off", "", "none", "null"}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    properties: dict = field(default_factory=dict)
    required: tuple = ()
    hidden: bool = False

    def schema(self, description: str | None = None, param_texts: dict | None = None) -> dict:
        props = {}
        for pname, prop in self.properties.items():
            prop = dict(prop)
            if param_texts and pname in param_texts:
                prop["description"] = param_texts[pname]
            props[pname] = prop
        params = {"type": "object", "properties": props}
        if self.required:
            params["required"] = list(self.required)
        return {"type": "function", "function": {
            "name": self.name, "description": description or self.description,
            "parameters": params}}


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {arg: text})."""
    doc = inspect.cleandoc(doc or "")
    head, _, args_part = doc.partition("\nArgs:\n")
    texts: dict[str, str] = {}
    lines = [line for line in args_part.splitlines() if line.strip()]
    base = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    current = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        m = re.match(r"^\s*(\w+)\s*(?:\([^)]*\))?:\s*(.*)$", line)
        if indent <= base and m:
            current = m.group(1)
            texts[current] = m.group(2).strip()
        elif current:
            texts[current] += " " + line.strip()
    return " ".join(head.split()), texts


def _unwrap_optional(ann: Any) -> Any:
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


def type_schema(ann: Any) -> dict:
    ann = _unwrap_optional(ann)
    origin = typing.get_origin(ann)
    if origin is Literal:
        values = list(typing.get_args(ann))
        return {"type": type_schema(type(values[0]))["type"], "enum": values}
    if ann is list or origin is list:
        inner = typing.get_args(ann)
        return {"type": "array", "items": type_schema(inner[0]) if inner else {}}
    if ann is dict or origin is dict:
        return {"type": "object"}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if ann in simple:
        return {"type": simple[ann]}
    raise TypeError(f"unsupported tool parameter type {ann!r}")


def coerce(value: Any, ann: Any) -> Any:
    """Coerce a model-supplied value to ``ann`` or raise ValueError with a clear reason."""
    if value is None and _unwrap_optional(ann) is not ann:
        return None
    ann = _unwrap_optional(ann)
    origin = typing.get_origin(ann)
    if origin is Literal:
        allowed = typing.get_args(ann)
        v = str(value).strip().lower() if isinstance(value, str) else value
        if v not in allowed:
            raise ValueError(f"must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        return v
    if ann is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(f"must be true or false, got {value!r}")
    if ann in (int, float):
        return _coerce_number(value, ann)
    if ann is str:
        if isinstance(value, (dict, list)):
            raise ValueError(f"must be a string, got {type(value).__name__}")
        return value if isinstance(value, str) else str(value)
    if ann is list or origin is list:
        return _coerce_list(value, ann)
    if ann is dict or origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"must be an object, got {type(value).__name__}")
        return value
    return value


def _coerce_number(value: Any, ann: type) -> Any:
    if isinstance(value, bool) or isinstance(value, (dict, list)) or value is None:
        raise ValueError(f"must be a number, got {value!r}")
    try:
        num = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be a number, got {value!r}") from None
    if ann is int:
        if not num.is_integer():
            raise ValueError(f"must be a whole number, got {value!r}")
        return int(num)
    return num


def _coerce_list(value: Any, ann: Any) -> list:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = [value]
        value = parsed if isinstance(parsed, list) else [value]
    if not isinstance(value, list):
        raise ValueError(f"must be a list, got {type(value).__name__}")
    inner = typing.get_args(ann)
    return [coerce(v, inner[0]) for v in value] if inner else value


def unspoken(default: Any) -> bool:
    """A default the schema need not spell out: an optional flag is off, an optional
    text empty, an optional value absent."""
    return default is None or default is False or default == ""


def _build_spec(fn: Callable, hidden: bool) -> tuple[ToolSpec, dict, set]:
    if not fn.__name__.startswith("do_"):
        raise TypeError(f"@tool needs a do_<name> method, got {fn.__name__}")
    name = fn.__name__[3:]
    description, texts = parse_docstring(fn.__doc__ or "")
    if not description and not hidden:
        raise TypeError(f"tool {name}: a docstring describing the tool is required")
    hints = typing.get_type_hints(fn)
    props, required, anns, runtime = {}, [], {}, set()
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        if p.name in RUNTIME_PARAMS:
            runtime.add(p.name)
            continue
        if p.name not in hints:
            raise TypeError(f"tool {name}: parameter {p.name!r} needs a type annotation")
        if p.name not in texts and not hidden:
            raise TypeError(f"tool {name}: parameter {p.name!r} needs a description in Args:")
        anns[p.name] = hints[p.name]
        props[p.name] = dict(type_schema(hints[p.name]), description=texts.get(p.name, ""))
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
        elif not unspoken(p.default):
            props[p.name]["default"] = p.default
    spec = ToolSpec(name, description, props, tuple(required), hidden)
    return spec, anns, runtime


def _bind(spec: ToolSpec, anns: dict, args: dict, aliases: dict) -> dict:
    for alias, target in aliases.items():
        if args.get(target) in (None, "") and alias in args:
            args[target] = args[alias]
    kwargs = {}
    missing = [p for p in spec.required if args.get(p) is None]
    if missing:
        raise ValueError(f"missing required argument(s): {', '.join(missing)}")
    for pname, ann in anns.items():
        if pname in args:
            try:
                kwargs[pname] = coerce(args[pname], ann)
            except ValueError as e:
                raise ValueError(f"argument {pname!r} {e}") from None
    return kwargs


def tool(fn: Callable | None = None, *, hidden: bool = False,
         aliases: dict[str, str] | None = None) -> Callable:
    """Mark a ``do_<name>`` method as a tool; its schema comes from hints + docstring.
    ``aliases`` maps other argument names models use to the declared ones."""
    if fn is None:
        return functools.partial(tool, hidden=hidden, aliases=aliases)
    spec, anns, runtime = _build_spec(fn, hidden)
    is_gen = inspect.isgeneratorfunction(fn)
    defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values()
                if p.name in anns and p.default is not inspect.Parameter.empty}

    @functools.wraps(fn)
    def wrapper(self, args: dict, response: Any = None):
        try:
            kwargs = _bind(spec, anns, args, aliases or {})
        except ValueError as e:
            msg = f"[Error] {spec.name}: {e}. Fix the arguments and call it again."
            return StepOutcome({"status": "error", "msg": msg}, next_prompt="\n")
        extra = {"response": response, "_index": args.get("_index", 0),
                 "_tool_num": args.get("_tool_num", 1)}
        kwargs.update({k: v for k, v in extra.items() if k in runtime})
        ret = fn(self, **kwargs)
        if is_gen:
            ret = yield from ret
        return ret

    wrapper.__tool_spec__ = spec
    wrapper.__tool_bind__ = lambda args: {**defaults, **_bind(spec, anns, args, aliases or {})}
    return wrapper


def call_args(method: Any, args: dict) -> dict | None:
    """The arguments a tool will run with. A ``@tool``: its parameters as the call binds
    them (aliases applied, values coerced, defaults filled in), None when they do not bind
    (the call then runs nothing: the model gets an error); any other tool: ``args``."""
    bind = getattr(method, "__tool_bind__", None)
    if bind is None:
        return args
    try:
        return bind(args)
    except ValueError:
        return None


def legacy_spec(name: str, method: Callable) -> ToolSpec:
    """Spec for an undecorated ``do_x(self, args, response)``: a ``params`` declaration
    (``{name: "description"}`` or ``{name: json_schema}``) or just the docstring."""
    description, texts = parse_docstring(method.__doc__ or "")
    params = getattr(method, "params", None) or {}
    props = {}
    for pname, decl in params.items():
        props[pname] = decl if isinstance(decl, dict) else {"type": "string", "description": decl}
    return ToolSpec(name, description or name, props, tuple(getattr(method, "required", ())))


def tool_specs(handler_cls: type) -> list[ToolSpec]:
    specs = []
    for attr in dir(handler_cls):
        if not attr.startswith("do_"):
            continue
        method = getattr(handler_cls, attr)
        spec = getattr(method, "__tool_spec__", None) or legacy_spec(attr[3:], method)
        if not spec.hidden:
            specs.append(spec)
    return specs


def tools_schema(handler_cls: type, lang: str = "en", disabled: tuple = (),
                 translations: dict | None = None) -> list[dict]:
    """The tool list sent to the model, in ``lang`` (``translations``: name → texts)."""
    out = []
    for spec in tool_specs(handler_cls):
        if spec.name in disabled:
            continue
        texts = (translations or {}).get(spec.name, {}) if lang != "en" else {}
        out.append(spec.schema(texts.get("description"), texts.get("params")))
    return out


def schema_tokens(schema: dict) -> int:
    """What one tool's schema adds to every request, in tokens (its JSON's chars / 4)."""
    return -(-len(json.dumps(schema, ensure_ascii=False)) // SCHEMA_CHARS_PER_TOKEN)
