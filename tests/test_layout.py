"""The package's layout is its architecture: packages by stage, no import circle between
two of them, no module reaching for another's underscore names, and only ground-floor
modules beside the packages (docs/architecture.md)."""

import ast
from pathlib import Path

import zagg

ROOT = Path(zagg.__file__).parent
GROUND = {"__init__", "__main__", "errors", "grid", "lazy", "packaged", "stages"}


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def _parse_all() -> dict[Path, ast.Module]:
    """Every module's syntax tree, parsed once when this file is imported (at collection,
    before any test runs): CPython 3.11's AST converter keeps its recursion count per
    interpreter, not per thread, so an ``ast.parse`` while another thread of the process
    (one an earlier test left running) builds syntax trees too can fail with "AST
    constructor recursion depth mismatch", on a fresh thread as on the main one."""
    return {path: ast.parse(path.read_text(), str(path)) for _, path in modules()}


TREES = _parse_all()


def parse(path: Path) -> ast.Module:
    return TREES[path]


def imports(name: str, path: Path):
    """``(module imported, names taken)`` of every import of a zagg module in ``path``."""
    package = path.name == "__init__.py"
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.ImportFrom):
            base = name.split(".") if package else name.split(".")[:-1]
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("zagg"):
                yield target, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("zagg"):
                    yield alias.name, []


def floor_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "zagg"


def test_zagg_holds_only_packages_and_ground_floor_modules():
    flat = {p.stem for p in ROOT.glob("*.py")}
    assert flat <= GROUND, sorted(flat - GROUND)
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert {"engine", "pipeline", "config", "reducers", "cluster", "cli", "read"} <= packages
    for pkg in packages:
        doc = ast.get_docstring(parse(ROOT / pkg / "__init__.py"))
        assert doc and "import" in doc, f"zagg/{pkg}/__init__.py should say what it may import"


def test_no_import_circle_between_packages():
    known = {name for name, _ in modules()}
    edges: dict[str, set[str]] = {}
    for name, path in modules():
        for target, names in imports(name, path):
            # ``from zagg import grid`` imports the module zagg.grid
            hits = [f"{target}.{n}" for n in names if f"{target}.{n}" in known] or [target]
            for hit in hits:
                a, b = floor_of(name), floor_of(hit)
                if a != b:
                    edges.setdefault(a, set()).add(b)
    # depth-first search for a cycle
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(edges.get(v, ())):
            if state.get(w) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(w) :] + [w]))
            if w not in state:
                visit(w)
        path.pop()
        state[v] = 2

    for v in sorted(edges):
        if v not in state:
            visit(v)


def test_no_module_imports_another_modules_underscore_names():
    found = [
        (name, target, n)
        for name, path in modules()
        for target, names in imports(name, path)
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert found == []
