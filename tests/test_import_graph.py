"""The dependency rule, read from the source: envs <- agents <- eval <- study <- passkt.

Every ``import`` statement of the package counts, at module level and inside functions alike: a
module never imports from a layer above its own, internal imports form no cycle, and an import
inside a function says why it is there (an optional dependency, or a measured start-up cost) in a
comment on its line or the line above. The checker is tested on small trees it must reject.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"envs": "passkt.envs", "agents": "passkt.agents", "eval": "passkt.eval"}
FOLDERS |= {"study": "passkt.study", "passkt": "passkt"}
LAYERS = {"passkt.envs": 0, "passkt.agents": 1, "passkt.eval": 2, "passkt.study": 3}
"""Layer of each subpackage; anything else in ``passkt`` (its API, the CLI) is the top, 4."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    in_function: bool
    explained: bool


def layer(module: str) -> int:
    return next((v for k, v in LAYERS.items() if module == k or module.startswith(k + ".")), 4)


def module_names(root: Path) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file of the mapped folders under ``root``."""
    names = {}
    for folder, package in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            names[".".join([package, *parts])] = path
    return names


def edges(root: Path) -> list[Edge]:
    """Every internal import of the tree under ``root``, resolved to the module it loads."""
    names = module_names(root)
    found = []
    for source, path in names.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        inside = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
        }
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}".rstrip(".")
                wanted = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            targets = set()
            for name in wanted:
                while name and name not in names:
                    name = name.rpartition(".")[0]
                if name and name != source and name.startswith("passkt"):
                    targets.add(name)
            context = " ".join(lines[max(node.lineno - 2, 0) : node.end_lineno])
            for target in sorted(targets):
                found.append(Edge(source, target, node.lineno, id(node) in inside, "#" in context))
    return found


def upward(found: list[Edge]) -> list[Edge]:
    return [e for e in found if layer(e.target) > layer(e.source)]


def cycles(found: list[Edge]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in found:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def unexplained(root: Path) -> list[str]:
    """Imports inside functions (any module, internal or not) without a comment saying why."""
    out = []
    for path in module_names(root).values():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for function in ast.walk(ast.parse(text)):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    context = " ".join(lines[max(node.lineno - 2, 0) : node.end_lineno])
                    if "#" not in context:
                        out.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(set(out))


@pytest.fixture(scope="module")
def graph() -> list[Edge]:
    return edges(ROOT)


def test_the_graph_is_read(graph):
    assert len(graph) > 300
    assert any(
        e.source == "passkt.eval.evaluate" and e.target.startswith("passkt.agents") for e in graph
    )


def test_no_module_imports_from_a_layer_above(graph):
    assert upward(graph) == []


def test_internal_imports_form_no_cycle(graph):
    assert cycles(graph) == []


def test_every_import_inside_a_function_says_why():
    assert unexplained(ROOT) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_the_checker_rejects_an_upward_import_even_inside_a_function(tmp_path):
    root = _tree(
        tmp_path,
        {
            "envs/__init__.py": "",
            "envs/base.py": "def f():\n    from passkt.eval.store import load_run  # late\n",
            "eval/__init__.py": "",
            "eval/store.py": "import passkt.envs.base\n",
        },
    )
    found = edges(root)
    assert [(e.source, e.target, e.in_function) for e in upward(found)] == [
        ("passkt.envs.base", "passkt.eval.store", True)
    ]
    assert cycles(found) == [["passkt.envs.base", "passkt.eval.store"]]


def test_the_checker_rejects_a_cycle_and_an_unexplained_late_import(tmp_path):
    root = _tree(
        tmp_path,
        {
            "agents/__init__.py": "",
            "agents/a.py": "from passkt.agents import b\n",
            "agents/b.py": "def g():\n    from passkt.agents.a import x\n",
            "agents/c.py": "def h():\n    import torch  # optional: the hf extra\n",
        },
    )
    found = edges(root)
    assert upward(found) == [] and cycles(found) == [["passkt.agents.a", "passkt.agents.b"]]
    assert unexplained(root) == ["agents/b.py:2"]
