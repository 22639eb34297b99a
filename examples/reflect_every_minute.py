"""A reflect script: run one small task every minute.

    ga --reflect examples/reflect_every_minute.py --job "Append the time to heartbeat.txt"

``--job TEXT`` (optional) replaces the default prompt; ``--once`` stops after one run.
(The script's own options must not be ga's: ``--task`` would be ga's task folder.)
"""

INTERVAL = 60  # seconds between check() calls
ONCE = False
TASK = "Append one line with the current date and time to heartbeat.txt in the working directory."


def init(args):
    """Called once with the extra --key value pairs from the command line."""
    global TASK, ONCE
    TASK = args.get("job") or TASK
    ONCE = bool(args.get("once", ONCE))


def check():
    """Return a prompt to run it now, None to wait, '/exit' to stop."""
    return TASK


def on_done(result):
    print(f"[reflect_every_minute] done: {result[:200]}")
