"""The import graph stays readable: our own modules are imported at module top, and ``dppo-bench --help`` stays light.

A function-local import of ``dppo_bench`` is allowed only where the import is heavy (torch, verl), optional or
breaks a real cycle, and then says so in a comment (``# heavy: ...``, ``# optional: ...``, ``# cycle: ...``) on its
line or on the line above the run of imports it opens.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SRC = REPO_ROOT / "src"
REASON = re.compile(r"#.*\b(heavy|optional|cycle)\b", re.IGNORECASE)
HEAVY = ("torch", "transformers", "verl", "vllm", "ray", "datasets")


def own_module(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "dppo_bench"
    return any(alias.name.split(".")[0] == "dppo_bench" for alias in node.names)


def unexplained_local_imports(source: str) -> list[int]:
    """Lines of the function-local imports of our own modules in ``source`` that give no reason in a comment."""
    lines = source.splitlines()
    tree = ast.parse(source)
    import_lines = {
        line
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for line in range(node.lineno, node.end_lineno + 1)
    }
    found = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or not own_module(node):
                continue
            above = node.lineno - 1
            while above in import_lines and not REASON.search(lines[above - 1]):
                above -= 1  # a run of imports shares the comment above its first line
            said = [lines[node.lineno - 1], lines[above - 1] if above >= 1 else ""]
            if not any(REASON.search(line) for line in said):
                found.add(node.lineno)
    return sorted(found)


def test_function_local_imports_of_our_modules_say_why():
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        for line in unexplained_local_imports(path.read_text())
    ]
    assert not found, (
        "import these at module top, or say why they must stay in the function (# heavy: / # optional: / # cycle:): "
        + ", ".join(found)
    )


def test_the_rule_catches_an_unexplained_import_and_accepts_a_reason():
    bad = "def f():\n    import os\n\n    from dppo_bench.io import read_json\n    return read_json\n"
    assert unexplained_local_imports(bad) == [4]
    relative = "class A:\n    def f(self):\n        from .io import read_json  # a comment, but no reason\n"
    assert unexplained_local_imports(relative) == [3]
    good = (
        "def f():\n    # heavy: torch\n    from dppo_bench.topk import logits_at\n"
        "    from dppo_bench.mismatch import x\n\n"
        "    from dppo_bench.plan import plan  # cycle: plan imports this module\n    return logits_at, x, plan\n"
    )
    assert unexplained_local_imports(good) == []


def test_help_imports_no_heavy_library():
    """Building the parser imports every command module: none may pull torch, verl or vLLM in at module top."""
    code = (
        "import sys\nfrom dppo_bench.cli import build_parser\nbuild_parser()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_each_module_imports_first_without_a_cycle():
    """Each of our modules imports first, with none of ours loaded before it, so no cycle hides behind an order.
    The verl plugin's entry registers losses with verl at import, once per process: it is imported last."""
    modules = [
        ".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted(SRC.rglob("*.py"))
        if p.name != "__main__.py"
    ]
    modules.sort(key=lambda m: m == "dppo_bench.verl_plugin.entry")
    code = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    for name in [n for n in sys.modules if n.split('.')[0] == 'dppo_bench']:\n"
        "        del sys.modules[name]\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ImportError as e:\n"
        "        print(f'{m}: {e}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""
