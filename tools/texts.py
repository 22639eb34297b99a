"""Prompt, reminder and tool texts: one table per language (``GA_LANG=en|zh``)."""

from __future__ import annotations

import locale
import os
import string

from llmcore.base import ConfigError

EN: dict[str, str] = {
    "anchor_header": "### [WORKING MEMORY]",
    "current_turn": "Current turn: {turn}",
    "related_sop": "If anything is unclear, re-read {sop}",
    "checkpoint_info": "[Info] Updated {what}.",
    "checkpoint_nothing": "[Info] Checkpoint made; nothing changed.",
    "checkpoint_first_tip": (
        "[SYSTEM TIPS] Working memory saved. Do not call update_working_checkpoint again "
        "unless new, non-obvious facts appear."),
    "summary_missing": (
        "[SYSTEM] Your reply must include <summary>one line on what you did and why</summary>."),
    "danger_checkpoint": (
        "[DANGER] {n} turns without a checkpoint. Call update_working_checkpoint to save key "
        "context. Stop ineffective retries; switch strategy; re-read the relevant SOPs."),
    "remind_file": (
        "[SYSTEM] Turn {turn}. Write checkpoints, key findings and tried approaches to a **file** "
        "for later reference (not only working memory)."),
    "remind_ask_user": (
        "[DANGER] Turn {turn}. Call ask_user to summarize progress and get direction. "
        "No more blind retries."),
    "plan_hint": (
        "[Plan Hint] Plan mode. file_read({plan}) to confirm the current step, and start your "
        "reply with: 📌 Current step: ..."),
    "plan_limit": (
        "[DANGER] Plan mode has run {turn} turns, the limit. Call ask_user to report progress "
        "and confirm whether to continue."),
    "plan_entered": "[Info] Entered plan mode with plan file: {plan}",
    "plan_done": "[Info] Plan complete: no [ ] left in {plan}; leaving plan mode.",
    "plan_verify_refused": (
        "[SYSTEM] You claim completion in plan mode without a [VERIFY] step. Verify the result "
        "first (plan_sop: run the checks, get a VERDICT), then report completion."),
    "no_progress_warn": (
        "[DANGER] You called {name} with the same arguments {n} turns in a row with no "
        "progress. Stop repeating it: change approach, or ask_user."),
    "no_progress_end": "{name} was called with the same arguments {n} turns in a row",
    "master": "[MASTER] {text}",
    "stale_key_info": (
        "[Note] key_info was set {n} task(s) ago; update it, or clear it with "
        "update_working_checkpoint(key_info=\"\") if this is a new task."),
    "user_line": "[USER] {text}",
    "param_escalate": "Run outside the sandbox; the user is asked first.",
    "param_reason": "Why it must leave the sandbox (shown to the user).",
    "agent_line": "[Agent] {text}",
    "answered_directly": "answered the user directly",
    "empty_reply": "[System] Blank response. Regenerate your reply and use a tool.",
    "empty_limit": "the model returned {n} empty replies",
    "incomplete_limit": "{n} replies broke off mid-stream: check the connection or the server log",
    "max_tokens_limit": "{n} replies cut at max_tokens: raise max_tokens or shorten the task",
    "incomplete_reply": "[System] Your reply was cut off. Regenerate it and use a tool.",
    "max_tokens_reply": "[System] max_tokens limit reached. Work in several small steps.",
    "code_block_only": (
        "[System] Your last reply was mostly a large code block and called no tool. If the code "
        "should run or be written to a file, call code_run / file_write / file_patch; if it was "
        "only shown to the user, add a sentence saying so."),
    "code_missing": "[Error] No code given: pass 'script' or put a ```{type} block in the reply.",
    "inline_timeout": (
        "[Error] The in-process code was still running after {n} s. It is left running in the "
        "background (a thread cannot be stopped) and may still change files or state. Run long "
        "work with code_run without inline_eval: that one can be killed."),
    "inline_aborted": (
        "[Error] Aborted while the in-process code was running. It is left running in the "
        "background (a thread cannot be stopped) and may still change files or state."),
    "content_missing": (
        "[Error] No content given: pass 'content' or put it inside "
        "<file_content>...</file_content> in your reply."),
    "long_prompt": (
        "{head}\n\n[The full request ({n} chars) is saved in {path}. Read it with file_read "
        "before acting.]"),
    "js_missing": (
        "[Error] No script given: pass 'script' (code or a .js path) or put a ```javascript "
        "block in the reply."),
    "image_shown": (
        "[IMAGE] {name}: {format} {width}x{height}, {bytes:,} bytes; the image follows "
        "({sent})."),
    "image_text_only": (
        "[IMAGE] {name}: {format} {width}x{height}, {bytes:,} bytes. The current model cannot "
        "see images; inspect it with code_run (e.g. Pillow) if you need more."),
    "screenshot_shown": (
        "[SCREENSHOT] The visible screen ({width}x{height} px) follows as an image ({sent})."),
    "screenshot_text_only": (
        "[SCREENSHOT] Not sent: the current model cannot see images. The page text above is "
        "what the browser shows."),
}

ZH: dict[str, str] = {
    "anchor_header": "### [WORKING MEMORY]",
    "current_turn": "Current turn: {turn}",
    "related_sop": "有不清晰的地方请再次读取{sop}",
    "checkpoint_info": "[Info] 已更新 {what}。",
    "checkpoint_nothing": "[Info] 已设检查点，无内容变化。",
    "checkpoint_first_tip": (
        "[SYSTEM TIPS] 工作记忆已保存。除非出现新的、不明显的事实"
        "，不要再次调用 update_working_checkpoint。"
    ),
    "summary_missing": "[SYSTEM] 回复文本中必须包含<summary>一行说明做了什么及原因</summary>！",
    "danger_checkpoint": (
        "[DANGER] 已连续 {n} 轮未设检查点。调用 update_working_checkpoint 保存关键上下文。"
        "停止无效重试，换策略，重读相关 SOP。"),
    "remind_file": (
        "[SYSTEM] 第 {turn} 轮。把检查点、关键发现和尝试过的方法"
        "写入**文件**备查（不只是工作记忆）。"
    ),
    "remind_ask_user": (
        "[DANGER] 第 {turn} 轮。必须调用 ask_user 汇报进度并获取"
        "方向，不要再盲目重试。"
    ),
    "plan_hint": (
        "[Plan Hint] 正在计划模式。必须 file_read({plan}) 确认当"
        "前步骤，回复开头引用：📌 当前步骤：..."
    ),
    "plan_limit": (
        "[DANGER] Plan模式已运行 {turn} 轮，已达上限。必须 ask_us"
        "er 汇报进度并确认是否继续。"
    ),
    "plan_entered": "[Info] 已进入计划模式，计划文件：{plan}",
    "plan_done": "[Info] 计划完成：{plan} 中无 [ ] 残留，退出计划模式。",
    "plan_verify_refused": (
        "[SYSTEM] 计划模式下声称完成但没有 [VERIFY] 验证步骤。请"
        "先验证并获得 VERDICT，再声称完成。"
    ),
    "no_progress_warn": (
        "[DANGER] 你已连续 {n} 轮用相同参数调用 {name}，没有进展"
        "。停止重复：换方法，或 ask_user。"
    ),
    "no_progress_end": "连续 {n} 轮用相同参数调用 {name}",
    "master": "[MASTER] {text}",
    "stale_key_info": (
        "[Note] key_info 设于 {n} 个任务之前；若这是新任务，请更新它，或用 "
        "update_working_checkpoint(key_info=\"\") 清空。"),
    "user_line": "[USER] {text}",
    "param_escalate": "在沙箱外运行；先征得用户同意。",
    "param_reason": "为何必须离开沙箱（会显示给用户）。",
    "agent_line": "[Agent] {text}",
    "answered_directly": "直接回答了用户问题",
    "empty_reply": "[System] 空回复。请重新生成回复并调用工具。",
    "empty_limit": "模型连续 {n} 次返回空回复",
    "incomplete_limit": "{n} 次回复在传输中断开：请检查网络连接或服务器日志",
    "max_tokens_limit": "{n} 次回复在 max_tokens 处被截断：请调大 max_tokens 或缩短任务",
    "incomplete_reply": "[System] 回复被截断。请重新生成并调用工具。",
    "max_tokens_reply": "[System] 达到 max_tokens 上限。请分多个小步骤完成。",
    "code_block_only": (
        "[System] 上一轮回复主要是一大段代码且未调用工具。若需执行或写入文件，请调用 code_run / "
        "file_write / file_patch；若只是展示，请补充说明。"),
    "code_missing": "[Error] 缺少代码：请传 'script' 参数，或在回复中放 ```{type} 代码块。",
    "inline_timeout": (
        "[Error] 进程内代码运行 {n} 秒后仍未结束。它仍在后台运行（线程无法终止），"
        "可能继续修改文件或状态。耗时的工作请用不带 inline_eval 的 code_run：那样可以被终止。"),
    "inline_aborted": (
        "[Error] 进程内代码运行时被中止。它仍在后台运行（线程无法终止），可能继续修改文件或状态。"),
    "content_missing": (
        "[Error] 缺少内容：请传 'content'，或在回复中放 <file_con"
        "tent>...</file_content>。"
    ),
    "long_prompt": "{head}\n\n[完整请求（{n} 字符）已保存在 {path}，请先用 file_read 读取再行动。]",
    "js_missing": (
        "[Error] 缺少脚本：请传 'script'（代码或 .js 路径），或在回复中放 ```javascript 代码块。"),
    "image_shown": (
        "[IMAGE] {name}：{format} {width}x{height}，{bytes:,} 字节；图像附后（{sent}）。"),
    "image_text_only": (
        "[IMAGE] {name}：{format} {width}x{height}，{bytes:,} 字节。当前模型看不到图像；"
        "如需更多信息，请用 code_run（如 Pillow）检查。"),
    "screenshot_shown": (
        "[SCREENSHOT] 可见屏幕（{width}x{height} 像素）的截图以图像附后（{sent}）。"),
    "screenshot_text_only": (
        "[SCREENSHOT] 未发送截图：当前模型看不到图像。上面的页面文本即浏览器所显示的内容。"),
}

TABLES = {"en": EN, "zh": ZH}

# Chinese tool texts; English lives in each tool's docstring.
TOOL_TEXT_ZH: dict[str, dict] = {
    "code_run": {
        "description": ("运行 python（临时文件）或 bash。大量数据放在文件里，不要写进代码。"
                        "后台进程随 agent 结束；`setsid CMD &` 可让服务继续运行。"),
        "params": {"script": "代码；省略时运行你回复中最后一个 ```python/```bash 代码块",
                   "type": "语言", "timeout": "超时秒数，到时结束其进程组（最多 600）",
                   "cwd": "运行目录，相对于工作目录",
                   "inline_eval": "在 agent 进程内运行 python（可用 handler、agent），"
                                  "返回其打印内容。不要在其中启动进程"}},
    "file_read": {
        "description": "读取文本文件（带行号），或以图像读取图像文件（PNG、JPEG、WebP、GIF）。",
        "params": {"path": "文件路径", "start": "起始行（从 1 开始）", "count": "读取行数",
                   "keyword": "改为显示其首次出现（忽略大小写）附近的行",
                   "show_linenos": "显示行号"}},
    "file_write": {
        "description": ("整体写文件（小改动用 file_patch）。内容取 content，"
                        "否则取你回复中的 <file_content>...</file_content> 块。"),
        "params": {"path": "文件路径，相对于工作目录",
                   "content": "内容；{{file:路径:起:止}} 插入该文件的这些行",
                   "mode": "写入位置"}},
    "file_patch": {
        "description": "把文件中唯一出现的 old_content 替换为 new_content。",
        "params": {"path": "文件路径，相对于工作目录", "old_content": "要替换的原文（须完全一致）",
                   "new_content": "新文本；{{file:路径:起:止}} 插入该文件的这些行"}},
    "update_working_checkpoint": {
        "description": "保存本任务后续要记住的事实，之后每轮都会带上。只在有新的关键事实时调用。",
        "params": {"key_info": "关键事实、目标与约束（空字符串清空）",
                   "related_sop": "本任务遵循的 SOP 路径"}},
    "ask_user": {
        "description": "向用户提问并等待回答。",
        "params": {"question": "问题", "candidates": "可选的答案"}},
    "web_scan": {
        "description": ("查看浏览器：标签页和当前页面的文本，可交互元素编号为 [N]"
                        "（在 web_execute_js 中用 ga(N)）。"),
        "params": {"tabs_only": "只列出标签页（省 token）",
                   "switch_tab_id": "先切换到此标签页",
                   "text_only": "纯文本，不带 [N] 标记",
                   "viewport": "只读可见屏幕附近的内容",
                   "screenshot": "同时返回可见屏幕的截图"}},
    "web_execute_js": {
        "description": (
            "在当前页面运行 JavaScript：导航、点击、填写、读取。支持顶层 await；返回最后的值"
            "（或 return 的值），以及引起的 DOM 变化、导航、新标签页和对话框。ga(N) 是上次 "
            "web_scan 的元素 [N]。导航后，在下一次调用中操作新页面。"),
        "params": {"script": "JS 代码或 .js 路径；省略时运行你回复中最后一个 ```javascript 代码块",
                   "switch_tab_id": "在此标签页运行（并切换过去）",
                   "save_to_file": "把完整返回值写入此文件，只返回预览",
                   "no_monitor": "不等待 DOM 变化（更快）",
                   "timeout": "超时秒数，到时停止脚本"}},
    "start_long_term_update": {
        "description": "任务完成后，把经过验证、长期有效的事实提炼进长期记忆。",
        "params": {}},
}


def lang_from_env() -> str:
    """``GA_LANG`` if it is ``en`` or ``zh``, else from the locale."""
    lang = os.environ.get("GA_LANG", "").lower()
    if lang in TABLES:
        return lang
    loc = os.environ.get("LC_ALL") or os.environ.get("LANG") or (locale.getlocale()[0] or "")
    return "zh" if loc.lower().startswith("zh") else "en"


class Texts:
    """Text lookup for one language, with user overrides from config."""

    def __init__(self, lang: str = "en", overrides: dict[str, str] | None = None):
        self.lang = lang if lang in TABLES else "en"
        self.table = {**TABLES[self.lang], **(overrides or {})}

    def __call__(self, key: str, **kw: object) -> str:
        return self.table[key].format(**kw)


def placeholders(text: str) -> set[str]:
    """The ``{names}`` a text is formatted with (ValueError on unbalanced braces)."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def check_overrides(texts: object, path: str | None, field: str) -> None:
    """Config text overrides: known text names, each using only the placeholders it is
    formatted with; else a ConfigError naming ``field.NAME``."""
    if not isinstance(texts, dict):
        raise ConfigError(path, field, f"must be a mapping of text names, got {texts!r}")
    for key, text in texts.items():
        problem = _override_problem(str(key), text)
        if problem:
            raise ConfigError(path, f"{field}.{key}", problem)


def _override_problem(key: str, text: object) -> str | None:
    """Why ``text`` cannot stand in for the built-in text ``key``; None when it can."""
    if key not in EN:
        return f"unknown text; known: {', '.join(EN)}"
    if not isinstance(text, str):
        return f"must be a string, got {text!r}"
    allowed = placeholders(EN[key])
    takes = ", ".join(f"{{{name}}}" for name in sorted(allowed)) or "no placeholders"
    try:
        used = placeholders(text)
    except ValueError as e:
        return f"bad braces ({e}); write {{{{ and }}}} for a literal brace"
    unknown = sorted(used - allowed)
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}}; this text takes {takes}"
    return None
