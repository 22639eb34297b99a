"""Fuzzing ``dispatch``: random tool names and argument shapes for every tool never raise;
each call ends in an error or a success ``StepOutcome`` (SPEC §4 "Nothing escapes the loop").

Values that would make a tool act outside the test's folders (absolute paths, long or
arbitrary code) come from small safe samples; every other value is arbitrary JSON.
"""

from __future__ import annotations

from pathlib import Path

from genutil import drain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_loop import StepOutcome, _result_text
from ga import GenericAgent, GenericAgentHandler
from llmcore.scripted import ScriptedClient
from tools.spec import tool_specs
from tools.web import BrowserConfig

FUZZ_EXAMPLES = 200
NO_BROWSER = BrowserConfig(executable="/nonexistent/chromium")
SPECS = {s.name: s for s in tool_specs(GenericAgentHandler)}
ODD_NAMES = ["no_tool", "bad_json", "web_scan", "do_", "", "__class__", "file_read ", "FILE_READ"]
EXTRA_KEYS = ["raw", "name", "error", "code", "_index", "_tool_num"]
# quick and harmless whether run by python, by bash or in-process (inline_eval)
SAFE_CODE = ["print(1)", "echo ok", "exit 3", "raise SystemExit(3)", "raise KeyboardInterrupt",
             "1/0", "", "_r = handler.working", "`", "'''"]
SAFE_PATHS = ["a.txt", "sub/b.txt", "", ".", "..", "../outside.txt", "missing/deep/x.md",
              "a.txt/inside", "~nobody-here/x"]
# a python child costs a start-up each: code_run mostly gets other (or wrong) types
SAFE_TYPES = ["bash", "sh", "powershell", "cobol", "", 7, None, "python"]
SAFE_KEYS = {"script": SAFE_CODE, "code": SAFE_CODE, "path": SAFE_PATHS, "cwd": SAFE_PATHS,
             "related_sop": SAFE_PATHS, "type": SAFE_TYPES}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=5)


@st.composite
def calls(draw) -> tuple[str, object]:
    """Half the time a real tool with a random subset of its arguments, else another name."""
    real = draw(st.booleans())
    name = draw(st.sampled_from(sorted(SPECS)) if real else st.sampled_from(ODD_NAMES)
                | st.text(max_size=20))
    if draw(st.integers(0, 19)) == 0:  # now and then not an object at all
        return name, draw(json_values)
    params = sorted(SPECS[name].properties) if name in SPECS else []
    keys = draw(st.sets(st.sampled_from(params))) if params else set()
    if name in SPECS and draw(st.integers(0, 9)):  # usually with every required argument
        keys |= set(SPECS[name].required)
    keys |= draw(st.sets(st.sampled_from(EXTRA_KEYS) | st.text(max_size=6), max_size=2))
    args = {"type": draw(st.sampled_from(SAFE_TYPES))} if name == "code_run" else {}
    for key in sorted(keys):
        if key in SAFE_KEYS:
            args[key] = draw(st.sampled_from(SAFE_KEYS[key]))
        elif key in params and draw(st.booleans()):
            args[key] = draw(fitting(SPECS[name].properties[key]))
        else:
            args[key] = draw(json_values)
    return name, args


def fitting(prop: dict) -> st.SearchStrategy:
    """A value of the type the schema asks for (small numbers: timeouts stay short)."""
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    return {"integer": st.integers(-3, 300), "boolean": st.booleans(),
            "array": st.lists(st.text(max_size=10), max_size=3)}.get(prop["type"],
                                                                      st.text(max_size=40))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(call=calls())
def test_dispatch_never_raises_for_any_name_or_args(home, call):
    name, args = call
    Path("sub").mkdir(exist_ok=True)
    for path in ("a.txt", "sub/b.txt"):
        Path(path).write_text("alpha\nbeta\n")
    # the web tools' arguments are fuzzed here, not a browser (tests/test_web_*.py drive one)
    agent = GenericAgent(ScriptedClient([]), home=home, cwd=Path.cwd(), browser=NO_BROWSER)
    handler = GenericAgentHandler(agent, agent.cwd)
    _, outcome = drain(handler.dispatch(name, args, None, index=0, tool_num=1))
    assert isinstance(outcome, StepOutcome)
    _result_text(outcome.data)  # can be sent to the model
    error = isinstance(outcome.data, dict) and outcome.data.get("status") == "error"
    if error and "exit_code" not in outcome.data:  # a failed run reports code and output
        assert isinstance(outcome.data["msg"], str) and outcome.data["msg"]
    if name not in SPECS and name not in ("no_tool", "bad_json"):
        assert error and "unknown tool" in outcome.data["msg"]
