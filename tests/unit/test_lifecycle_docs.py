"""docs/lifecycle.md shows the transition table as the code has it.

Run ``python tests/unit/test_lifecycle_docs.py`` to rewrite the table after changing
troupe.api.lifecycle.
"""

from __future__ import annotations

import re
from pathlib import Path

from troupe.api.lifecycle import TRANSITIONS, WHY

DOC = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"
BEGIN = "<!-- transitions:begin (rendered from troupe.api.lifecycle) -->"
END = "<!-- transitions:end -->"


def render() -> str:
    lines = []
    for enum, moves in TRANSITIONS.items():
        kind = enum.__name__.removesuffix("Status").lower()
        lines += [f"\n**{kind}**\n", "| from | to | when |", "|---|---|---|"]
        for old, targets in moves.items():
            if not targets:
                lines.append(f"| `{old}` | — | final |")
            for new in sorted(targets):
                lines.append(f"| `{old}` | `{new}` | {WHY[enum][(old, new)]} |")
    return "\n".join(lines) + "\n"


def current() -> str:
    text = DOC.read_text()
    m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    assert m, f"{DOC} lacks the markers {BEGIN} ... {END}"
    return m.group(1)


def test_every_move_is_explained() -> None:
    for enum, moves in TRANSITIONS.items():
        for old, targets in moves.items():
            for new in targets:
                assert (old, new) in WHY[enum], (old, new)


def test_docs_show_the_table_of_the_code() -> None:
    assert current() == render(), "run: python tests/unit/test_lifecycle_docs.py"


if __name__ == "__main__":
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN) + 1, text.index(END)
    DOC.write_text(text[:start] + render() + text[end:])
