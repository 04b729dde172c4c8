"""Pydantic's validation errors as rules in words, for people: an error names its field and
says the rule ("name: 1-63 letters, digits, ...") rather than quoting the regular expression
or pydantic's own phrasing. The web UI shows these next to the field, the CLI prints them.

A pattern's words are kept beside the pattern (``NAME_RULE`` by ``NAME_PATTERN``): the field's
OpenAPI description and its error say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from troupe.api.exec import KERNEL_PATTERN
from troupe.api.models import KERNEL_RULE, NAME_PATTERN, NAME_RULE

#: The patterns of the API's fields, in words.
PATTERN_RULES = {NAME_PATTERN: NAME_RULE, KERNEL_PATTERN: KERNEL_RULE}

#: Pydantic's error types whose message is replaced, with the bounds from the error's context.
_WORDS = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "string_too_long": "must be at most {max_length} characters",
    "string_type": "must be text",
    "missing": "required",
}


def location(loc: tuple[Any, ...]) -> str | None:
    """Where the error is, as the API's own rules name fields: ``roles[1].resources.mem``."""
    out = ""
    for part in loc:
        if part in ("body", "query", "path"):
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or None


def words(err: Mapping[str, Any]) -> str:
    """The rule that ``err`` (one of pydantic's errors) broke, in words."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in PATTERN_RULES:
        return f"must be {PATTERN_RULES[ctx['pattern']]}"
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind in _WORDS:
        try:
            bounds = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
            return _WORDS[kind].format(**bounds)
        except KeyError:
            pass
    return str(err.get("msg", "invalid")).removeprefix("Value error, ")
