"""A reflect script that runs scheduled task files, cron-like.

    ga --reflect examples/scheduler.py [--dir FOLDER]

Each ``<home>/schedule/*.md`` (or ``--dir FOLDER``) is one job: an optional header block,
then the prompt::

    ---
    repeat: daily        # once | daily | weekly | every_2h | every_30m
    at: "09:00"          # daily/weekly: not before this time of day (default 00:00)
    ---
    Summarise yesterday's logs into reports/{date}.md

The last run of each job is kept in ``.schedule_state.json`` in that folder (state belongs
next to the jobs, not in memory). A ``once`` job runs one time. ``{date}`` in a prompt
becomes today's date.
"""

import json
import os
import re
import time
from datetime import datetime, timedelta
from pathlib import Path

INTERVAL = 30
STATE_FILE = ".schedule_state.json"
EVERY = re.compile(r"^every_(\d+)([hm])$")
FOLDER = None
PENDING = None


def init(args):
    global FOLDER
    home = args.get("home") or os.environ.get("GA_HOME") or "~/.genericagent"
    FOLDER = Path(args.get("dir") or Path(home).expanduser() / "schedule")


def parse_job(text):
    """(settings, prompt) from a job file."""
    settings = {}
    m = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.DOTALL)
    if m:
        for line in m.group(1).splitlines():
            key, sep, value = line.split("#", 1)[0].partition(":")
            if sep:
                settings[key.strip()] = value.strip().strip("\"'")
        text = text[m.end():]
    return settings, text.strip()


def is_due(settings, last_run, now):
    """Whether a job with these settings, last run at ``last_run`` (or None), is due."""
    repeat = settings.get("repeat", "once")
    if repeat == "once":
        return last_run is None
    every = EVERY.match(repeat)
    if every:
        step = timedelta(hours=int(every.group(1))) if every.group(2) == "h" else \
            timedelta(minutes=int(every.group(1)))
        return last_run is None or now - last_run >= step
    hour, _, minute = settings.get("at", "00:00").partition(":")
    start = now.replace(hour=int(hour), minute=int(minute or 0), second=0, microsecond=0)
    if repeat == "daily":
        return now >= start and (last_run is None or last_run < start)
    if repeat == "weekly":
        return now >= start and (last_run is None or now - last_run >= timedelta(days=7))
    return False


def load_state():
    try:
        return json.loads((FOLDER / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def check():
    global PENDING
    if FOLDER is None or not FOLDER.is_dir():
        return None
    state, now = load_state(), datetime.now()
    for job in sorted(FOLDER.glob("*.md")):
        settings, prompt = parse_job(job.read_text(encoding="utf-8"))
        last = state.get(job.name)
        last_run = datetime.fromtimestamp(last) if last else None
        if prompt and is_due(settings, last_run, now):
            PENDING = job.name
            return prompt.replace("{date}", now.strftime("%Y-%m-%d"))
    return None


def on_done(result):
    global PENDING
    if PENDING is None:
        return
    state = load_state()
    state[PENDING] = time.time()
    tmp = FOLDER / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
    os.replace(tmp, FOLDER / STATE_FILE)
    PENDING = None
