"""`ga acp` speed: its start, its per-update cost, its cancel.

    python bench/bench_acp.py [--runs 5] [--turns 12]

Times, each the median of RUNS real processes (a stdlib JSON-lines client, scripted model):
1. spawn → initialize → session/new answered, against a bare `python -c pass` and a whole
   one-shot run of a one-turn task (`ga -m scripted:… "hi"`, spawn to exit) of the same
   run. Target: 300 ms on an idle machine.
2. one prompt of about 200 events (TURNS turns of streamed text, a code_run and its output)
   through `ga acp`, spawn to answer, against the same task with `ga --json`, spawn to exit;
   the difference per event is the update's cost. Target: ratio near 1.
3. session/cancel during a `sleep 30` code_run, sent to the `cancelled` answer. Target:
   under 1 s (SPEC §13).
The children keep compiled bytecode (in a temporary PYTHONPYCACHEPREFIX, even where
PYTHONDONTWRITEBYTECODE is set), as an installed ga has it, and one start warms it up.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
GA = str(ROOT / "ga.py")
START_TARGET_MS = 300
CANCEL_TARGET_MS = 1000
TEXT = "The quick brown fox jumps over the lazy dog; " * 3  # 135 chars: 17 pieces of 8


def child_env(home: Path) -> dict[str, str]:
    """ga's environment: this home, English, bytecode kept under the home's folder."""
    env = {**os.environ, "GA_HOME": str(home), "GA_LANG": "en",
           "PYTHONPYCACHEPREFIX": str(home.parent / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Client:
    """`ga acp` in a child process, spoken to one JSON line at a time."""

    def __init__(self, home: Path, script: Path, cwd: Path) -> None:
        env = child_env(home)
        self.proc = subprocess.Popen([sys.executable, GA, "-m", f"scripted:{script}", "acp"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        self.next_id = 0
        self.updates = 0

    def send(self, method: str, params: dict, notify: bool = False) -> int:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        return self.next_id

    def answer(self, request_id: int, until: str = "") -> dict:
        """Read up to the answer of ``request_id`` (counting updates); with ``until``, stop
        at the first update of that kind instead and return it."""
        while True:
            message = json.loads(self.proc.stdout.readline())
            if message.get("method") == "session/update":
                self.updates += 1
                if message["params"]["update"]["sessionUpdate"] == until:
                    return message
            elif message.get("id") == request_id:
                return message

    def call(self, method: str, params: dict) -> dict:
        return self.answer(self.send(method, params))

    def start(self, cwd: Path) -> str:
        self.call("initialize", {"protocolVersion": 1})
        return self.call("session/new", {"cwd": str(cwd), "mcpServers": []})["result"][
            "sessionId"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def median_ms(action, runs: int) -> tuple[float, float]:
    """Medians of (wall, CPU) milliseconds; CPU is what the children used (waited for), a
    steadier figure on a busy machine."""
    walls, cpus = [], []
    for _ in range(runs):
        started, cpu = time.perf_counter(), children_cpu()
        action()
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append((children_cpu() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def write_script(folder: Path, steps: list, name: str) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(steps))
    return path


def busy_steps(turns: int) -> list[dict]:
    """Turns of text and a code_run (each its own, or the repeat guard stops the task)."""
    return [{"text": f"<summary>step</summary>{TEXT}", "tool_calls": [
        {"name": "code_run", "args": {"type": "bash", "script": f"echo {i}; echo two"}}],
             "usage": {"input": 1000, "cached": 0, "output": 50}}
            for i in range(turns)] + [{"text": TEXT}]


def json_events(home: Path, script: Path, cwd: Path) -> int:
    env = child_env(home)
    out = subprocess.run([sys.executable, GA, "--json", "-m", f"scripted:{script}", "go"],
                         capture_output=True, env=env, cwd=cwd, check=True,
                         stdin=subprocess.DEVNULL).stdout
    return len(out.splitlines())


def kill(client: Client) -> None:
    client.proc.kill()
    client.proc.wait()


def cancel_ms(home: Path, script: Path, cwd: Path) -> float:
    """session/cancel sent while the sleep runs, to the `cancelled` answer."""
    client = Client(home, script, cwd)
    session = client.start(cwd)
    prompt = client.send("session/prompt", {"sessionId": session,
                                            "prompt": [{"type": "text", "text": "go"}]})
    client.answer(prompt, until="tool_call_update")  # the sleep is starting
    time.sleep(0.2)  # and running
    started = time.perf_counter()
    client.send("session/cancel", {"sessionId": session}, notify=True)
    reason = client.answer(prompt)["result"]["stopReason"]
    elapsed = (time.perf_counter() - started) * 1000
    assert reason == "cancelled", reason
    client.close()
    return elapsed


def measure(runs: int, turns: int) -> dict:
    tmp = Path(tempfile.mkdtemp())
    home, cwd = tmp / "home", tmp / "work"
    cwd.mkdir()
    hello = write_script(tmp, [{"text": "hello"}], "hello.yaml")
    busy = write_script(tmp, busy_steps(turns), "busy.yaml")
    sleep = write_script(tmp, [{"text": "<summary>s</summary>", "tool_calls": [
        {"name": "code_run", "args": {"type": "bash", "script": "sleep 30"}}]}], "sleep.yaml")
    env = child_env(home)

    def one_shot(script: Path, *flags: str) -> None:
        subprocess.run([sys.executable, GA, *flags, "-m", f"scripted:{script}", "go"],
                       capture_output=True, env=env, cwd=cwd, check=True,
                       stdin=subprocess.DEVNULL)

    def acp_start(script: Path, prompt: bool = False) -> None:
        client = Client(home, script, cwd)
        session = client.start(cwd)
        if prompt:
            client.call("session/prompt", {"sessionId": session,
                                           "prompt": [{"type": "text", "text": "go"}]})
        kill(client)

    acp_start(busy, prompt=True)  # compiles the modules a start and a prompt load
    return {"bare": median_ms(lambda: subprocess.run([sys.executable, "-c", "pass"]), runs),
            "one_shot": median_ms(lambda: one_shot(hello), runs),
            "start": median_ms(lambda: acp_start(hello), runs),
            "events": json_events(home, busy, cwd),
            "json": median_ms(lambda: one_shot(busy, "--json"), runs),
            "acp": median_ms(lambda: acp_start(busy, prompt=True), runs),
            "cancel": statistics.median(cancel_ms(home, sleep, cwd) for _ in range(runs))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--turns", type=int, default=8, help="turns of the busy prompt")
    args = ap.parse_args()
    m = measure(args.runs, args.turns)
    n = m["events"]
    print(f"{'':38}{'wall ms':>9}{'CPU ms':>9}")
    rows = [("python -c pass", "bare", ""), ("ga one-shot 'hi' (spawn to exit)", "one_shot", ""),
            ("ga acp spawn → initialize → new", "start",
             f"target {START_TARGET_MS} ms wall on an idle machine"),
            (f"{n}-event task, ga --json (to exit)", "json", ""),
            (f"{n}-event task, ga acp (to answer)", "acp", "")]
    for label, key, note in rows:
        wall, cpu = m[key]
        print(f"{label:38}{wall:9.0f}{cpu:9.0f}  {note}")
    for i, what in ((0, "wall"), (1, "CPU")):
        ratio = m["acp"][i] / m["json"][i]
        per_event = (m["acp"][i] - m["json"][i]) * 1000 / n
        print(f"ga acp / --json, {what}: {ratio:.2f}× ({per_event:+.0f} us an event)")
    print(f"session/cancel → cancelled: {m['cancel']:.0f} ms (target < {CANCEL_TARGET_MS} ms)")


if __name__ == "__main__":
    main()
