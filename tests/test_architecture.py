"""Project hygiene checked in every test run: the import layers of docs/reference/design.md §2 and ruff."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_layers_hold():
    """import-linter contracts in pyproject.toml (gym torch-free, training never imports inference, ...)."""
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is a dev dependency: pip install -e '.[dev]'"
    result = subprocess.run([exe], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module in ``graph`` (Tarjan's algorithm,
    iterative): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_circles():
    """No module of aloft imports, directly or not, one that imports it back (imports made only for
    type checking aside): a shared piece lives in the lowest layer that needs it (issue 23)."""
    import grimp

    cycles = import_cycles(grimp.build_graph("aloft", exclude_type_checking_imports=True))
    assert cycles == [], f"import circles: {cycles}"


def test_the_cycle_finder_finds_a_cycle():
    class Graph:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, module):
            return self.edges.get(module, set())

    assert import_cycles(Graph()) == [["a", "b", "c"]]


MODULE_LINE_LIMIT = 500


def test_no_module_is_over_500_lines():
    """One concern per module (issue 23): a module that outgrows 500 lines is split by concern,
    with its public imports kept, rather than left to grow."""
    long = {
        str(path.relative_to(REPO)): lines
        for path in sorted((REPO / "src" / "aloft").rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MODULE_LINE_LIMIT
    }
    assert long == {}, f"modules over {MODULE_LINE_LIMIT} lines (split them by concern): {long}"


def test_ruff_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:]


def test_gym_imports_without_torch():
    code = "import sys, aloft.gym; assert 'torch' not in sys.modules, 'aloft.gym pulled in torch'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
