#!/usr/bin/env bash
# The wheels the GPU check needs beside the card's own torch, fetched here (a machine with the package index) into
# .whl/, which travels with the checkout (git-ignored) to a card that cannot install from the network; there,
# benchmarks/gpu_check.sh installs them into .gpu-site/. docs/performance.md, "GPU check".
#
#   bash benchmarks/gpu_wheels.sh [PYTHON_VERSION ...]     (default: 3.11 3.12, the Pythons the suite supports)
#
# The list is the check's own import closure: `gpu_check.py --cpu` run here records the distributions it imported,
# at this environment's versions (those the suite is tested with), minus torch and what torch itself requires,
# which the card's image brings built for its CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
versions=${*:-3.11 3.12}
rm -rf .whl && mkdir -p .whl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH=$PWD/src $PY benchmarks/gpu_check.py --cpu --out "$tmp/check" --distributions "$tmp/imported.txt" > "$tmp/check.log" \
  || { cat "$tmp/check.log"; echo "gpu_wheels: the reduced check failed here; fix that first" >&2; exit 1; }
$PY - "$tmp/imported.txt" > .whl/requirements.txt <<'PY'
import re
import sys
from importlib.metadata import requires

def name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")

def closure(dist: str) -> set[str]:
    """dist and everything it requires (extras left out), as installed here."""
    seen, todo = set(), [dist]
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        try:
            todo += [name(r) for r in requires(d) or [] if "extra ==" not in r]
        except Exception:  # required but not installed here (a platform marker): not ours to carry
            pass
    return seen

# The image's torch stack (its CUDA build also requires triton, which this CPU build does not); numpy is built
# against it; the suite itself travels as source.
brought = closure("torch") | {"triton", "numpy", "dppo-bench"}
for line in open(sys.argv[1]):
    if name(line) not in brought and not name(line).startswith("nvidia-"):
        print(line.strip())
PY
# This Python's wheels first, built here where a distribution ships only its source (antlr4's runtime: pure
# Python); the compiled ones again for each other Python.
$PY -m pip wheel -q --no-deps -w .whl -r .whl/requirements.txt
compiled=$(cd .whl && ls *.whl | grep -v -- '-none-any\.whl$' | cut -d- -f1,2 | sed 's/-/==/') || true
here=$($PY -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
for v in $versions; do
  [ "$v" = "$here" ] || [ -z "$compiled" ] && continue
  # shellcheck disable=SC2086  # one name==version per word
  $PY -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version "$v" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $compiled
done
echo "$(wc -l < .whl/requirements.txt) distributions for Python $versions: $(du -sh .whl | cut -f1) in .whl/"
