"""Tools for environments: ``@tool``, ``ToolGroup``, tool-call parsing and reusable tool groups.

Torch-free. See ``aloft.gym.tools.base`` for defining tools and groups and
``aloft.tool_calls`` for the call formats (tags, Hermes/Qwen JSON, OpenAI ``tool_calls``).
The heavier groups (python sandbox, sql, search) live in their own modules and are imported from
there, so importing this package stays light.
"""

from aloft.gym.tools.base import (
    Tool,
    ToolDefinitionError,
    ToolError,
    ToolGroup,
    ToolResult,
    ToolStats,
    ToolTimeoutError,
    tool,
)
from aloft.gym.tools.calculator import CalculatorTools
from aloft.tool_calls import (
    ParseError,
    ParseResult,
    ToolCall,
    first_tag,
    last_tag,
    parse_hermes_calls,
    parse_openai_tool_calls,
    parse_tag_calls,
    strip_code_fence,
)

__all__ = [
    "CalculatorTools",
    "ParseError",
    "ParseResult",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolError",
    "ToolGroup",
    "ToolResult",
    "ToolStats",
    "ToolTimeoutError",
    "first_tag",
    "last_tag",
    "parse_hermes_calls",
    "parse_openai_tool_calls",
    "parse_tag_calls",
    "strip_code_fence",
    "tool",
]
