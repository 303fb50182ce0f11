"""Typed, validated models of the suite's yaml files, and their loaders.

Every loader reports bad input as one :class:`ConfigError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dppo_bench.methods import get_mask, mask_names

REPO_ROOT = Path(__file__).resolve().parents[2]
METHODS_DIR = REPO_ROOT / "recipes" / "methods"
EVAL_DIR = REPO_ROOT / "eval"
ID_PATTERN = re.compile(r"^[a-z0-9_]+$")


class ConfigError(ValueError):
    """Bad input in a config file: the message names the file and the field."""

    def __init__(self, path: Path | str, field: str, message: str):
        self.path, self.field = str(path), field
        where = f"{path}: field '{field}'" if field else str(path)
        super().__init__(f"{where}: {message}")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


Threshold = Annotated[float, Field(ge=0.0)]


IS_CAP_LIMIT = 1e4  # clip_ratio_c at or above it means no cap in our verl losses


class Hyperparameters(Strict):
    """One profile of a method's hyperparameters (the paper's values for one regime)."""

    delta: Threshold | None = None  # divergence threshold (TV or KL)
    eps_low: Threshold | None = None  # ratio clip, negative-advantage side: r < 1 - eps_low
    eps_high: Threshold | None = None  # ratio clip, positive-advantage side: r > 1 + eps_high
    alpha: Annotated[float, Field(ge=0.0, le=1.0)] | None = None  # Sec. 6: no clip where mu < alpha
    # C in min(pi/mu, C); null = no cap, the paper's C = infinity (required). Below IS_CAP_LIMIT, verl's encoding of
    # "no cap" (dppo_bench.verl_plugin.hyperparameters): a larger C would be a cap locally and none on verl
    is_cap: Annotated[float, Field(ge=1.0, lt=IS_CAP_LIMIT)] | None

    def values(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in type(self).model_fields if k in self.model_fields_set}


class MethodRecipe(Strict):
    """``recipes/methods/<id>.yaml``: a mask rule, its anchor and its hyperparameter profiles."""

    id: str
    display_name: str
    paper: str  # where the method and its values come from
    mask: str  # a rule registered in dppo_bench.methods
    anchor: Literal["rollout", "recompute"]
    hyperparameters: dict[str, Hyperparameters] = Field(min_length=1)  # profile name -> values

    @model_validator(mode="after")
    def _check_rule(self) -> MethodRecipe:
        if not ID_PATTERN.match(self.id):
            raise ValueError(f"id {self.id!r} must match [a-z0-9_]+")
        if self.mask not in mask_names():
            raise _FieldError("mask", f"unknown mask rule {self.mask!r}; registered: {', '.join(mask_names())}")
        rule = get_mask(self.mask)
        if self.anchor not in rule.anchors:
            raise _FieldError("anchor", f"mask {self.mask!r} is defined for anchor(s) {list(rule.anchors)}")
        expected = set(rule.params) | {"is_cap"}
        for profile, hp in self.hyperparameters.items():
            given = hp.model_fields_set
            for name in sorted(expected - given):
                raise _FieldError(f"hyperparameters.{profile}.{name}", f"missing (mask {self.mask!r} needs it)")
            for name in sorted(given - expected):
                raise _FieldError(f"hyperparameters.{profile}.{name}", f"not used by mask {self.mask!r}")
            for name in rule.params:  # a null threshold would reach verl as clip_ratio_*=None
                if getattr(hp, name) is None:
                    message = f"null; mask {self.mask!r} needs a number (only is_cap may be null)"
                    raise _FieldError(f"hyperparameters.{profile}.{name}", message)
        return self

    def profile(self, name: str) -> Hyperparameters:
        try:
            return self.hyperparameters[name]
        except KeyError:
            have = sorted(self.hyperparameters)
            raise KeyError(f"method {self.id!r} has no hyperparameter profile {name!r}; it has {have}") from None

    def sha256(self) -> str:
        """The recipe's part of a run's identity. Every profile is in it, not only the one a setting uses: the
        hash is taken without the setting (run.json, aggregation and resumption compare it as it is)."""
        return identity_sha256(self, RECIPE_NOT_IDENTITY)


class _FieldError(ValueError):
    """Raised inside validators to point at a nested field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


M = TypeVar("M", bound=BaseModel)


def canonical_sha256(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# Fields that do not change what a run computes, left out of its identity (the recipe and setting sha256 in
# run.json, which aggregation and resumption compare): adding a seed, renaming, citing, or a longer time limit
# must not mark finished runs stale or stop a killed one from resuming. Everything else stays in, the cluster
# shape (verl.nodes, verl.gpus_per_node) included: it sets the data-parallel split, and so the numerics, and
# verl's sharded checkpoints resume only at the world size that wrote them. local.threads stays in too: torch's
# CPU kernels may sum in another order with another thread count.
RECIPE_NOT_IDENTITY = ("display_name", "paper")
SETTING_NOT_IDENTITY = ("display_name", "paper", "seeds", "verl.runtime_min")


def identity_sha256(model: BaseModel, left_out: tuple[str, ...]) -> str:
    """sha256 of the model's dump without the dotted fields ``left_out`` (absent ones are skipped)."""
    data = model.model_dump(mode="json")
    for dotted in left_out:
        *parents, name = dotted.split(".")
        node = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(name, None)
    return canonical_sha256(data)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int):
        self.key, self.line = key, line
        super().__init__(f"{key!r} given twice (again on line {line})")


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, except that a key given twice in one mapping is an error instead of the last one winning
    silently (``{delta: 0.15, delta: 0.5}``, a profile written twice)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader: builds plain data only
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except _DuplicateKey as e:
        raise ConfigError(path, str(e.key), str(e)) from None
    except yaml.YAMLError as e:
        raise ConfigError(path, "", f"not valid yaml: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "", "expected a mapping at the top level")
    return data


def validate(model: type[M], data: dict, path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _FieldError):
            raise ConfigError(path, cause.field, str(cause)) from None
        field = ".".join(str(part) for part in err["loc"])
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(path, field, message) from None


def load_method(path: Path) -> MethodRecipe:
    data = read_yaml(path)
    if "id" in data:
        raise ConfigError(path, "id", "the id is the file name; do not set it")
    return validate(MethodRecipe, {"id": path.stem, **data}, path)


def _as_path(id_or_path: str, directory: Path) -> Path:
    """A recipe id names ``<directory>/<id>.yaml``; anything ending in .yaml is a path of its own."""
    return Path(id_or_path) if id_or_path.endswith(".yaml") else directory / f"{id_or_path}.yaml"


def find_method(method_id: str, methods_dir: Path = METHODS_DIR) -> MethodRecipe:
    path = _as_path(method_id, methods_dir)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in methods_dir.glob("*.yaml")))
        raise ConfigError(path, "", f"unknown method {method_id!r}; known: {known}")
    return load_method(path)


def load_methods(methods_dir: Path = METHODS_DIR) -> dict[str, MethodRecipe]:
    return {p.stem: load_method(p) for p in sorted(methods_dir.glob("*.yaml"))}


SETTINGS_DIR = REPO_ROOT / "recipes" / "settings"
PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
Seed = Annotated[int, Field(ge=0)]  # a run's seed is a path component (seed<k>) the pipeline matches as digits


class TrainSpec(Strict):
    """The RL schedule, shared by both backends (paper Table 1 / App. C names in comments)."""

    steps: PositiveInt  # policy iterations
    prompts_per_step: PositiveInt  # train batch size (prompts)
    responses_per_prompt: PositiveInt  # rollout.n
    mini_batches: PositiveInt  # optimizer updates per rollout batch
    lr: PositiveFloat
    temperature: PositiveFloat = 1.0  # rollout temperature
    max_prompt_length: PositiveInt
    max_response_length: PositiveInt
    save_every: PositiveInt  # checkpoint (and evaluation) interval in steps
    grad_clip: PositiveFloat = 1.0
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.0
    # |pi - mu| at equal parameters (the mismatch curves of Figs. 3, 13-17) needs a trainer pass over the rollout
    # batch that the rollout anchor otherwise skips: made every this many steps (0: never), in both backends
    mismatch_every: Annotated[int, Field(ge=0)] = 1

    @model_validator(mode="after")
    def _check_batches(self) -> TrainSpec:
        if (self.prompts_per_step * self.responses_per_prompt) % self.mini_batches:
            raise _FieldError("mini_batches", "must divide prompts_per_step * responses_per_prompt")
        return self


class EvalSpec(Strict):
    benchmarks: list[str] = Field(min_length=1)
    every: PositiveInt  # evaluate every this many steps (a multiple of train.save_every)


class TinyArch(Strict):
    """LlamaConfig fields of the tiny model."""

    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    max_position_embeddings: PositiveInt


class TinyTask(Strict):
    seed: int
    n_train: PositiveInt
    n_heldout: PositiveInt
    max_operand: PositiveInt
    min_operands: Annotated[int, Field(ge=2)]
    max_operands: Annotated[int, Field(ge=2)]


class Pretrain(Strict):
    seed: int
    steps: PositiveInt
    batch_size: PositiveInt
    lr: PositiveFloat
    warmup_steps: Annotated[int, Field(ge=0)]
    corrupt_frac: Annotated[float, Field(ge=0.0, le=1.0)]  # share of solutions with one wrong step


class LocalSpec(Strict):
    """The local backend: tiny model, task, base-model pretraining and the rollout engine."""

    model: TinyArch
    task: TinyTask
    pretrain: Pretrain
    # The rollout engine's numeric path: bf16 = weights and compute in bf16 (an inference engine's kernels);
    # bf16_weights = weights rounded to bf16, compute in fp32 (5x faster on CPUs without bf16 units);
    # fp32 = the trainer's own numerics (the no-mismatch control).
    rollout_precision: Literal["bf16", "bf16_weights", "fp32"]
    logit_noise: Annotated[float, Field(ge=0.0)]  # std of Gaussian noise on the engine's logits
    top_k: PositiveInt  # size of mu's kept set recorded for the Top-K methods
    threads: PositiveInt = 1  # torch threads per run


class HubModel(Strict):
    path: str  # a Hugging Face model id, or a local directory
    revision: str | None  # a hub commit; null (explicit) = unpinned, recorded as such in run.json


class Parallelism(Strict):
    """Model parallelism of the trainer engine and of the vLLM rollout."""

    tensor: PositiveInt = 1  # Megatron TP
    pipeline: PositiveInt = 1  # Megatron PP
    expert: PositiveInt = 1  # Megatron EP (MoE)
    expert_tensor: PositiveInt = 1  # Megatron ETP
    context: PositiveInt = 1  # Megatron CP
    ulysses: PositiveInt = 1  # FSDP sequence parallel (Ulysses)
    rollout_tensor: PositiveInt = 1  # vLLM TP


class LoRA(Strict):
    rank: PositiveInt
    alpha: PositiveInt
    target_modules: list[str] | Literal["all-linear"]


class Optimizer(Strict):
    lr_warmup_steps: Annotated[int, Field(ge=-1)] = -1  # -1: verl's default, no warm-up
    weight_decay: Annotated[float, Field(ge=0.0)]
    betas: Annotated[list[float], Field(min_length=2, max_length=2)] = [0.9, 0.999]
    lr_scheduler: Literal["constant", "cosine"] = "constant"


class VerlSpec(Strict):
    """The verl backend: model, data, engine, parallelism and cluster shape of a setting."""

    model: HubModel
    train_data: str  # a dataset of recipes/datasets/ (prepared by `dppo-bench data prepare`)
    engine: Literal["fsdp", "megatron"]
    parallelism: Parallelism
    precision: Literal["bf16"]  # rollout and training compute dtype
    optimizer: Optimizer
    router_replay: Literal["R3"] | None = None  # rollout router replay (MoE; Megatron only)
    lora: LoRA | None = None
    nodes: PositiveInt
    gpus_per_node: PositiveInt
    runtime_min: PositiveInt  # wall-clock limit of the training job (SLURM --time)
    max_token_len_per_gpu: PositiveInt  # dynamic batch size: tokens per micro-batch per GPU
    rollout_gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)]
    offload: bool = False  # Megatron parameter and optimizer offload to CPU
    chat_template_kwargs: dict[str, bool] = {}  # e.g. Qwen3's enable_thinking
    topk: PositiveInt = 20  # K of the Top-K modes (paper Sec. 4.3: 20, vLLM's default cap on returned log-probs)
    # cpu: verl's own trainer and vLLM's CPU build on the host CPU (dppo_bench.verl_plugin.cpu); a laptop or CI
    # stand-in for a GPU node, never used on a cluster
    device: Literal["cuda", "cpu"] = "cuda"


class Setting(Strict):
    """``recipes/settings/<id>.yaml``: one training setting (model x data x budget x engine)."""

    id: str
    display_name: str
    paper: str
    backend: Literal["local", "verl"]
    hyperparameter_profile: str  # which profile of each method recipe this setting uses
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
    seeds: list[Seed] = Field(min_length=1)
    train: TrainSpec
    eval: EvalSpec
    local: LocalSpec | None = None
    verl: VerlSpec | None = None

    @model_validator(mode="after")
    def _check_backend(self) -> Setting:
        if not ID_PATTERN.match(self.id):
            raise ValueError(f"id {self.id!r} must match [a-z0-9_]+")
        if (self.local is None) == (self.backend == "local"):
            raise _FieldError("local", "a local-backend setting needs a 'local' section, and only it")
        if (self.verl is None) == (self.backend == "verl"):
            raise _FieldError("verl", "a verl-backend setting needs a 'verl' section, and only it")
        if self.backend == "verl" and self.train.prompts_per_step % self.train.mini_batches:
            raise _FieldError(
                "train.mini_batches", "must divide prompts_per_step (verl counts mini-batches in prompts)"
            )
        if len(set(self.seeds)) < len(self.seeds):
            raise _FieldError("seeds", f"a seed is listed twice: {self.seeds}")
        if self.backend == "local" and self.eval.every % self.train.save_every:
            raise _FieldError("eval.every", "must be a multiple of train.save_every (evaluation reads checkpoints)")
        return self

    def sha256(self) -> str:
        """The setting's part of a run's identity (the seed is a part of its own)."""
        return identity_sha256(self, SETTING_NOT_IDENTITY)

    def eval_steps(self) -> list[int]:
        """Evaluated steps: 0 (the base model), then every eval.every (verl: its online validation steps)."""
        return [0, *range(self.eval.every, self.train.steps + 1, self.eval.every)]


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def setting_data(path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A setting's yaml with ``extends: <parent id>`` resolved: the parent's values, overridden key by key."""
    data = read_yaml(path)
    if "id" in data:
        raise ConfigError(path, "id", "the id is the file name; do not set it")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    parent_path = path.parent / f"{parent}.yaml"
    if not parent_path.is_file() or parent_path in _seen:
        raise ConfigError(path, "extends", f"no setting {parent!r} to extend" if not parent_path.is_file() else "cycle")
    return _deep_merge(setting_data(parent_path, (*_seen, path)), data)


def load_setting(path: Path) -> Setting:
    setting = validate(Setting, {"id": path.stem, **setting_data(path)}, path)
    for i, benchmark in enumerate(setting.eval.benchmarks):
        if not (EVAL_DIR / f"{benchmark}.yaml").is_file():
            known = ", ".join(sorted(p.stem for p in EVAL_DIR.glob("*.yaml")))
            raise ConfigError(path, f"eval.benchmarks.{i}", f"unknown benchmark {benchmark!r}; known: {known}")
    return setting


def setting_paths(settings_dir: Path = SETTINGS_DIR) -> list[Path]:
    """Every runnable setting ("_name.yaml" files are bases that settings extend)."""
    return [p for p in sorted(settings_dir.glob("*.yaml")) if not p.name.startswith("_")]


def find_setting(setting_id: str, settings_dir: Path = SETTINGS_DIR) -> Setting:
    path = _as_path(setting_id, settings_dir)
    if not path.is_file():
        known = ", ".join(p.stem for p in setting_paths(settings_dir))
        raise ConfigError(path, "", f"unknown setting {setting_id!r}; known: {known}")
    return load_setting(path)


EXPERIMENTS_DIR = REPO_ROOT / "experiments"


class RunGroup(Strict):
    """Runs of several methods in one setting; ``label`` formats each curve's name."""

    setting: str
    methods: list[str] = Field(min_length=1)
    label: str = "{display_name}"  # fields: display_name, method, setting
    dashed: bool = False


class Panel(Strict):
    title: str
    metrics: list[str] = []  # one curve per run and metric (e.g. max and min of pi - mu)
    # or a panel of the mismatch probes (Fig. 2): pi/mu or the TV of every probed token against mu
    probe: Literal["ratio", "tv"] | None = None
    yscale: Literal["linear", "log"] = "linear"
    smooth: Annotated[float, Field(ge=0.0)] = 0.0  # Gaussian sigma in logged points; the paper: 2, AIME: 0
    ylabel: str | None = None
    setting: str | None = None  # only the runs of this setting (side-by-side panels per setting)

    @model_validator(mode="after")
    def _check(self) -> Panel:
        if bool(self.metrics) == (self.probe is not None):
            raise _FieldError("metrics", "a panel draws either metrics (curves over steps) or a probe, not both")
        return self


class Column(Strict):
    """A table column: one statistic of one metric over a run's steps."""

    title: str
    metric: str
    # final/peak/min/mean over the run's logged steps; start/end: the mean of the first/last tenth of them
    stat: Literal["final", "peak", "min", "mean", "start", "end"]
    smooth: Annotated[float, Field(ge=0)] = 0.0  # Gaussian sigma before the statistic (a figure panel's smoothing)


class MaskedTokenTable(Strict):
    """App. D: each run's most frequently masked tokens among A > 0 and A < 0 tokens, decoded."""

    top: PositiveInt = 50
    steps: list[Annotated[int, Field(ge=1)]] | None = None  # the steps whose counts are summed (null: all)


class Experiment(Strict):
    """``experiments/<id>.yaml``: one paper item (figure or table) as data."""

    id: str
    title: str
    paper_item: str  # e.g. "Fig. 3", or "ours" for items the paper does not have
    description: str
    runs: list[RunGroup] = []
    probes: list[str] = []  # settings whose mismatch at equal parameters is probed (Fig. 2), without training
    seeds: list[Seed] | None = Field(None, min_length=1)  # default: each setting's seeds
    panels: list[Panel] = []
    columns: list[Column] = []
    masked_tokens: MaskedTokenTable | None = None  # the table is the runs' masked tokens (App. D)
    panel_columns: PositiveInt = 4  # figure layout: panels per row

    @model_validator(mode="after")
    def _check(self) -> Experiment:
        if not ID_PATTERN.match(self.id):
            raise ValueError(f"id {self.id!r} must match [a-z0-9_]+")
        if bool(self.runs) == bool(self.probes):
            raise _FieldError("runs", "an experiment has training runs or mismatch probes (probes), one of the two")
        if not self.panels and not self.columns and self.masked_tokens is None and not self.probes:
            raise _FieldError("panels", "an experiment needs panels (a figure) or columns (a table)")
        if self.seeds is not None and len(set(self.seeds)) < len(self.seeds):
            raise _FieldError("seeds", f"a seed is listed twice: {self.seeds}")
        listed: dict[tuple[str, str], str] = {}
        for i, group in enumerate(self.runs):
            for j, method in enumerate(group.methods):
                where = f"runs.{i}.methods.{j}"
                if (group.setting, method) in listed:
                    first = listed[group.setting, method]
                    raise _FieldError(where, f"method {method!r} of setting {group.setting!r} is listed at {first} too")
                listed[group.setting, method] = where
        for i, panel in enumerate(self.panels):
            if (panel.probe is not None) != bool(self.probes):
                raise _FieldError(f"panels.{i}", "probe panels belong to probe experiments, metric panels to runs")
        if self.masked_tokens is not None and self.columns:
            raise _FieldError("columns", "the table of a masked_tokens experiment is the token table")
        return self

    def run_keys(self, seeds_of: Callable[[str], list[int]]) -> list[tuple[str, str, int]]:
        """(setting, method, seed) of every run, in the order the yaml lists them."""
        keys = []
        for group in self.runs:
            for method in group.methods:
                for seed in self.seeds if self.seeds is not None else seeds_of(group.setting):
                    keys.append((group.setting, method, seed))
        return keys


def load_experiment(path: Path) -> Experiment:
    data = read_yaml(path)
    if "id" in data:
        raise ConfigError(path, "id", "the id is the file name; do not set it")
    experiment = validate(Experiment, {"id": path.stem, **data}, path)
    for i, setting in enumerate(experiment.probes):
        if not (SETTINGS_DIR / f"{setting}.yaml").is_file():
            raise ConfigError(path, f"probes.{i}", f"unknown setting {setting!r}")
    for i, group in enumerate(experiment.runs):
        if not (SETTINGS_DIR / f"{group.setting}.yaml").is_file():
            raise ConfigError(path, f"runs.{i}.setting", f"unknown setting {group.setting!r}")
        for j, method in enumerate(group.methods):
            if not (METHODS_DIR / f"{method}.yaml").is_file():
                raise ConfigError(path, f"runs.{i}.methods.{j}", f"unknown method {method!r}")
    return experiment


def find_experiment(experiment_id: str, experiments_dir: Path = EXPERIMENTS_DIR) -> Experiment:
    path = experiments_dir / f"{experiment_id}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in experiments_dir.glob("*.yaml")))
        raise ConfigError(path, "", f"unknown experiment {experiment_id!r}; known: {known}")
    return load_experiment(path)


def base_setting_id(setting_id: str, settings_dir: Path = SETTINGS_DIR) -> str:
    """The setting whose base model and task data a local setting shares: the nearest ancestor (through
    ``extends``) with the same model, task and pretraining. The base model is then built once."""
    path = settings_dir / f"{setting_id}.yaml"
    parent = read_yaml(path).get("extends")
    if parent is None:
        return setting_id
    own, theirs = find_setting(setting_id, settings_dir).local, find_setting(parent, settings_dir).local
    same = (
        own is not None
        and theirs is not None
        and (own.model, own.task, own.pretrain)
        == (
            theirs.model,
            theirs.task,
            theirs.pretrain,
        )
    )
    return base_setting_id(parent, settings_dir) if same else setting_id
