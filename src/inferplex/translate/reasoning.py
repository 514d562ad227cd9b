"""OpenAI's `reasoning_effort` as a thinking-token budget, for providers that take a budget instead.

Anthropic (`thinking.budget_tokens`) and Gemini (`thinkingConfig.thinkingBudget`) size thinking in tokens;
OpenAI callers name a level. One table keeps the two translations consistent. Anthropic's minimum budget is
1,024 tokens, so every level that thinks at all gets at least that.
"""

from __future__ import annotations

from typing import Any

from inferplex.errors import InvalidRequest

BUDGETS = {"none": 0, "minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768}


def budget(effort: Any) -> int | None:
    """The token budget for a `reasoning_effort`, None when absent; an unknown level is a 400."""
    if effort is None:
        return None
    if not isinstance(effort, str) or effort not in BUDGETS:  # a list or object is not a level (nor hashable)
        levels = ", ".join(BUDGETS)
        raise InvalidRequest(f"Invalid value for 'reasoning_effort': use one of {levels}.", param="reasoning_effort")
    return BUDGETS[effort]
