"""(method recipe, setting, seed) -> the complete ``python -m verl.trainer.main_ppo`` override list.

The one place that knows verl's config keys for a whole run; :func:`method_overrides` is the part
that depends on the method. Its tests compose every (method, setting) pair of every experiment
with verl's own Hydra config and dataclasses on CPU, so a bad key fails here and not on a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dppo_bench.config import Setting
from dppo_bench.config.runs import ResolvedRun
from dppo_bench.errors import UserError
from dppo_bench.eval.protocol import sampling_of
from dppo_bench.rundir import WANDB_PROJECT, RunDir, experiment_name
from dppo_bench.verl_launch.overrides import ACTOR, method_overrides
from dppo_bench.verl_plugin.contract import (
    CPU_SWITCH,
    KEEP_WEIGHTS,
    MASKED_TOKENS_DIR_ENV,
    MISMATCH_EVERY_KEY,
    PLUGIN_MODULE,
    RAY_ENV_VARS,
)
from dppo_bench.vllm_cpu import VLLM_CPU_ENV

ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"
ENV = RAY_ENV_VARS
REWARD_FUNCTION = Path(__file__).resolve().parents[1] / "eval" / "verl_reward.py"


@dataclass(frozen=True)
class RunPaths:
    """Where a verl run reads its data and writes its records (absolute paths)."""

    run_dir: Path
    train_file: Path  # the prepared training parquet
    val_files: tuple[Path, ...]  # one prepared parquet per online benchmark
    metrics_log: Path  # verl's FileLogger output for this attempt (see dppo_bench.verl_launch.records)
    model: Path | None = None  # a local snapshot of the setting's model at its pinned revision (None: the hub id)

    @property
    def checkpoints(self) -> Path:
        return RunDir(self.run_dir).checkpoints

    @property
    def validation(self) -> Path:
        return RunDir(self.run_dir).validation


def val_sampling(benchmarks: list) -> dict:
    """verl has one set of validation sampling parameters: the online benchmarks must agree on them (one that
    samples otherwise is scored offline: the setting's eval.offline). The benchmarks' max_tokens is not among them:
    verl 0.9.1's val_kwargs (SamplingConfig) has no length, so online validation generates at most
    rollout.response_length, the setting's max_response_length (as :func:`dppo_bench.eval.protocol.sampling_of`)."""
    sampling = {tuple(sampling_of(b, max_tokens=None).items()) for b in benchmarks}
    if len(sampling) != 1:
        ids = ", ".join(b.id for b in benchmarks)
        raise UserError(
            f"online benchmarks {ids} sample differently, and verl validates all of them with one val_kwargs: "
            "list all but one set of them under eval.offline"
        )
    return {k: v for k, v in sampling.pop() if k != "max_tokens"}


def run_overrides(
    run: ResolvedRun,
    paths: RunPaths,
    *,
    wandb: bool = False,
    wandb_mode: str = "offline",
) -> list[str]:
    """Every override of one run; ``wandb`` adds verl's wandb logger in ``wandb_mode`` (the launcher passes the
    user's WANDB_MODE, offline when unset)."""
    setting, recipe, seed = run.setting, run.recipe, run.seed
    if setting.verl is None:
        raise UserError(f"setting {setting.id!r} is not a verl-backend setting")
    v, t = setting.verl, setting.train
    val = val_sampling(list(run.online))
    loggers = '["console","file","wandb"]' if wandb else '["console","file"]'
    schedule_key = "lr_decay_style" if v.engine == "megatron" else "lr_scheduler_type"  # FSDP and Megatron differ
    overrides = [
        f"model_engine={'megatron' if v.engine == 'megatron' else 'dp'}",
        # data
        f"data.train_files=['{paths.train_file}']",
        "data.val_files=[" + ",".join(f"'{p}'" for p in paths.val_files) + "]",
        f"data.train_batch_size={t.prompts_per_step}",
        f"data.max_prompt_length={t.max_prompt_length}",
        f"data.max_response_length={t.max_response_length}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        f"data.seed={seed}",
        *(f"++data.apply_chat_template_kwargs.{k}={val_}" for k, val_ in v.chat_template_kwargs.items()),
        # model
        f"{MODEL}.path={paths.model or v.model.path}",
        f"{MODEL}.use_remove_padding=True",
        f"{MODEL}.enable_gradient_checkpointing=True",
        # actor: the schedule of Table 1 / App. C, then the method
        f"{ACTOR}.optim.lr={t.lr}",
        f"{ACTOR}.optim.weight_decay={v.optimizer.weight_decay}",
        f"{ACTOR}.optim.betas=[{v.optimizer.betas[0]},{v.optimizer.betas[1]}]",
        f"{ACTOR}.optim.{schedule_key}={v.optimizer.lr_scheduler}",
        f"{ACTOR}.optim.lr_warmup_steps={v.optimizer.lr_warmup_steps}",
        f"{ACTOR}.optim.clip_grad={t.grad_clip}",
        f"{ACTOR}.ppo_mini_batch_size={t.prompts_per_step // t.mini_batches}",
        f"{ACTOR}.ppo_epochs=1",
        f"{ACTOR}.use_dynamic_bsz=True",
        f"{ACTOR}.ppo_max_token_len_per_gpu={v.max_token_len_per_gpu}",
        f"{ACTOR}.loss_agg_mode={setting.loss_agg_mode}",
        f"{ACTOR}.use_kl_loss=False",
        f"{ACTOR}.entropy_coeff=0",
        f"{ACTOR}.calculate_entropy=True",  # logged (the paper's entropy panels), not in the loss
        *method_overrides(recipe, setting.hyperparameter_profile, topk=v.topk),
        # rollout: vLLM at the paper's temperature, full vocabulary (mu is then the same distribution as pi)
        f"{ROLLOUT}.name=vllm",
        f"{ROLLOUT}.n={t.responses_per_prompt}",
        f"{ROLLOUT}.temperature={t.temperature}",
        f"{ROLLOUT}.top_p=1.0",
        f"{ROLLOUT}.top_k=-1",
        f"{ROLLOUT}.dtype=bfloat16",
        f"{ROLLOUT}.seed={seed}",
        f"{ROLLOUT}.tensor_model_parallel_size={v.parallelism.rollout_tensor}",
        f"{ROLLOUT}.gpu_memory_utilization={v.rollout_gpu_memory_utilization}",
        f"{ROLLOUT}.log_prob_use_dynamic_bsz=True",
        f"{ROLLOUT}.log_prob_max_token_len_per_gpu={v.max_token_len_per_gpu}",
        f"++{ROLLOUT}.custom.{MISMATCH_EVERY_KEY}={t.mismatch_every}",
        # online validation: the paper's protocol (App. E), n samples at the benchmarks' sampling
        f"{ROLLOUT}.val_kwargs.n={val['n']}",
        f"{ROLLOUT}.val_kwargs.temperature={val['temperature']}",
        f"{ROLLOUT}.val_kwargs.top_p={val['top_p']}",
        f"{ROLLOUT}.val_kwargs.do_sample=True",
        # advantage: GRPO's group baseline without std normalisation (App. C, Dr.GRPO)
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=False",
        "algorithm.use_kl_in_reward=False",
        # reward: our extraction and verifier, the same code that scores offline
        f"reward.custom_reward_function.path={REWARD_FUNCTION}",
        "reward.custom_reward_function.name=compute_score",
        # trainer: verl's v1 trainer in sync mode, the one our mismatch pass patches (dppo_bench.verl_plugin.mismatch);
        # every rollout is then generated at the parameters the next update starts from
        "trainer.use_v1=True",
        "trainer.v1.trainer_mode=sync",
        f"trainer.total_training_steps={t.steps}",
        # verl also stops after total_epochs passes over the data (default 30: 660 steps of the 1,460-problem sanity
        # set); an epoch is at least one step, so this bound never cuts a run short of total_training_steps
        f"trainer.total_epochs={t.steps}",
        f"trainer.test_freq={setting.eval.every}",
        "trainer.val_before_train=True",
        f"trainer.save_freq={t.save_every}",
        "trainer.resume_mode=auto",
        # checkpoints serve resumption: the last two, so one survives a save cut short, instead of every save_every
        # steps of a 30B model with its optimizer; the model of each one stays in RUN_DIR/weights, for the
        # benchmarks scored offline (dppo_bench.verl_plugin.keep_weights)
        "trainer.max_actor_ckpt_to_keep=2",
        f"trainer.checkpoint_callback_class={KEEP_WEIGHTS}",
        f"trainer.default_local_dir={paths.checkpoints}",
        f"trainer.validation_data_dir={paths.validation}",
        f"trainer.logger={loggers}",
        f"trainer.project_name={WANDB_PROJECT}",
        f"trainer.experiment_name={experiment_name(setting.id, recipe.id, seed)}",
        f"trainer.nnodes={v.nodes}",
        # Hydra's record of the composed config beside the attempt's log, not in the directory verl was started from
        f"hydra.run.dir={paths.metrics_log.with_suffix('.hydra')}",
        f"trainer.n_gpus_per_node={v.gpus_per_node}",
        # every Ray worker imports verl and hence our plugin; the env var is the belt to those braces
        f"{ENV}.VERL_USE_EXTERNAL_MODULES={PLUGIN_MODULE}",
        f"{ENV}.VERL_FILE_LOGGER_PATH={paths.metrics_log}",
        f"{ENV}.{MASKED_TOKENS_DIR_ENV}={RunDir(paths.run_dir).masked_tokens}",  # App. D (verl_plugin.masked_tokens)
    ]
    if setting.loss_scale_factor is not None:
        overrides.append(f"{ACTOR}.loss_scale_factor={setting.loss_scale_factor}")
    if wandb:
        overrides += [f"{ENV}.WANDB_DIR={paths.run_dir}", f"{ENV}.WANDB_MODE={wandb_mode}"]
    overrides += [f"{ENV}.{name}='{value}'" for name, value in device_env(setting).items()]  # Ray: strings only
    # an override that two parts need is given once (trainer.use_v1: the mismatch pass's and a Top-K method's)
    return list(dict.fromkeys(overrides + engine_overrides(setting) + cpu_overrides(setting)))


def device_env(setting: Setting) -> dict[str, str]:
    """What every process of a run (verl's driver and each Ray worker) needs in its environment for the device."""
    if setting.verl.device != "cpu":
        return {}
    return {
        CPU_SWITCH: "cpu",
        "VERL_ENGINE_DEVICE": "cuda",  # selects verl's FSDP engine class (registered for cuda/npu); it runs on CPU
        "OMP_NUM_THREADS": "1",  # one thread per process: Ray runs more processes than there are cores
        **VLLM_CPU_ENV,
    }


def cpu_overrides(setting: Setting) -> list[str]:
    """verl and vLLM on the host CPU (``verl.device: cpu``): the settings verl's GPU defaults do not allow there."""
    if setting.verl.device != "cpu":
        return []
    return [
        # FSDP2 (FSDP1 refuses CPU parameters with sync_module_states) on gloo, one process
        f"{ACTOR}.strategy=fsdp2",
        f"{ACTOR}.fsdp_config.strategy=fsdp2",
        f"+{MODEL}.override_config.attn_implementation=sdpa",  # verl's default is flash-attention 2
        # vLLM's CPU build: no sleep mode (nothing to offload to), no CUDA graphs
        f"++{ROLLOUT}.enable_sleep_mode=False",
        f"{ROLLOUT}.free_cache_engine=False",
        f"{ROLLOUT}.enforce_eager=True",
        # Ray with one logical GPU (the CPU platform's resource) and more logical CPUs than cores: TransferQueue's
        # controller and its one storage unit hold one each and each placement bundle asks three, with
        # OMP_NUM_THREADS=1 per process (verl's default of 8 storage units would hold 8 and starve the workers)
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "+ray_kwargs.ray_init.num_gpus=1",
        "+ray_kwargs.ray_init.num_cpus=6",
        # one process each where verl starts 8 (data loader, agent loops, reward loops): each holds torch and verl
        "data.dataloader_num_workers=0",
        f"{ROLLOUT}.agent.num_workers=1",
        "reward.num_workers=1",
    ]


def engine_overrides(setting: Setting) -> list[str]:
    """Parallelism, router replay and LoRA, which depend on the trainer engine."""
    v = setting.verl
    p = v.parallelism
    if v.engine == "fsdp":
        out = [f"{ACTOR}.ulysses_sequence_parallel_size={p.ulysses}"]
        if v.router_replay:
            # verl rejects this key under FSDP: R3 needs the Megatron (or VeOmni) engine
            out.append(f"{ACTOR}.megatron.router_replay.mode={v.router_replay}")
        if v.lora:
            out += [
                f"{MODEL}.lora_rank={v.lora.rank}",
                f"{MODEL}.lora_alpha={v.lora.alpha}",
                f"{MODEL}.target_modules={_hydra_list(v.lora.target_modules)}",
                f"{ROLLOUT}.load_format=safetensors",
            ]
        return out
    mg = f"{ACTOR}.megatron"
    out = [
        f"{mg}.tensor_model_parallel_size={p.tensor}",
        f"{mg}.pipeline_model_parallel_size={p.pipeline}",
        f"{mg}.expert_model_parallel_size={p.expert}",
        f"{mg}.expert_tensor_parallel_size={p.expert_tensor}",
        f"{mg}.context_parallel_size={p.context}",
        f"{mg}.param_offload={v.offload}",
        f"{mg}.optimizer_offload={v.offload}",
        f"{mg}.use_mbridge=True",
        f"{mg}.vanilla_mbridge=False",
        f"+{mg}.override_transformer_config.moe_router_dtype=fp32",
    ]
    if v.router_replay:
        out += [f"{mg}.router_replay.mode={v.router_replay}", f"{ROLLOUT}.enable_rollout_routing_replay=True"]
    if v.lora:  # Megatron-Bridge LoRA (needs mbridge, set above)
        out += [
            f"{MODEL}.lora.rank={v.lora.rank}",
            f"{MODEL}.lora.alpha={v.lora.alpha}",
            f"{MODEL}.lora.target_modules={_hydra_list(v.lora.target_modules)}",
        ]
    return out


def _hydra_list(value: list[str] | str) -> str:
    return value if isinstance(value, str) else "[" + ",".join(value) + "]"
