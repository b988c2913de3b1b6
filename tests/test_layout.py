"""The house rules of the layout (docs/architecture.md): only a format's package and the registry know a format."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from trendconv import formats

PACKAGE = Path(__file__).resolve().parent.parent / "trendconv"


def modules_outside_the_formats() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] != "formats")


def imported(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def test_no_module_outside_the_formats_names_a_format_or_imports_one():
    names = set(formats.names())
    packages = {f"trendconv.formats.{name}" for name in names}
    found = []
    for path in modules_outside_the_formats():
        tree = ast.parse(path.read_text())
        where = path.relative_to(PACKAGE.parent)
        found += [f"{where}:{node.lineno} {node.value!r}" for node in ast.walk(tree) if _names_a_format(node, names)]
        found += [f"{where} imports {name}" for name in imported(tree) if name.startswith(tuple(packages))]
    assert found == []


def _names_a_format(node: ast.AST, names: set[str]) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names


def test_only_the_registry_imports_the_format_packages():
    registry = PACKAGE / "formats" / "registry.py"
    importers = {
        path.relative_to(PACKAGE).as_posix()
        for path in (PACKAGE / "formats").glob("*.py")
        if any(
            name.startswith("trendconv.formats.") and name.count(".") >= 2 and name.split(".")[2] in formats.names()
            for name in imported(ast.parse(path.read_text()))
        )
    }
    assert importers == {registry.relative_to(PACKAGE).as_posix()}


def test_init_files_re_export_and_hold_no_code():
    """An __init__.py imports and lists; the one exception is trendconv's own, which also sets two environment
    defaults and re-exports lazily."""
    holding = []
    for path in sorted(PACKAGE.rglob("__init__.py")):
        if path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text())
        allowed = (ast.Import, ast.ImportFrom, ast.Expr, ast.Assign)  # the docstring, and __all__
        holding += [f"{path.relative_to(PACKAGE)}:{node.lineno}" for node in tree.body if not isinstance(node, allowed)]
        holding += [
            f"{path.relative_to(PACKAGE)}:{node.lineno}"
            for node in tree.body
            if isinstance(node, ast.Assign) and [target.id for target in node.targets] != ["__all__"]
        ]
    assert holding == []


def test_every_module_imports_first():
    """Whichever module a program imports first, no import cycle breaks it: `trendconv check` once failed so,
    imported alone, while every test that had imported trendconv.loading before passed."""
    names = sorted(
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in PACKAGE.rglob("*.py")
    )
    script = "import importlib, sys; importlib.import_module(sys.argv[1])"
    processes = {name: subprocess.Popen([sys.executable, "-c", script, name], stderr=subprocess.PIPE) for name in names}
    failed = {name: process.communicate()[1].decode().splitlines()[-1:] for name, process in processes.items()}
    assert {name: lines for name, lines in failed.items() if processes[name].returncode} == {}
