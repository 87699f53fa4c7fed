"""Sizes a reader can hold and no import circles: checked on the source, so the design
stays visible (issue 12: no module over ~300 lines, no class over ~150, no circle, not
even through an import inside a function)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("feedline", "converters")
MAX_MODULE_LINES = 300
MAX_CLASS_LINES = 150


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imported(name: str, path: Path, known: dict) -> set[str]:
    """The project modules ``name`` imports anywhere in its body (functions included)."""
    base = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            parts = base.split(".")
            prefix = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (prefix, node.module or "") if p)
            candidates = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        for target in candidates:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
    return targets


def test_no_module_or_class_is_too_long():
    too_long = []
    for name, path in modules().items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                too_long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert too_long == []


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Every path by which a module reaches itself. A submodule's import of its own package
    is left out: Python imports every submodule's packages first anyway."""
    edges = {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in graph.items()}
    found = []
    for start in edges:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    found.append(" -> ".join(path + (nxt,)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + (nxt,)))
    return sorted(set(found))


def test_no_import_circles():
    known = modules()
    assert circles({name: imported(name, path, known) for name, path in known.items()}) == []


def test_the_checker_sees_a_circle(tmp_path):
    """The checker itself: two modules importing each other inside functions are found."""
    (tmp_path / "a.py").write_text("def f():\n    from b import g\n")
    (tmp_path / "b.py").write_text("def g():\n    import a\n")
    known = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert imported("a", known["a"], known) == {"b"} and imported("b", known["b"], known) == {"a"}
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == ["a -> b -> a", "b -> a -> b"]
    assert circles({"p": {"p.x"}, "p.x": {"p"}}) == []   # a package and its own submodule
