"""The cores are sans-IO: no module under tidings/core imports I/O, clocks, threads or randomness."""

import ast
from pathlib import Path

import tidings.core

FORBIDDEN = {"asyncio", "socket", "selectors", "threading", "time", "random", "os", "uuid", "secrets",
             "subprocess", "multiprocessing", "concurrent"}
CORE = Path(tidings.core.__file__).parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(path)}


def test_core_modules_import_no_io_clock_or_randomness():
    modules = sorted(CORE.rglob("*.py"))
    assert len(modules) > 10
    offenders = {str(p.relative_to(CORE)): sorted(imported_roots(p) & FORBIDDEN) for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_core_does_not_import_runtimes():
    runtimes = ("aio", "sim", "client", "spark", "cli", "storage", "testing", "sync")
    for path in CORE.rglob("*.py"):
        for name in imported_modules(path):
            parts = name.split(".")
            assert not (parts[0] == "tidings" and len(parts) > 1 and parts[1] in runtimes), (path, name)


def test_the_check_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os.path\nfrom time import monotonic\n")
    assert imported_roots(bad) & FORBIDDEN == {"os", "time"}
