"""File-based child runs: ``--task DIR`` (conversational, SPEC §7) and ``--func FILE`` (one shot).

Task mode protocol, in ``DIR``: ``input.txt`` holds the prompt; progress streams into
``output.txt`` and a round ends with a line ``[ROUND END]`` (also when a signal ends the
child); then the child waits for ``reply.txt`` and writes the next round to ``output1.txt``,
``output2.txt`` … Control files are consumed on sight: ``_stop`` aborts the round (or ends
the wait), ``_keyinfo`` and ``_intervene`` reach the working memory / next prompt as
[MASTER] (read by the handler). ``_history.json`` seeds the conversation at start.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from llmcore.base import ConfigError
from tools import procs
from tools.fsutil import atomic_write, take_file

from .console import TextRenderer, final_answer
from .runner import Session, end_message, read_history_file, report_end
from .signals import STOPS, describe, held
from .task_input import argv_text

REPLY_WAIT_SECONDS = 600.0  # how long a child waits for reply.txt after a round
REPLY_WAIT_ENV = "GA_TASK_REPLY_WAIT"  # override in seconds (tests, impatient parents)
REPLY_POLL_SECONDS = 0.2  # files have no portable change notification: a short poll
ROUND_END = "[ROUND END]"
STOPPED = "stopped (_stop file)"  # how a round ended by DIR/_stop is recorded (task_end reason)
INPUT = "input.txt"
REPLY = "reply.txt"
STOP = "_stop"
HISTORY = "_history.json"
ANSWER_HINT = "The agent is waiting for your answer (a number picks a candidate); reply with:"
STALE_FILES = ("output*.txt", REPLY, STOP)


def reply_wait_seconds() -> float:
    value = os.environ.get(REPLY_WAIT_ENV)
    if not value:
        return REPLY_WAIT_SECONDS
    try:
        return float(value)
    except ValueError:
        raise ConfigError(None, REPLY_WAIT_ENV, f"expected seconds, got {value!r}") from None


def check_task_dir(task_dir: Path) -> None:
    """``--task DIR`` names a folder (it holds input.txt, output.txt …), never a file."""
    if task_dir.exists() and not task_dir.is_dir():
        raise ConfigError(None, "--task", f"{task_dir} is a file; --task takes a folder "
                          "(it holds input.txt, output.txt …)")


def write_file_mode_input(args) -> None:
    """With ``--task``: write DIR/input.txt from ``--input`` or the task words (one of
    them); ``--func`` takes no task words, its FILE holds the prompt."""
    if args.func and args.task:
        raise ConfigError(None, "--func", f"the prompt is {args.func}'s text; give no task "
                          "words with --func")
    if args.task_dir and args.task and args.input is not None:
        raise ConfigError(None, "--input", "give the input once: as --input TEXT or as the "
                          "task text, not both")
    text = " ".join(args.task) if args.task else args.input
    if args.task_dir and text is not None:
        write_input(Path(args.task_dir), argv_text(text))


def write_input(task_dir: Path, text: str) -> None:
    """``--input``: write the prompt and clear the outputs of an earlier run."""
    check_task_dir(task_dir)
    try:
        task_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(None, "--task", f"cannot create {task_dir}: {e.strerror}") from None
    for pattern in STALE_FILES:
        for old in task_dir.glob(pattern):
            old.unlink(missing_ok=True)
    atomic_write(task_dir / INPUT, text)


def output_name(round_no: int) -> str:
    return "output.txt" if round_no == 0 else f"output{round_no}.txt"


def run_task_mode(session: Session, task_dir: Path, reply_wait: float | None = None) -> int:
    """Run rounds until no reply comes (or ``_stop`` arrives while waiting)."""
    prompt = take_prompt(task_dir)
    if (task_dir / HISTORY).is_file():
        session.seed(read_history_file(task_dir / HISTORY))
    wait = reply_wait_seconds() if reply_wait is None else reply_wait
    round_no, code = 0, 0
    while prompt is not None:
        code = run_round(session, task_dir, prompt, task_dir / output_name(round_no))
        prompt = wait_for_reply(task_dir, wait)
        round_no += 1
    return code


def take_prompt(task_dir: Path) -> str:
    check_task_dir(task_dir)
    try:
        text = (task_dir / INPUT).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        raise ConfigError(None, "--task", f"{task_dir / INPUT} not found; give the input as "
                          "--input TEXT or the task text") from None
    if not text:
        raise ConfigError(None, "--task", f"{task_dir / INPUT} is empty")
    return text


def run_round(session: Session, task_dir: Path, prompt: str, out_path: Path) -> int:
    """One round into ``out_path``, which ends with how the round ended (unless it simply
    finished) and ``[ROUND END]`` — also when a signal ends the child: a parent polling for
    that line never waits forever. A round ended by ``_stop`` is no failure: exit 0."""
    with open(out_path, "w", encoding="utf-8") as out:
        render = TextRenderer(out=out, err=sys.stderr, verbose=session.agent.verbose)

        def tick() -> None:
            if take_file(task_dir / STOP) is not None:
                session.abort(STOPPED)

        try:
            end = session.run(prompt, render, tick=tick)
        except STOPS as stop:
            with held():  # a second signal must not cut the round's last lines
                end_round(render, describe(stop))
            raise
        end_round(render, end_message(end))
    code = report_end(session, end, answer_hint=False)  # the parent answers with reply.txt
    return 0 if end.get("reason") == STOPPED else code


def end_round(render: TextRenderer, how: str | None) -> None:
    render.newline()
    if how:
        render.out.write(f"■ {how}\n")
    render.out.write(f"{ROUND_END}\n")
    render.out.flush()


def wait_for_reply(task_dir: Path, wait: float) -> str | None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if take_file(task_dir / STOP) is not None:
            return None
        reply = take_file(task_dir / REPLY)
        if reply is not None and reply.strip():
            return reply.strip()
        time.sleep(REPLY_POLL_SECONDS)
    return None


def func_output(path: Path) -> Path:
    return path.with_name(f"{path.stem}.out.txt")


def func_prompt(path: Path) -> str:
    """``--func FILE``'s prompt: its text, which must not be empty."""
    try:
        prompt = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as e:
        raise ConfigError(None, "--func", f"cannot read {path}: {e.strerror}") from None
    if not prompt:
        raise ConfigError(None, "--func", f"{path} is empty")
    return prompt


def run_func(session: Session, path: Path, render) -> int:
    """``--func FILE``: run FILE's prompt once, write ``FILE-stem.out.txt``."""
    end = session.run(func_prompt(path), render)
    atomic_write(func_output(path), func_result(session, end) + "\n")
    return report_end(session, end)


def func_result(session: Session, end: dict) -> str:
    """What ``FILE-stem.out.txt`` holds: the answer; for an ``ask_user`` stop the question,
    its candidates and the command that answers it (the parent reads only this file)."""
    if end.get("result") == "CURRENT_TASK_DONE":
        return final_answer(end)
    if end.get("question") is None:
        return end.get("text") or ""
    candidates = enumerate(end.get("candidates") or [], 1)
    return "\n".join([end["question"], *(f"  {i}. {c}" for i, c in candidates), ANSWER_HINT,
                      f'  {session.command} --resume {session.id} "ANSWER"'])


def strip_options(argv: list[str], names: dict[str, bool]) -> list[str]:
    """``argv`` without the options in ``names`` (name -> takes a value)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in names:
            skip = names[name] and "=" not in arg
            continue
        out.append(arg)
    return out


def start_background(args, argv: list[str], home: Path) -> int:
    """``--bg``: the prompt is checked here (exit 2), then ``argv`` (the options, without
    the task text: it is in DIR/input.txt now) runs detached."""
    from llmcore.images import load_image

    if not (args.task_dir or args.func):
        raise ConfigError(None, "--bg", "only with --task or --func")
    if args.task_dir:
        take_prompt(Path(args.task_dir))
    else:
        func_prompt(Path(args.func))
    for path in args.image or []:  # a file that is no usable image exits 2 here, too
        load_image(path)
    log_path = home / "logs" / "bg" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    return spawn_background(argv, log_path)


def spawn_background(argv: list[str], log_path: Path) -> int:
    """``--bg``: start the same command detached; print its PID. Launched by an agent's
    code, the child ends with that agent (``tools.procs.popen_detached``)."""
    import ga

    child_argv = strip_options(argv, {"--bg": False, "--input": True})
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            proc = procs.popen_detached(
                [sys.executable, str(Path(ga.__file__).absolute()), *child_argv],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file)
    except OSError as e:  # inside an agent's sandbox: the home and its folder are read-only
        print(f"ga: cannot start it in the background: {e.strerror or e}. Run it without --bg "
              "(started with & it ends when the agent does), or let the agent write there "
              "(agent.writable_roots, or --sandbox full-access)", file=sys.stderr)
        return 1
    print(proc.pid)
    return 0
