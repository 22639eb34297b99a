"""Tool bodies as plain functions. They return data or raise ``ToolError``."""


class ToolError(Exception):
    """A problem the model can act on; its text goes back to the model as ``[Error] ...``."""

    for_model = True  # dispatch shows only the message, not the exception type


def clip(text: str, limit: int, marker: str = "\n\n[... {n} chars omitted ...]\n\n") -> str:
    """Keep the head and tail of ``text`` within about ``limit`` characters."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return text[:half] + marker.format(n=len(text) - 2 * half) + text[-half:]
