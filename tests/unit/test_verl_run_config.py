"""run_overrides of every (method, setting) pair of every experiment, composed with verl 0.9.1's own config on CPU.

Each distinct pair is composed and validated once (~1.5 s: Hydra composition, verl's validate_config, the typed
sections). One pair per setting runs by default; the others are marked slow (CI runs them too).
"""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dppo_bench.config import EXPERIMENTS_DIR, find_method, find_setting, load_experiment, setting_paths
from dppo_bench.config.runs import resolve_run
from dppo_bench.verl_launch.compose import compose_ppo_config, validate
from dppo_bench.verl_launch.run_config import REWARD_FUNCTION, RunPaths, run_overrides
from dppo_bench.verl_plugin.contract import LOSS_ENV, decode
from dppo_bench.vllm_cpu import VLLM_CPU_ENV

SETTINGS = {p.stem: find_setting(p.stem) for p in setting_paths()}
PATHS = RunPaths(
    run_dir=Path("/runs/r"),
    train_file=Path("/data/train.parquet"),
    val_files=(Path("/data/aime24.parquet"), Path("/data/aime25.parquet")),
    metrics_log=Path("/runs/r/verl_logs/attempt-001.jsonl"),
)


def experiment_pairs() -> list[tuple[str, str]]:
    pairs = []
    for path in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
        for setting, method, _ in load_experiment(path).run_keys(lambda s: SETTINGS[s].seeds):
            if SETTINGS[setting].backend == "verl" and (setting, method) not in pairs:
                pairs.append((setting, method))
    return pairs


PAIRS = experiment_pairs()
FIRST_OF_SETTING = {setting: method for setting, method in reversed(PAIRS)}


def test_every_verl_setting_is_in_some_experiment():
    """Trained in one, or, for a setting probed through an engine instead of verl (``probe:``), probed in one."""
    verl = {s for s, v in SETTINGS.items() if v.backend == "verl" and v.probe is None}
    assert verl == {s for s, _ in PAIRS} and len(verl) == 11
    assert len(PAIRS) >= 40
    engine_probed = {s for s, v in SETTINGS.items() if v.probe is not None}
    probed = {s for path in EXPERIMENTS_DIR.glob("*.yaml") for s in load_experiment(path).probes}
    assert engine_probed and engine_probed <= probed


@pytest.mark.parametrize(
    ("setting", "method"),
    [pytest.param(s, m, marks=() if FIRST_OF_SETTING[s] == m else pytest.mark.slow, id=f"{s}-{m}") for s, m in PAIRS],
)
def test_the_pair_composes_into_a_valid_verl_config(setting, method):
    s, recipe = SETTINGS[setting], find_method(method)
    cfg = compose_ppo_config(run_overrides(resolve_run(s, recipe, 0), PATHS))
    typed = validate(cfg)
    actor, rollout = typed["actor"], typed["rollout"]
    assert actor.policy_loss.loss_mode == recipe.loss_mode
    assert typed["rollout_correction"].bypass_mode is (recipe.anchor == "rollout")
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size * s.train.mini_batches == s.train.prompts_per_step
    fsdp = "fsdp2" if s.verl.device == "cpu" else "fsdp"  # FSDP1 cannot run on CPU parameters
    assert actor.strategy == ("megatron" if s.verl.engine == "megatron" else fsdp)
    assert rollout.calculate_log_probs is True and rollout.n == s.train.responses_per_prompt


def test_router_replay_on_fsdp_is_rejected_by_verls_config():
    fsdp = SETTINGS["sanity_r1d_1p5b"]
    r3 = fsdp.model_copy(update={"verl": fsdp.verl.model_copy(update={"router_replay": "R3"})})
    overrides = run_overrides(resolve_run(r3, find_method("dppo_binary_tv"), 0), PATHS)
    assert "actor_rollout_ref.actor.megatron.router_replay.mode=R3" in overrides
    with pytest.raises(Exception, match="megatron"):
        validate(compose_ppo_config(overrides))


def test_router_replay_on_megatron_reaches_actor_and_rollout():
    typed = validate(
        compose_ppo_config(run_overrides(resolve_run(SETTINGS["moe_base_r3"], find_method("dppo_binary_tv"), 0), PATHS))
    )
    assert typed["actor"].megatron.router_replay.mode == "R3"
    assert typed["rollout"].enable_rollout_routing_replay is True


def test_sanity_setting_pins_the_papers_values():
    """DPPO-Binary-TV in the sanity test (App. C.1): every value verl will run with."""
    s, recipe = SETTINGS["sanity_r1d_1p5b"], find_method("dppo_binary_tv")
    overrides = run_overrides(resolve_run(s, recipe, 3), PATHS)
    cfg = compose_ppo_config(overrides)
    typed = validate(cfg)
    actor, rollout = typed["actor"], typed["rollout"]
    assert (cfg.data.train_batch_size, rollout.n, actor.ppo_epochs) == (64, 8, 1)
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 16  # prompts: 64 / 4 mini-batches
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (1024, 6976)
    assert cfg.data.train_files == ["/data/train.parquet"] and cfg.data.seed == 3
    assert list(cfg.data.val_files) == ["/data/aime24.parquet", "/data/aime25.parquet"]
    assert actor.optim.lr == 1e-6 and actor.optim.weight_decay == 0.01 and actor.optim.clip_grad == 1.0
    assert actor.loss_agg_mode == "seq-mean-token-sum-norm" and actor.loss_scale_factor == 6976
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert decode(recipe.rule, env[LOSS_ENV]).values() == {"delta": 0.15, "is_cap": None}  # our channel to the workers
    assert actor.use_kl_loss is False and actor.entropy_coeff == 0
    assert typed["rollout_correction"].bypass_mode is True and typed["rollout_correction"].rollout_is is None
    assert (rollout.temperature, rollout.top_p, rollout.top_k, rollout.seed) == (1.0, 1.0, -1, 3)
    assert (rollout.val_kwargs.n, rollout.val_kwargs.temperature, rollout.val_kwargs.top_p) == (32, 0.6, 0.95)
    assert rollout.custom == {"dppo_bench_mismatch_every": 1}
    assert cfg.actor_rollout_ref.model.path == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo is False
    assert cfg.reward.custom_reward_function.path == str(REWARD_FUNCTION)
    assert "reward_kwargs" not in OmegaConf.to_container(cfg.reward.custom_reward_function)  # score = 0/1 accuracy
    t = cfg.trainer
    assert (t.total_training_steps, t.total_epochs, t.save_freq, t.test_freq) == (3600, 3600, 100, 100)
    assert (t.use_v1, t.v1.trainer_mode, t.resume_mode, t.val_before_train) == (True, "sync", "auto", True)
    assert (t.default_local_dir, t.validation_data_dir) == ("/runs/r/checkpoints", "/runs/r/validation")
    assert (t.nnodes, t.n_gpus_per_node, t.max_actor_ckpt_to_keep) == (1, 8, 2)
    assert list(t.logger) == ["console", "file"]
    assert t.experiment_name == "sanity_r1d_1p5b__dppo_binary_tv__seed3"
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "dppo_bench.verl_plugin.entry"
    assert env.VERL_FILE_LOGGER_PATH == "/runs/r/verl_logs/attempt-001.jsonl"


def test_wandb_is_one_switch_and_a_pinned_model_trains_from_its_snapshot():
    s, recipe = SETTINGS["sanity_r1d_1p5b"], find_method("pg_is")
    cfg = compose_ppo_config(run_overrides(resolve_run(s, recipe, 0), PATHS, wandb=True, wandb_mode="online"))
    assert list(cfg.trainer.logger) == ["console", "file", "wandb"]
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE == "online"
    snapshot = RunPaths(**{**PATHS.__dict__, "model": Path("/hub/snapshots/abc123")})
    cfg = compose_ppo_config(run_overrides(resolve_run(s, recipe, 0), snapshot))
    assert cfg.actor_rollout_ref.model.path == "/hub/snapshots/abc123"


TOPK_PROFILES = {"sanity", "scaling"}  # the profiles the Top-K recipes have


@pytest.mark.parametrize(
    "setting",
    sorted(s for s, v in SETTINGS.items() if v.backend == "verl" and v.hyperparameter_profile in TOPK_PROFILES),
)
def test_topk_runs_keep_the_settings_k(setting):
    overrides = run_overrides(resolve_run(SETTINGS[setting], find_method("dppo_topk_tv"), 0), PATHS)
    assert f"++actor_rollout_ref.rollout.custom.dppo_topk_k={SETTINGS[setting].verl.topk}" in overrides


@pytest.mark.parametrize("method", ["dppo_topk_tv", "dppo_binary_tv"])
def test_each_override_is_given_once(method):
    """The v1 trainer is what the whole run needs and what a Top-K method needs: one override says it."""
    setting = next(s for s in SETTINGS.values() if s.backend == "verl" and s.hyperparameter_profile in TOPK_PROFILES)
    overrides = run_overrides(resolve_run(setting, find_method(method), 0), PATHS)
    assert overrides.count("trainer.use_v1=True") == 1
    assert len(overrides) == len(set(overrides))


def test_every_ray_worker_of_a_cpu_run_gets_vllms_cpu_environment():
    """Unpinned and with its KV cache size, in the runtime environment Ray gives each worker (vLLM's among them):
    lost, the real-LM run's rollouts take 278 s a step instead of 20 (dppo_bench.vllm_cpu)."""
    cfg = compose_ppo_config(run_overrides(resolve_run(SETTINGS["tiny_verl"], find_method("dppo_binary_tv"), 0), PATHS))
    env_vars = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert VLLM_CPU_ENV["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert VLLM_CPU_ENV.items() <= env_vars.items()
    gpu = compose_ppo_config(
        run_overrides(resolve_run(SETTINGS["sanity_r1d_1p5b"], find_method("dppo_binary_tv"), 0), PATHS)
    )
    assert not VLLM_CPU_ENV.keys() & OmegaConf.to_container(gpu.ray_kwargs.ray_init.runtime_env.env_vars).keys()
