"""Rules of the code's shape that no linter checks."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "troupe"
MAX_LINES = 450


def test_no_module_over_450_lines() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_one_module_writes_status() -> None:
    """Every status change goes through troupe.api.lifecycle (transition / begin)."""
    writers = set()
    for p in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for t in targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Attribute) and e.attr == "status":
                        writers.add(f"{p.relative_to(SRC)}:{ast.unparse(e)}")
    # An error's HTTP status (api/errors.py) is no lifecycle status.
    assert writers == {"api/lifecycle.py:entity.status", "api/errors.py:self.status"}, writers


def test_repo_cites_only_itself() -> None:
    """The docs are the contract: code, docs, examples and scripts cite nothing outside the
    repository (the starting design and review notes are not shipped with it)."""
    root = SRC.parents[1]
    outside = ("SPEC.md", "ARCHITECTURE.md", "shared/design", "audit-2026")
    cited = [
        f"{p.relative_to(root)}: {word}"
        for folder in ("src", "docs", "examples", "scripts", "bench", "images", "tests")
        for p in [root / "README.md", *(root / folder).rglob("*")]
        if p.is_file()
        and p.suffix in {".py", ".md", ".sh", ".html", ".js", ".css", ""}
        and "vendor" not in p.parts
        and p != Path(__file__).resolve()
        for word in outside
        if word in p.read_text(errors="replace")
    ]
    assert not cited, cited


def test_test_modules_outside_packages_have_their_own_names() -> None:
    """pytest imports a test folder without ``__init__.py`` by basename: two such modules of one
    name stop the whole run at collection."""
    tests = SRC.parents[1] / "tests"
    loose = [
        p
        for p in tests.rglob("test_*.py")
        if not (p.parent / "__init__.py").exists() and "vendor" not in p.parts
    ]
    names = [p.name for p in loose]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
