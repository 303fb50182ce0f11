"""The layer picture of docs/architecture.md, drawn from the imports: a module imports only its own layer's and
lower layers' modules, and no two top-level modules import each other (directly or round a cycle)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "dppo_bench"

# Lowest first. Within a layer, imports may go either way unless they close a cycle.
LAYERS = [
    {"canonical", "io", "errors", "tex", "vllm_cpu"},
    {"divergence", "topk", "mismatch"},
    {"methods"},
    {"config"},
    {"provenance", "problem_sets"},
    {"rundir", "runlock", "masked_token_files"},
    {
        "eval",
        "local",
        "probe",
        "verl_plugin",
        "verl_launch",
        "aggregate",
        "plan",
        "verify",
        "start_checks",
        "packaged_model",  # converts a wheel's model file into local's save format
    },
    {"commands", "cli", "__main__"},
]
KNOWN_BACK_ARROWS: set[tuple[str, str]] = set()  # arrows that run back up, each with its reason: none today


def top_level_imports() -> dict[str, set[str]]:
    """top-level module or package of src/dppo_bench -> the top-level ones it imports."""
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        source = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dppo_bench":
                parts = node.module.split(".")
                names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("dppo_bench.")]
            edges.setdefault(source, set()).update(n for n in names if n != source)
    edges.pop("__init__", None)
    return edges


def layer_of(module: str) -> int:
    (index,) = [i for i, layer in enumerate(LAYERS) if module in layer] or [None]
    assert index is not None, f"src/dppo_bench/{module} is in no layer of this test (and docs/architecture.md)"
    return index


def test_every_import_runs_down_the_layers():
    back = {
        (source, target)
        for source, targets in top_level_imports().items()
        for target in targets
        if layer_of(target) > layer_of(source)
    }
    assert back == KNOWN_BACK_ARROWS, f"imports that run back up the layers: {sorted(back - KNOWN_BACK_ARROWS)}"


def test_no_cycle_within_a_layer():
    edges = top_level_imports()
    for source, targets in edges.items():
        for target in targets:
            if layer_of(source) == layer_of(target):
                assert source not in reachable(edges, target), f"{source} and {target} import each other"


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen
