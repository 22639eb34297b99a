"""MCP servers: what they cost a session, against baselines measured in the same run.

1. First model request of a real ``ga`` run (scripted model, a plugin notes the time of
   the first request), from exec: no servers, mcp-server-time alone, mcp-server-git
   alone, and both (started in parallel: about the slower one, not the sum).
2. Per-call overhead: ``McpHub.call`` from a runtime thread (loop hop, conversion) against
   the same call made directly with the SDK's ``Client`` on its own event loop, both to a
   running mcp-server-time. Target: <= 5 ms over the server's own time.
3. ``ga --help`` and a task with no servers: their time, and that ``mcp`` is not imported
   (importing it costs what the third line shows).

Run: python bench/bench_mcp.py [N]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_RUNS = 5
CALLS = 50
OVERHEAD_TARGET_MS = 5.0
PLUGIN = """import time
from pathlib import Path
def register(api):
    def first(ctx):
        out = Path(__file__).with_suffix(".t")
        if not out.exists():
            out.write_text(repr(time.time()))
    api.on("llm_before", first)
"""
PROBE = ("import json, sys, time\nt = time.perf_counter()\n{before}"
         "from frontends.cli import main\nmain({argv!r})\n"
         "print(json.dumps({{'s': time.perf_counter() - t, 'mcp': 'mcp' in sys.modules}}))")


def setup(work: Path, repo: Path) -> dict[str, Path]:
    """A home per server set, a scripted model and the timing plugin."""
    (work / "model.yaml").write_text("- text: hi\n")
    (work / "first.py").write_text(PLUGIN)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    servers = {"time": {"command": "mcp-server-time"},
               "git": {"command": "mcp-server-git", "args": ["--repository", str(repo)]}}
    homes = {}
    for label, names in (("none", []), ("time", ["time"]), ("git", ["git"]),
                         ("time+git", ["time", "git"])):
        home = work / f"home-{label}"
        home.mkdir()
        config = {"mcp_servers": {n: servers[n] for n in names}} if names else {}
        (home / "config.yaml").write_text(json.dumps(config))
        homes[label] = home
    return homes


def first_request_s(work: Path, home: Path) -> float:
    stamp = work / "first.t"
    stamp.unlink(missing_ok=True)
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT)}
    start = time.time()
    subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", f"scripted:{work / 'model.yaml'}",
                    "--plugin", str(work / "first.py"), "hi"], env=env, cwd=work,
                   stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return float(stamp.read_text()) - start


def per_call_ms(runs: int) -> tuple[float, float]:
    """Median ms of a get_current_time call: (direct SDK, through the hub)."""
    from mcp import Client, StdioServerParameters

    from tools.mcp import open_hub, parse_server

    async def direct() -> list[float]:
        async with Client(StdioServerParameters(command="mcp-server-time")) as client:
            await client.call_tool("get_current_time", {"timezone": "UTC"})  # warm
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                await client.call_tool("get_current_time", {"timezone": "UTC"})
                times.append(time.perf_counter() - t)
            return times

    home = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    hub = open_hub([parse_server("time", {"command": "mcp-server-time"}, "bench")], home, home)
    try:
        hub.call("mcp__time__get_current_time", {"timezone": "UTC"})  # warm
        through = []
        for _ in range(runs):
            t = time.perf_counter()
            hub.call("mcp__time__get_current_time", {"timezone": "UTC"})
            through.append(time.perf_counter() - t)
    finally:
        hub.close()
    bare = asyncio.run(direct())
    return statistics.median(bare) * 1000, statistics.median(through) * 1000


def probe(argv: list[str], home: Path, before: str = "") -> dict:
    code = PROBE.format(argv=argv, before=before)
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else DEFAULT_RUNS
    work = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    homes = setup(work, work / "repo")
    print(f"first model request from exec (median of {runs} runs, interleaved):")
    found: dict[str, list[float]] = {label: [] for label in homes}
    for _ in range(runs):  # a load that comes and goes falls on every set alike
        for label, home in homes.items():
            found[label].append(first_request_s(work, home))
    base = statistics.median(found["none"])
    for label, times in found.items():
        seconds = statistics.median(times)
        print(f"  {label:<10}{seconds:6.2f} s  ({seconds / base:.2f}x no servers)")
    bare, through = per_call_ms(CALLS)
    verdict = "within" if through - bare <= OVERHEAD_TARGET_MS else "OVER"
    print(f"per call (median of {CALLS}): server alone {bare:.2f} ms, through the hub "
          f"{through:.2f} ms, overhead {through - bare:.2f} ms ({verdict} "
          f"{OVERHEAD_TARGET_MS:g} ms)")
    model = f"scripted:{work / 'model.yaml'}"
    for label, args, before in (("ga --help", ["--help"], ""),
                                ("task, no servers", ["-m", model, "hi"], ""),
                                ("task, mcp imported", ["-m", model, "hi"], "import mcp\n")):
        found = [probe(args, homes["none"], before) for _ in range(runs)]
        seconds = statistics.median(f["s"] for f in found)
        print(f"  {label:<20}{seconds * 1000:7.0f} ms in process, mcp imported: "
              f"{any(f['mcp'] for f in found)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
