"""Issue 20's bounds on the core's shape, held: the composer (core/broker/broker.py) at most 300
lines, no module under src/tidings/core over 500 and no class there over 400 (docs/architecture.md)."""

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "src" / "tidings" / "core"
COMPOSER_LINES_MAX = 300
MODULE_LINES_MAX = 500
CLASS_LINES_MAX = 400


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_composer_is_at_most_300_lines():
    assert lines(CORE / "broker" / "broker.py") <= COMPOSER_LINES_MAX


def test_no_core_module_over_500_lines_and_no_class_over_400():
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) > 100  # the walk found the core
    too_long = [f"{p.relative_to(CORE)}: {lines(p)}" for p in modules if lines(p) > MODULE_LINES_MAX]
    classes = [(p, node) for p in modules for node in ast.walk(ast.parse(p.read_text()))
               if isinstance(node, ast.ClassDef)]
    too_big = [f"{p.relative_to(CORE)} {c.name}: {c.end_lineno - c.lineno + 1}" for p, c in classes
               if c.end_lineno is not None and c.end_lineno - c.lineno + 1 > CLASS_LINES_MAX]
    assert not too_long, too_long
    assert not too_big, too_big
