"""Sizes a reader can hold and no import circles: checked on the source, so the design
stays visible (issue 12: no module over ~300 lines, no class over ~150, no circle, not
even through an import inside a function). Issue 19: no module reaches into another's
private names, and test files are named after what they test."""
from __future__ import annotations

import ast
import re
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


# The layers of docs/architecture.md's table, lowest first: a module may import its own layer and the
# ones below, never one above. Shared definitions (errors, choices, config, plan, stats) sit
# at the bottom with the formats.
LAYERS = [
    ("definitions", ["feedline.core", "feedline.planning", "feedline.dataset", "feedline.fields", "feedline.sample"]),
    ("stores and decoders", ["feedline.stores", "feedline.decoders"]),
    ("transforms", ["feedline.transforms"]),
    ("converters and tools", ["converters", "feedline.dataset.verify", "feedline.dataset.describe",
                              "feedline.dataset.show"]),
    ("sources", ["feedline.sources"]),
    ("loader", ["feedline.loading"]),
    ("trainer", ["feedline.train"]),
    ("cli", ["feedline.cli", "feedline.__main__"]),
]


def layer_of(module: str) -> int | None:
    """The layer of the longest prefix that names ``module`` or a package above it."""
    matches = [(len(p), rank) for rank, (_, prefixes) in enumerate(LAYERS) for p in prefixes
               if module == p or module.startswith(p + ".")]
    return max(matches)[1] if matches else None


def test_layers_import_only_downwards():
    known = modules()
    upward = []
    for name, path in known.items():
        mine = layer_of(name)
        for target in imported(name, path, known):
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{name} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
    assert upward == []
    assert [m for m in known if layer_of(m) is None] == ["feedline"]  # every module has a layer


SELECTION = "feedline.decoders.selection"
ENGINE_NAMES = {"dali", "gpu", "threads"}


def choice_points(name: str, path: Path) -> list[str]:
    """Where module ``name`` takes a part in choosing the engine or the decoder: builds a
    decoder from a registry name, defines a resolver or the "auto" preference, or compares
    a value with an engine's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("decoders.registry"):
            found += [f"{name} imports {a.name} from the registry" for a in node.names
                      if a.name in ("build", "detects_damage")]
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign)):
            names = [node.name] if not isinstance(node, ast.Assign) else \
                [t.id for t in node.targets if isinstance(t, ast.Name)]
            found += [f"{name} defines {n}" for n in names if n == "AUTO_PREFERENCE" or (
                "resolve" in n and ("decoder" in n or "engine" in n)) or n in ("cpu_decoder", "DecoderName")]
        elif isinstance(node, ast.Compare):
            constants = [c.value for c in (node.left, *node.comparators) if isinstance(c, ast.Constant)]
            constants += [e.value for c in node.comparators if isinstance(c, (ast.Tuple, ast.List, ast.Set))
                          for e in c.elts if isinstance(e, ast.Constant)]
            found += [f"{name}:{node.lineno} compares with {c!r}" for c in constants if c in ENGINE_NAMES]
    return found


def test_engine_and_decoder_are_chosen_in_one_module():
    """Issue 19: the engine and decoder choices were resolved in five places; now only
    feedline.decoders.selection builds decoders by name, resolves "auto" and knows the engines' names
    (others dispatch on the resolved Engine)."""
    known = modules()
    assert choice_points(SELECTION, known[SELECTION])   # the checker sees the one place
    assert [p for name, path in known.items() if name != SELECTION for p in choice_points(name, path)] == []


def test_the_choice_checker_sees_a_second_resolver(tmp_path):
    (tmp_path / "m.py").write_text("from .decoders.registry import build\n"
                                   "def resolve_decoder_name(x):\n    return 'dali' if x == 'dali' else build(x)\n")
    assert choice_points("m", tmp_path / "m.py") == [
        "m imports build from the registry", "m defines resolve_decoder_name", "m:3 compares with 'dali'"]


def test_the_checker_sees_a_circle(tmp_path):
    """The checker itself: two modules importing each other inside functions are found."""
    (tmp_path / "a.py").write_text("def f():\n    from b import g\n")
    (tmp_path / "b.py").write_text("def g():\n    import a\n")
    known = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert imported("a", known["a"], known) == {"b"} and imported("b", known["b"], known) == {"a"}
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == ["a -> b -> a", "b -> a -> b"]
    assert circles({"p": {"p.x"}, "p.x": {"p"}}) == []   # a package and its own submodule


def private_uses(name: str, path: Path, known: dict) -> list[str]:
    """Each private name (``_x``, not ``__x__``) of another project module that ``name`` uses:
    ``from .m import _x``, or ``m._x`` where ``m`` names a module it imported."""
    def private(attr: str) -> bool:
        return attr.startswith("_") and not attr.startswith("__")

    base = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            parts = base.split(".")
            prefix = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (prefix, node.module or "") if p)
            for a in node.names:
                if f"{module}.{a.name}" in known:
                    aliases[a.asname or a.name] = f"{module}.{a.name}"
                elif private(a.name) and module != name:
                    found.append(f"{name} imports {module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                module = ".".join([aliases[value.id], *chain])
                if module in known and module != name:
                    found.append(f"{name} imports {module}.{node.attr}")
    return sorted(set(found))


def test_no_module_uses_another_modules_private_names():
    """A name with a leading underscore is its module's own: another module that needs it
    needs a public name (or the code belongs where the name is)."""
    known = modules()
    found = [use for name, path in known.items() for use in private_uses(name, path, known)]
    assert found == []


def test_the_private_name_checker_sees_both_forms(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "__init__.py").write_text("")
    (tmp_path / "p" / "a.py").write_text("_x = 1\n_y = 2\n")
    (tmp_path / "p" / "b.py").write_text("from .a import _x\nfrom . import a\nimport p.a\n"
                                         "def f():\n    return a._y, p.a._y, a.__name__, _x._z\n")
    known = {"p": tmp_path / "p" / "__init__.py", "p.a": tmp_path / "p" / "a.py", "p.b": tmp_path / "p" / "b.py"}
    assert private_uses("p.b", known["p.b"], known) == ["p.b imports p.a._x", "p.b imports p.a._y"]
    assert private_uses("p.a", known["p.a"], known) == []


# A test file is named after the module or behaviour it tests, never after the campaign, issue or
# review that wrote it (tests grouped that way scatter one module's tests over many files).
CAMPAIGN_NAMES = re.compile(r"test_(mutants?|mutations?|mutmut|campaigns?|issues?\d*|reviews?|regressions?|"
                            r"coverage|misc|extra|more)(_|\.py$)")


def test_no_test_file_is_named_after_a_campaign():
    tests = sorted(p.name for p in (ROOT / "tests").rglob("test_*.py"))
    assert tests and [name for name in tests if CAMPAIGN_NAMES.match(name)] == []
    assert CAMPAIGN_NAMES.match("test_mutants_journal.py") and CAMPAIGN_NAMES.match("test_issue19.py")
    assert not CAMPAIGN_NAMES.match("test_lmdb_store.py") and not CAMPAIGN_NAMES.match("test_mutable.py")


SLOT_MODULE = "feedline.sources.slot"


def test_a_slots_fields_are_assigned_only_in_its_own_module():
    """A Slot is made whole by its ring and changed only through its own methods: nowhere
    else in sources/ (where Slots live) is a Slot field assigned on an object
    (``x.plan = ...``, ``setattr(x, ...)``), and nothing is attached to one at run time.
    ``self.<name> = ...`` in a class of its own is that class's business, not a Slot's."""
    import dataclasses
    from feedline.sources.slot import Slot
    names = {f.name for f in dataclasses.fields(Slot)}
    assigned = []
    for module, path in modules().items():
        if module == SLOT_MODULE or not module.startswith("feedline.sources"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            for target in flat:
                if isinstance(target, ast.Attribute) and target.attr in names and \
                        not (isinstance(target.value, ast.Name) and target.value.id == "self"):
                    assigned.append(f"{module}:{node.lineno} assigns .{target.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and \
                    not (isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
                assigned.append(f"{module}:{node.lineno} calls setattr on another object")
    assert assigned == []


def test_the_slot_imports_nothing_else_of_sources():
    """The Slot sits at the bottom of sources/: the ring makes it, engines fill it, Finishers
    finish it; it knows none of them."""
    known = modules()
    assert {m for m in imported(SLOT_MODULE, known[SLOT_MODULE], known) if m.startswith("feedline.sources")} == set()


MIRRORED = ("sources", "transforms", "stores")


def test_each_module_of_sources_transforms_and_stores_has_its_test_file():
    """Tests mirror those packages: feedline/<package>/<module>.py is tested in
    tests/test_<module>.py or tests/test_<package>_<module>.py (more files may follow the
    name, e.g. test_sources_policy_errors.py)."""
    tests = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    missing = []
    for package in MIRRORED:
        for path in sorted((ROOT / "feedline" / package).glob("*.py")):
            if path.stem == "__init__":
                continue
            if not {f"test_{path.stem}.py", f"test_{package}_{path.stem}.py"} & tests:
                missing.append(f"feedline/{package}/{path.name}")
    assert missing == []
