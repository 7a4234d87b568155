"""The package's architecture, checked: public names only across modules, no import cycle,
no function bound over a submodule's name, and cluster code that never imports MXNet."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import mgpu

SRC = Path(mgpu.__file__).parent


def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    found = {"mgpu": SRC / "__init__.py"}
    for info in pkgutil.walk_packages(mgpu.__path__, "mgpu."):
        spec = importlib.util.find_spec(info.name)
        found[info.name] = Path(spec.origin)
    return found


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """(module, imported name or None, line) for each import of an ``mgpu`` module in
    ``name``'s source, at any depth (inside functions too)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("mgpu")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.startswith("mgpu"):
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in MODULES:
                        found.append((sub, None, node.lineno))
                    else:
                        found.append((base, alias.name, node.lineno))
    return found


def test_the_walk_finds_the_layout():
    for name in ("mgpu.loop", "mgpu.probes.timing", "mgpu.programs.ps", "mgpu.cluster.local",
                 "mgpu.book.claims"):
        assert name in MODULES


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_imports_a_private_name(name):
    """A leading underscore means "this module only": no other module imports such a name
    or a private module, and none reaches into another module for one (``mgpu.x._y``)."""
    bad = [f"line {line}: {module}" + (f".{obj}" if obj else "")
           for module, obj, line in _imports(name)
           if any(part.startswith("_") for part in module.split(".")[1:])
           or (obj or "").startswith("_")]
    text = MODULES[name].read_text("utf-8")
    bad += [f"{other}._ used" for other in MODULES if other != name and f"{other}._" in text]
    assert not bad, f"{name} uses private names of other modules: {bad}"


def test_no_import_cycle():
    """The imports between the package's modules (inside functions too) form no cycle."""
    graph = {name: {m for m, _, _ in _imports(name) if m in MODULES and m != name
                    and not name.startswith(m + ".") and m != "mgpu"}
             for name in MODULES}
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


@pytest.mark.parametrize("name", sorted(n for n, p in MODULES.items() if p.name == "__init__.py"))
def test_no_name_shadows_a_submodule(name):
    """``import mgpu.x as m`` must give the module: no package binds another object over the
    name of one of its submodules (once everything is imported)."""
    package = importlib.import_module(name)
    for sub in MODULES:
        if sub.rpartition(".")[0] == name:
            importlib.import_module(sub)
            short = sub.rpartition(".")[2]
            value = getattr(package, short, None)
            assert isinstance(value, types.ModuleType), f"{name}.{short} is {value!r}"
    if name == "mgpu":
        for export in mgpu.EXPORTS:
            assert f"mgpu.{export}" not in MODULES or isinstance(
                getattr(mgpu, export), types.ModuleType), export


def test_every_module_is_public_or_a_package():
    """Each module with code is in ``mgpu.PUBLIC_MODULES`` (packages hold only docstrings)."""
    modules = {n for n, p in MODULES.items() if p.name != "__init__.py"} - {"mgpu.__main__"}
    assert modules == set(mgpu.PUBLIC_MODULES)


def test_every_public_name_is_mgpu_dot_name():
    """One public path: every name a module lists in ``__all__`` is ``mgpu.<name>``, the
    same object, and no two modules export the same name."""
    seen: dict[str, str] = {}
    for name in mgpu.PUBLIC_MODULES:
        module = importlib.import_module(name)
        assert list(module.__all__) == mgpu.public_names(name)
        for export in module.__all__:
            assert export not in seen, f"{export}: in {seen.get(export)} and {name}"
            seen[export] = name
            assert getattr(mgpu, export) is getattr(module, export), f"mgpu.{export}"
    assert set(seen) == set(mgpu.__all__)


@pytest.mark.parametrize("name", sorted(n for n in MODULES
                                        if n.startswith("mgpu.cluster") or n == "mgpu"))
def test_cluster_code_imports_without_mxnet(name):
    """``import mgpu`` and the cluster modules leave MXNet unimported (and the environment
    untouched), in a fresh interpreter."""
    code = (f"import os, sys; before = dict(os.environ); import {name}; "
            "assert 'mxnet' not in sys.modules, 'mxnet imported'; "
            "assert dict(os.environ) == before, 'environment changed'")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
