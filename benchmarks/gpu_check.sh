#!/usr/bin/env bash
# The GPU check (docs/performance.md, "GPU check"): loss parity on the card, the Top-K cost, the local trainer with a
# bf16 engine against an fp32 trainer. Needs the card's torch only; verl, Ray and vLLM are refused at import.
#
#   bash benchmarks/gpu_check.sh [--cpu] [--out DIR] [--budget-s 420]
#
# With .whl/ present (benchmarks/gpu_wheels.sh, run where the package index is), its wheels are installed into
# .gpu-site/ first, offline, and put before the image's own packages. On the device tool: carry .whl, and
# --out "$OUT" brings report.json back. It is killed at 8 minutes (the issue's bound), whatever --budget-s says.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
path=$PWD/src
if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --find-links .whl --target .gpu-site --upgrade -r .whl/requirements.txt
  path=$path:$PWD/.gpu-site
fi
PYTHONPATH=$path${PYTHONPATH:+:$PYTHONPATH} exec timeout 480 $PY benchmarks/gpu_check.py "$@"
