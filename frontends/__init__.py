"""Terminal front ends: event renderers for one-shot runs and the interactive REPL."""
