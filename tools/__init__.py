"""Tool bodies as plain functions. They return data or raise ``ToolError``."""


class ToolError(Exception):
    """A problem the model can act on; its text goes back to the model as ``[Error] ...``."""
