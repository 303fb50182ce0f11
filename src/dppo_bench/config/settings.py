"""``recipes/settings/<id>.yaml``: one training setting (model x data x budget x engine), with ``extends``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from dppo_bench.config.identity import dump_identity_sha256
from dppo_bench.config.loader import entry_paths, extended_data, load_model, locate, require
from dppo_bench.config.roots import EVAL_DIR, SETTINGS_DIR
from dppo_bench.config.yaml_io import FieldError, Id, Strict, read_yaml
from dppo_bench.errors import UserError

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
Seed = Annotated[int, Field(ge=0)]  # a run's seed is a path component (seed<k>) the pipeline matches as digits

# Fields that do not change what a run computes, left out of the setting's part of a run's (training) identity:
# adding a seed, renaming, citing, a longer time limit, or a benchmark scored from the saved weights must not mark
# finished runs stale or stop a killed one from resuming. Everything else stays in, the cluster shape (verl.nodes,
# verl.gpus_per_node) included: it sets the data-parallel split, and so the numerics, and verl's sharded checkpoints
# resume only at the world size that wrote them. local.threads stays in too: torch's CPU kernels may sum in another
# order with another thread count. verl's online validation (eval.online, eval.every) stays in: it runs inside the
# training job, on the rollout engine that also samples the training batches.
SETTING_NOT_IDENTITY = ("display_name", "paper", "seeds", "verl.runtime_min", "eval.offline")
# The local trainer evaluates nothing while it trains: every evaluation of a local run reads its checkpoints
LOCAL_NOT_IDENTITY = (*SETTING_NOT_IDENTITY, "eval")


def setting_sha256(dump: dict) -> str:
    """The training identity of a setting's JSON dump, by today's rule of what it leaves out. A run's record holds the
    dump it was trained with, so a record made under an older rule is judged by what it computed, not by the hash it
    stored: a field's leaving the identity (as evaluation did) makes no finished run stale."""
    left_out = LOCAL_NOT_IDENTITY if dump.get("backend") == "local" else SETTING_NOT_IDENTITY
    if dump.get("probe") is None:  # no engine probe: the setting is what it was before settings could have one
        left_out = (*left_out, "probe")
    return dump_identity_sha256(dump, left_out)


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
            raise FieldError("mini_batches", "must divide prompts_per_step * responses_per_prompt")
        return self


class EvalSpec(Strict):
    """Which benchmarks a setting's runs are scored on, and how (docs/evaluation.md, "Online and offline").

    ``online``: verl validates them inside the training job every ``every`` steps (one sampling for all of them:
    verl has one ``val_kwargs``), and their dumps are scored; part of the training identity. ``offline``: scored
    after training from the weights saved every ``train.save_every`` steps, at the multiples of ``every`` that are
    saved; not part of the training identity, so one added to a finished run is scored without retraining. The
    local backend validates nothing while it trains: all of its benchmarks are offline.
    """

    online: list[str] = []
    offline: list[str] = []
    every: PositiveInt  # evaluate every this many steps

    @property
    def benchmarks(self) -> list[str]:
        """Every benchmark the runs are scored on: the online ones, then the offline ones."""
        return [*self.online, *self.offline]


class TinyArch(Strict):
    """LlamaConfig fields of the tiny model."""

    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    max_position_embeddings: PositiveInt


class Lexicon(Strict):
    """The long-tailed vocabulary of connective words before every step (dppo_bench.local.task.Lexicon)."""

    words: Annotated[int, Field(ge=2, le=4900)]  # how many (two-syllable words: at most 70^2)
    zipf: PositiveFloat  # exponent of the rank-frequency law of a correct step's word


class TinyTask(Strict):
    seed: int
    n_train: PositiveInt
    n_heldout: PositiveInt
    max_operand: PositiveInt
    min_operands: Annotated[int, Field(ge=2)]
    max_operands: Annotated[int, Field(ge=2)]
    lexicon: Lexicon | None = None  # null: the character-level task (21 tokens)


class Pretrain(Strict):
    seed: int
    steps: PositiveInt
    batch_size: PositiveInt
    lr: PositiveFloat
    warmup_steps: Annotated[int, Field(ge=0)]
    corrupt_frac: Annotated[float, Field(ge=0.0, le=1.0)]  # share of solutions with one wrong step


class RolloutFormat(Strict):
    """The rollout engine's numeric path, as real inference engines store and compute (dppo_bench.local.formats).
    All fp32 and no noise: the trainer's own numerics (the no-mismatch control)."""

    # the linear layers' weights: bf16; fp8 e4m3 with one scale per tensor or per output channel; symmetric int8 or
    # int4 with one scale per output channel. Tensors not in the format (norms) are held in bf16.
    weights: Literal["fp32", "bf16", "fp8_e4m3_tensor", "fp8_e4m3_channel", "int8_channel", "int4_channel"]
    head: bool = False  # the tied embedding and output head in the weights' format too (else in bf16)
    activations: Literal["fp32", "fp8_e4m3"] = "fp32"  # the linear layers' inputs (fp8: dynamic per-tensor scale)
    compute: Literal["fp32", "bf16"] = "fp32"  # bf16: the engine's matmuls and KV cache (5x slower on most CPUs)
    logit_noise: Annotated[float, Field(ge=0.0)] = 0.0  # std of Gaussian noise on the engine's logits

    def describe(self) -> str:
        """e.g. "int4_channel weights (head included), fp32 compute" (the probe's record says it)."""
        parts = [f"{self.weights} weights" + (" (head included)" if self.head and self.weights != "fp32" else "")]
        if self.activations != "fp32":
            parts.append(f"{self.activations} activations")
        parts.append(f"{self.compute} compute")
        if self.logit_noise:
            parts.append(f"logit noise {self.logit_noise:g}")
        return ", ".join(parts)


class LocalSpec(Strict):
    """The local backend: tiny model, task, base-model pretraining and the rollout engine."""

    model: TinyArch
    task: TinyTask
    pretrain: Pretrain
    rollout: RolloutFormat
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


class EngineProbe(Strict):
    """Fig. 2's probe of a verl setting's model through an inference engine, without verl
    (:mod:`dppo_bench.probe.engines`): the engine samples one batch, an fp32 trainer scores it at the same weights."""

    engine: Literal["vllm", "local"]  # vLLM in bf16, or the suite's own engine in the format ``rollout`` gives
    rollout: RolloutFormat | None = None  # the local engine's numeric format (local only)
    top_k: PositiveInt = 20  # mu's kept set: the TV is over it plus the rest (vLLM returns at most 20 by default)

    @model_validator(mode="after")
    def _check_format(self) -> EngineProbe:
        if (self.rollout is None) == (self.engine == "local"):
            raise FieldError("rollout", "the local engine needs a numeric format (rollout), and only it")
        return self


class Setting(Strict):
    """``recipes/settings/<id>.yaml``: one training setting (model x data x budget x engine)."""

    id: Id
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
    probe: EngineProbe | None = None  # probed through this engine instead of verl (a verl setting's model)

    @model_validator(mode="after")
    def _check_backend(self) -> Setting:
        if (self.local is None) == (self.backend == "local"):
            raise FieldError("local", "a local-backend setting needs a 'local' section, and only it")
        if (self.verl is None) == (self.backend == "verl"):
            raise FieldError("verl", "a verl-backend setting needs a 'verl' section, and only it")
        if self.backend == "verl" and self.train.prompts_per_step % self.train.mini_batches:
            raise FieldError("train.mini_batches", "must divide prompts_per_step (verl counts mini-batches in prompts)")
        if len(set(self.seeds)) < len(self.seeds):
            raise FieldError("seeds", f"a seed is listed twice: {self.seeds}")
        if self.probe is not None and self.backend != "verl":
            raise FieldError(
                "probe", "an engine probe reads a verl setting's model and data (local settings probe their own)"
            )
        benchmarks = self.eval.benchmarks
        if not benchmarks:
            raise FieldError("eval.offline", "list at least one benchmark (eval.online or eval.offline)")
        if twice := sorted({b for b in benchmarks if benchmarks.count(b) > 1}):
            field = "eval.online" if len(set(self.eval.online)) < len(self.eval.online) else "eval.offline"
            raise FieldError(field, f"{twice} listed twice: a benchmark is scored online or offline, once")
        if self.backend == "local" and self.eval.online:
            raise FieldError(
                "eval.online",
                "the local backend validates nothing while it trains: list its "
                "benchmarks under eval.offline (scored from its checkpoints)",
            )
        if self.backend == "verl" and not self.eval.online:
            raise FieldError("eval.online", "verl validates during training: name at least one online benchmark")
        if self.backend == "local" and self.eval.every % self.train.save_every:
            raise FieldError("eval.every", "must be a multiple of train.save_every (evaluation reads checkpoints)")
        return self

    def sha256(self) -> str:
        """The setting's part of a run's training identity (the seed is a part of its own)."""
        return setting_sha256(self.model_dump(mode="json"))

    def eval_steps(self, benchmark: str) -> list[int]:
        """The steps a benchmark is scored at: 0 (the base model), then every eval.every (online: verl's validation
        steps); an offline benchmark only at those whose weights are saved (multiples of train.save_every)."""
        steps = [0, *range(self.eval.every, self.train.steps + 1, self.eval.every)]
        if benchmark in self.eval.online:
            return steps
        if benchmark not in self.eval.offline:
            raise UserError(f"setting {self.id!r} does not evaluate {benchmark!r}")
        return [s for s in steps if s % self.train.save_every == 0]

    @property
    def loss_scale_factor(self) -> int | None:
        """seq-mean-token-sum-norm's constant normaliser, the longest response (not each micro-batch's padded
        length), for both backends; None in the other modes."""
        return self.train.max_response_length if self.loss_agg_mode == "seq-mean-token-sum-norm" else None


def setting_data(path: Path) -> dict:
    """A setting's yaml with ``extends: <parent id>`` resolved: the parent's values, overridden key by key."""
    return extended_data("setting", path)


def load_setting(path: Path, eval_dir: Path = EVAL_DIR) -> Setting:
    setting = load_model(Setting, path, setting_data(path))
    for field in ("online", "offline"):
        for i, benchmark in enumerate(getattr(setting.eval, field)):
            require("benchmark", benchmark, eval_dir, path, f"eval.{field}.{i}")
    return setting


def setting_paths(settings_dir: Path = SETTINGS_DIR) -> list[Path]:
    """Every runnable setting ("_name.yaml" files are bases that settings extend)."""
    return entry_paths(settings_dir)


def find_setting(setting_id: str, settings_dir: Path = SETTINGS_DIR) -> Setting:
    return load_setting(locate("setting", setting_id, settings_dir))


def base_setting_id(setting_id: str, settings_dir: Path = SETTINGS_DIR) -> str:
    """The setting whose base model and task data a local setting shares: the nearest ancestor (through
    ``extends``) with the same model, task and pretraining. The base model is then built once."""
    parent = read_yaml(settings_dir / f"{setting_id}.yaml").get("extends")
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
