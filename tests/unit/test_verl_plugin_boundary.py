"""The two verl programs stay apart: the plugin that runs inside verl's processes (``dppo_bench.verl_plugin``)
imports nothing of the launcher (``dppo_bench.verl_launch``), and the launcher imports of the plugin only its
contract, which imports no other plugin module and no verl.

The import of every plugin module happens in a fresh process with the installed verl, so a plugin module that
needs the launcher (or fails to import at all) fails here in seconds, not in the verl end-to-end test.
"""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "dppo_bench"
PLUGIN, LAUNCHER, CONTRACT = "dppo_bench.verl_plugin", "dppo_bench.verl_launch", "dppo_bench.verl_plugin.contract"


def modules_of(package: str) -> list[str]:
    root = PACKAGE.parent
    return [
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for p in sorted((root / package.replace(".", "/")).rglob("*.py"))
    ]


def imported(module: str) -> set[str]:
    """Every dotted name ``module`` imports anywhere in its source (function-local imports too); ``from a import b``
    gives ``a.b``, which names a submodule where ``b`` is one."""
    path = PACKAGE.parent / module.replace(".", "/")
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def reaching(modules: list[str], package: str, allowed: str | None = None) -> dict[str, list[str]]:
    """module -> what it imports of ``package`` besides ``allowed``, for the modules that import anything else."""
    found = {
        m: sorted(n for n in imported(m) if within(n, package) and not (allowed and within(n, allowed)))
        for m in modules
    }
    return {m: names for m, names in found.items() if names}


def test_both_packages_are_where_the_checks_look():
    plugin, launcher = modules_of(PLUGIN), modules_of(LAUNCHER)
    assert CONTRACT in plugin and f"{PLUGIN}.entry" in plugin and f"{LAUNCHER}.launch" in launcher


def test_no_plugin_module_imports_the_launcher():
    assert reaching(modules_of(PLUGIN), LAUNCHER) == {}


def test_the_launcher_imports_only_the_contract_of_the_plugin():
    assert reaching(modules_of(LAUNCHER), PLUGIN, allowed=CONTRACT) == {}


def test_the_contract_imports_no_other_plugin_module():
    assert reaching([CONTRACT], PLUGIN, allowed=CONTRACT) == reaching([CONTRACT], LAUNCHER) == {}


def run(code: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout


def test_every_plugin_module_imports_with_verl_and_loads_no_launcher_module():
    """As in verl's processes: every module of the plugin, the entry point last (it registers the loss modes and
    installs the patches, as ``import verl`` does)."""
    modules = sorted(modules_of(PLUGIN), key=lambda m: m == f"{PLUGIN}.entry")
    code = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    importlib.import_module(m)\n"
        f"print(sorted(n for n in sys.modules if n == {LAUNCHER!r} or n.startswith({LAUNCHER + '.'!r})))\n"
    )
    assert run(code, *modules).strip() == "[]"


def test_the_contract_imports_no_verl():
    code = f"import sys, {CONTRACT}\nprint(sorted(n for n in sys.modules if n.split('.')[0] in ('verl', 'vllm')))"
    assert run(code).strip() == "[]"
