"""The package's layers go one way: base -> graph -> render -> models -> views -> checks -> release.

Base is the top-level modules (``autogradlab.device``, ``autogradlab.units``, ...).
A module may import its own layer and any lower one, never a higher one; this test
reads every import statement (also those inside functions) and names each back edge.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "widgets" / "autogradlab"
LAYERS = ["base", "graph", "render", "models", "views", "checks", "release"]


def layer_of(module: str) -> str:
    """``autogradlab.models.vjp`` -> 'models'; ``autogradlab.units`` -> 'base'."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return parts[1]
    return "base"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [(node.lineno, n) for n in names if n.startswith("autogradlab.")]
            if node.module == "autogradlab":
                found += [(node.lineno, f"autogradlab.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("autogradlab.")]
    return found


def test_every_top_level_subpackage_is_a_known_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(LAYERS), f"unknown layer(s): {packages - set(LAYERS)}; add them to LAYERS in order"


def test_no_import_goes_up_a_layer():
    back_edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = layer_of(module_name(path))
        for line, target in imports_of(path):
            if LAYERS.index(layer_of(target)) > LAYERS.index(own):
                back_edges.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} ({own}) imports {target} ({layer_of(target)})"
                )
    assert not back_edges, "imports against the layer order:\n" + "\n".join(back_edges)


def test_the_contract_test_sees_a_back_edge(tmp_path):
    """The checker itself must be able to fail: a graph module importing a view is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from autogradlab.views import GraphView\n")
    assert {layer_of(target) for _, target in imports_of(bad)} == {"views"}
    assert LAYERS.index("views") > LAYERS.index("graph")
