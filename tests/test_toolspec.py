"""Tool schemas come from code; bad arguments become errors for the model (SPEC §4)."""

from __future__ import annotations

from typing import Literal

import pytest

from agent_loop import StepOutcome
from ga import GenericAgent, GenericAgentHandler
from tools.spec import tool, tool_specs, tools_schema
from tools.texts import TOOL_TEXT_ZH


class WordHandler(GenericAgentHandler):
    @tool
    def do_word_count(self, path: str, unique: bool = False,
                      mode: Literal["fast", "exact"] = "fast", *, _index: int = 0):
        """Count the words in a text file.

        Args:
            path: File to count, relative to the working directory.
            unique: Count distinct words only.
            mode: How to count.
        """
        words = self.resolve(path).read_text().split()
        yield f"counting {path}\n"
        n = len(set(words)) if unique else len(words)
        return StepOutcome({"words": n, "mode": mode}, next_prompt=self._anchor(_index))


def schema_of(name, lang="en", cls=WordHandler):
    return next(s["function"] for s in tools_schema(cls, lang, (), TOOL_TEXT_ZH)
                if s["function"]["name"] == name)


def test_schema_generated_from_signature_and_docstring():
    fn = schema_of("word_count")
    assert fn["description"] == "Count the words in a text file."
    props = fn["parameters"]["properties"]
    assert props["path"] == {"type": "string",
                             "description": "File to count, relative to the working directory."}
    assert props["unique"] == {"type": "boolean", "description": "Count distinct words only."}
    assert props["mode"]["enum"] == ["fast", "exact"] and props["mode"]["default"] == "fast"
    assert fn["parameters"]["required"] == ["path"]
    assert "_index" not in props and "response" not in props


def test_builtin_tools_offered_and_hidden_ones_not():
    names = {s.name for s in tool_specs(GenericAgentHandler)}
    assert {"code_run", "file_read", "file_write", "file_patch", "update_working_checkpoint",
            "ask_user", "start_long_term_update"} <= names
    assert "no_tool" not in names


def test_agent_does_not_offer_disabled_user_tools_or_web_tools_without_a_browser(
        home, tmp_path, monkeypatch):
    from llmcore.scripted import ScriptedClient

    monkeypatch.setenv("GA_CHROMIUM", str(tmp_path / "no-chromium"))  # no browser found
    agent = GenericAgent(ScriptedClient([]), home=home, disabled_tools=("ask_user",))
    names = {s["function"]["name"] for s in agent.tools_schema()}
    assert "ask_user" not in names and "web_scan" not in names and "file_read" in names
    assert "no-chromium" in agent.unavailable["web_execute_js"]


BUILTIN_TOOLS_BUDGET_TOKENS = 1500  # SPEC §12: the built-in tools, browser tools included


def test_builtin_tools_with_the_browser_tools_cost_at_most_1500_tokens(home):
    from llmcore.scripted import ScriptedClient
    from tools.spec import schema_tokens
    from tools.web import BrowserConfig

    agent = GenericAgent(ScriptedClient([]), home=home, browser=BrowserConfig(mode="attach"))
    schemas = agent.tools_schema()
    assert {"web_scan", "web_execute_js"} <= {s["function"]["name"] for s in schemas}
    assert sum(map(schema_tokens, schemas)) <= BUILTIN_TOOLS_BUDGET_TOKENS
    # no optional flag or empty text spells out its default
    for schema in schemas:
        for prop in schema["function"]["parameters"]["properties"].values():
            assert prop.get("default", True) not in (False, ""), schema["function"]["name"]


def test_every_builtin_tool_has_chinese_texts():
    for spec in tool_specs(GenericAgentHandler):
        assert spec.name in TOOL_TEXT_ZH, f"missing zh text for {spec.name}"
        zh = TOOL_TEXT_ZH[spec.name]
        assert set(zh["params"]) == set(spec.properties), spec.name
    fn = schema_of("file_read", "zh", GenericAgentHandler)
    assert fn["description"] == TOOL_TEXT_ZH["file_read"]["description"]
    assert fn["parameters"]["properties"]["path"]["description"] == "文件路径"


def test_user_tool_added_with_one_method_runs_end_to_end(run_agent, tmp_path):
    (tmp_path / "work" / "t.txt").write_text("a b a c")
    script = [{"text": "<summary>count</summary>",
               "tool_calls": [{"name": "word_count", "args": {"path": "t.txt", "unique": "true"}}]},
              {"text": "3 distinct words"}]
    agent, client, events = run_agent(script, handler_cls=WordHandler)
    assert any(s["function"]["name"] == "word_count" for s in client.calls[0]["tools"])
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["data"] == {"words": 3, "mode": "fast"}


@pytest.mark.parametrize("args, expect", [
    ({"path": "t.txt", "unique": "false"}, {"words": 4, "mode": "fast"}),
    ({"path": "t.txt", "unique": 1, "mode": "EXACT"}, {"words": 3, "mode": "exact"}),
])
def test_string_booleans_and_enums_are_coerced(run_agent, tmp_path, args, expect):
    (tmp_path / "work" / "t.txt").write_text("a b a c")
    script = [{"tool_calls": [{"name": "word_count", "args": args}]}, {"text": "ok"}]
    _, _, events = run_agent(script, handler_cls=WordHandler)
    assert next(e for e in events if e["type"] == "tool_result")["data"] == expect


@pytest.mark.parametrize("args, needle", [
    ({}, "missing required argument(s): path"),
    ({"path": "t.txt", "unique": "maybe"}, "'unique' must be true or false"),
    ({"path": "t.txt", "mode": "slow"}, "'mode' must be one of"),
    ({"path": ["a"]}, "'path' must be a string"),
])
def test_bad_arguments_give_the_model_an_error_and_the_run_goes_on(run_agent, tmp_path,
                                                                   args, needle):
    (tmp_path / "work" / "t.txt").write_text("a b")
    script = [{"tool_calls": [{"name": "word_count", "args": args}]}, {"text": "ok"}]
    _, client, events = run_agent(script, handler_cls=WordHandler)
    data = next(e for e in events if e["type"] == "tool_result")["data"]
    assert data["status"] == "error" and needle in data["msg"]
    assert needle in client.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert events[-1]["result"] == "CURRENT_TASK_DONE"


def test_integer_strings_are_coerced(run_agent, tmp_path):
    (tmp_path / "work" / "f.txt").write_text("\n".join(f"l{i}" for i in range(1, 50)))
    script = [{"tool_calls": [{"name": "file_read",
                               "args": {"path": "f.txt", "start": "30", "count": "2",
                                        "show_linenos": "false"}}]}, {"text": "ok"}]
    _, _, events = run_agent(script)
    data = next(e for e in events if e["type"] == "tool_result")["data"]
    assert "l30\nl31" in data and "l32" not in data


def test_tool_definition_errors_fail_at_import():
    with pytest.raises(TypeError, match="annotation"):
        @tool
        def do_x(self, a, *, _index: int = 0):
            """X.

            Args:
                a: thing.
            """
    with pytest.raises(TypeError, match="description"):
        @tool
        def do_y(self, a: int):
            """Y."""
    with pytest.raises(TypeError, match="docstring"):
        @tool
        def do_z(self, a: int):
            pass


def test_legacy_generator_tool_with_params_declaration(run_agent):
    class Legacy(GenericAgentHandler):
        def do_shout(self, args, response):
            """Shout a word back."""
            yield "shouting\n"
            return StepOutcome(str(args.get("word", "")).upper(), next_prompt="\n")

        do_shout.params = {"word": "The word to shout."}

    fn = schema_of("shout", cls=Legacy)
    assert fn["description"] == "Shout a word back."
    assert fn["parameters"]["properties"]["word"]["description"] == "The word to shout."
    script = [{"tool_calls": [{"name": "shout", "args": {"word": "hey"}}]}, {"text": "ok"}]
    _, _, events = run_agent(script, handler_cls=Legacy)
    assert next(e for e in events if e["type"] == "tool_result")["data"] == "HEY"
