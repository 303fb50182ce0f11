import json

import pytest
import torch
from local_fixtures import build_run_inputs, write_setting

from dppo_bench.config import find_method, load_setting
from dppo_bench.config.runs import resolve_run
from dppo_bench.local.trainer import LocalRun, LocalTrainer
from dppo_bench.rundir import RunDir

CANONICAL = {
    "train/reward_mean",
    "train/response_length_mean",
    "train/entropy_mean",
    "mismatch/abs_diff_mean",
    "mismatch/abs_diff_max",
    "mismatch/diff_min",
    "mismatch/diff_max",
    "tr/mask_frac",
    "tr/mask_frac_pos",
    "tr/mask_frac_neg",
    "tr/bad_update_frac",
    "perf/step_s",
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    setting_path = write_setting(tmp, steps=4, save_every=2)
    base, train = build_run_inputs(tmp, setting_path)
    return load_setting(setting_path), base, train


def fit(inputs, method, out, seed=0):
    setting, base, train = inputs
    trainer = LocalTrainer(
        LocalRun(resolve_run(setting, method, seed), base, train), RunDir(out).create(), progress=False
    )
    return trainer, trainer.fit()


def without_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]


def test_rows_checkpoints_and_canonical_names(inputs, tmp_path):
    _, outcome = fit(inputs, "dppo_binary_tv", tmp_path)
    assert outcome == {"status": "completed", "last_step": 4}
    run = RunDir(tmp_path)
    rows = run.read_metrics()
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert CANONICAL <= set(rows[0])
    assert run.saved_steps() == [0, 2, 4]


def test_the_rollout_anchor_passes_over_the_batch_only_to_measure_the_mismatch(inputs, tmp_path):
    setting, base, train = inputs
    quiet = setting.model_copy(update={"train": setting.train.model_copy(update={"mismatch_every": 0})})
    trainer = LocalTrainer(
        LocalRun(resolve_run(quiet, "dppo_binary_tv", 0), base, train), RunDir(tmp_path).create(), progress=False
    )
    trainer.fit()
    rows = RunDir(tmp_path).read_metrics()
    assert all(r["perf/recompute_s"] < 1e-3 for r in rows)  # no pass at all
    assert not any(k.startswith("mismatch/") or k == "train/entropy_mean" for r in rows for k in r)


def test_the_mismatch_is_measured_over_the_whole_batch_before_the_updates(inputs, tmp_path):
    """As verl's patch measures it: every sample of the rollout batch, at the rollout's parameters."""
    from dppo_bench.local.model import response_logits
    from dppo_bench.local.trainer import generator, group_advantages

    setting, base, train = inputs
    trainer = LocalTrainer(
        LocalRun(resolve_run(setting, "pg_is", 0), base, train), RunDir(tmp_path).create(), progress=False
    )
    trainer._load()
    roll, rewards = trainer._rollout(1, generator(0, 1))
    batch = trainer._batch(roll, group_advantages(rewards, roll.response_mask, trainer.train.responses_per_prompt))
    _, measured = trainer._at_rollout_parameters(1, batch)
    with torch.no_grad():  # an independent forward of every sample
        logits = response_logits(trainer.policy, batch.input_ids, batch.attention_mask, batch.prompt_len)
    pi = torch.log_softmax(logits, -1).gather(-1, batch.responses[..., None]).squeeze(-1).exp()
    diff = (pi - batch.mu_log_probs.exp())[batch.response_mask]
    assert len(rewards) == 16 and diff.numel() > len(rewards)
    assert measured["mismatch/abs_diff_mean"] == pytest.approx(diff.abs().mean().item(), rel=1e-5)
    assert measured["mismatch/diff_min"] == pytest.approx(diff.min().item(), rel=1e-5)
    assert measured["mismatch/diff_max"] == pytest.approx(diff.max().item(), rel=1e-5)


def test_same_seed_same_run_other_seed_other_run(inputs, tmp_path):
    fit(inputs, "minirl", tmp_path / "a")
    fit(inputs, "minirl", tmp_path / "b")
    fit(inputs, "minirl", tmp_path / "c", seed=1)
    a, b, c = (without_perf(RunDir(tmp_path / x).read_metrics()) for x in "abc")
    assert a == b and a != c


def test_recompute_anchor_makes_the_extra_pass(inputs, tmp_path):
    _, _ = fit(inputs, "minirl", tmp_path)
    assert all(r["perf/recompute_s"] > 0 for r in RunDir(tmp_path).read_metrics())


def test_advantages_are_group_centred_without_std(inputs):
    from dppo_bench.local.trainer import group_advantages

    setting, _, _ = inputs
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    mask = torch.ones(8, 5, dtype=torch.bool)
    mask[0, 3:] = False
    adv = group_advantages(rewards, mask, setting.train.responses_per_prompt)  # G = 4 in tiny_smoke
    assert setting.train.responses_per_prompt == 4
    torch.testing.assert_close(adv[0, :3], torch.full((3,), 0.75))
    torch.testing.assert_close(adv[1], torch.full((5,), -0.25))
    assert (adv[0, 3:] == 0).all() and (adv[4:] == 0).all()  # all-correct group: no signal


@pytest.mark.parametrize("group_size", [1, 4])
def test_advantages_equal_verls_grpo_without_std(group_size):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from dppo_bench.local.trainer import group_advantages

    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(12, generator=g)  # not only 0/1: the means must round as verl's do
    mask = torch.rand(12, 7, generator=g) < 0.7
    mask[:, 0] = True
    last = mask.long().cumsum(-1).argmax(-1)
    token_rewards = torch.zeros(mask.shape)
    token_rewards[torch.arange(12), last] = rewards
    index = (torch.arange(12) // group_size).numpy()
    theirs, _ = compute_grpo_outcome_advantage(token_rewards, mask.float(), index, norm_adv_by_std_in_grpo=False)
    assert torch.equal(group_advantages(rewards, mask, group_size), theirs)


def test_a_deadline_stops_at_a_checkpoint_that_resumes_into_the_same_run(inputs, tmp_path):
    import time

    fit(inputs, "pg_is", tmp_path / "full")
    setting, base, train = inputs
    run = LocalRun(resolve_run(setting, "pg_is", 0), base, train)
    stopped = RunDir(tmp_path / "part").create()
    outcome = LocalTrainer(run, stopped, progress=False).fit(deadline=time.monotonic())  # passed: one step
    assert outcome == {"status": "stopped", "last_step": 1}
    assert stopped.saved_steps() == [0, 1]
    assert LocalTrainer(run, stopped, progress=False).fit() == {"status": "completed", "last_step": 4}
    assert without_perf(stopped.read_metrics()) == without_perf(RunDir(tmp_path / "full").read_metrics())


def test_resume_continues_from_the_checkpoint(inputs, tmp_path):
    fit(inputs, "dppo_binary_kl", tmp_path / "full")
    setting, base, train = inputs
    partial = RunDir(tmp_path / "part").create()
    trainer = LocalTrainer(LocalRun(resolve_run(setting, "dppo_binary_kl", 0), base, train), partial, progress=False)
    trainer._load()
    trainer._checkpoint(0, [])
    rows = [trainer.step(1), trainer.step(2)]
    trainer._checkpoint(2, rows)
    partial.append_metrics([trainer.step(3)])  # a row past the checkpoint, as a crash would leave it
    with partial.metrics.open("a") as f:
        f.write('{"step": 4, "train/rew')  # and half a line
    fit(inputs, "dppo_binary_kl", tmp_path / "part")
    assert without_perf(partial.read_metrics()) == without_perf(RunDir(tmp_path / "full").read_metrics())


def test_nan_loss_ends_the_run_as_diverged(inputs, tmp_path, monkeypatch):
    trainer, _ = fit(inputs, "pg_is", tmp_path / "ok")
    setting, base, train = inputs
    bad = LocalTrainer(
        LocalRun(resolve_run(setting, "pg_is", 0), base, train), RunDir(tmp_path / "bad").create(), progress=False
    )
    original = bad.step

    def step(n):
        if n == 3:
            raise FloatingPointError("step 3: the loss is nan")
        return original(n)

    monkeypatch.setattr(bad, "step", step)
    outcome = bad.fit()
    assert outcome["status"] == "diverged" and outcome["last_step"] == 2
    assert [r["step"] for r in RunDir(tmp_path / "bad").read_metrics()] == [1, 2]


def test_nan_in_metrics_is_written_as_null(tmp_path):
    run = RunDir(tmp_path).create()
    run.append_metrics([{"step": 1, "x": float("nan"), "y": float("inf"), "z": 1.5}])
    assert json.loads(run.metrics.read_text()) == {"step": 1, "x": None, "y": None, "z": 1.5}


def test_fig6_fig12_and_appendix_d_statistics_are_recorded(tmp_path, monkeypatch):
    # a random model earns no reward (A = 0: nothing to mask): alternate rewards, and a large lr moves pi enough
    # between mini-batches for GRPO's clip to act
    setting_path = write_setting(tmp_path, steps=3, save_every=3, lr=0.05)
    base, train = build_run_inputs(tmp_path, setting_path)
    alternating = lambda self, roll, problems: (torch.arange(len(roll.mu_logprobs)) % 2).float()  # noqa: E731
    monkeypatch.setattr(LocalTrainer, "_rewards", alternating)
    fit((load_setting(setting_path), base, train), "grpo_clip_higher", tmp_path / "run")
    rows = RunDir(tmp_path / "run").read_metrics()
    for row in rows:
        assert 0.0 < row["rollout/topk_mass_mean"] <= 1.0 + 1e-6
        assert row["tr/mask_frac_nonzero_adv"] >= row["tr/mask_frac"]  # A = 0 tokens leave the denominator
        counts = row["tr/masked_token_counts"]
        assert set(counts) == {"pos", "neg"}
        masked = sum(counts["pos"].values()) + sum(counts["neg"].values())
        assert (masked > 0) == (row["tr/mask_frac"] > 0)
        if masked:
            assert 0.0 < row["tr/masked_mu_mean"] <= 1.0 and row["tr/masked_entropy_mean"] >= 0.0
            assert 0.0 < row["tr/masked_pi_mean"] <= 1.0
        else:
            assert row["tr/masked_mu_mean"] is None and row["tr/masked_pi_mean"] is None  # undefined, as null
    assert any(r["tr/mask_frac"] > 0 for r in rows), "the run should clip some tokens"


@pytest.mark.parametrize(
    ("method", "names"),
    [
        ("gspo", {"tr/mask_frac", "tr/is_ratio_mean"}),  # a sequence-level ratio and mask
        ("sapo", {"tr/gate_mean"}),  # a soft gate
        ("dppo_binary_tv_kl", {"tr/penalty_mean", "tr/mask_frac"}),  # a penalty beside a mask
        ("verl_gspo", {"tr/pg_clipfrac", "tr/ppo_kl"}),  # verl's own function, bypass mode
        ("verl_decoupled_geo_rs", {"tr/pg_clipfrac", "tr/ppo_kl"}),  # decoupled, with verl's rejection sampling
        ("verl_bypass_icepop", {"tr/ppo_kl"}),  # verl's bypass_mode loss with its correction inside
    ],
)
def test_every_kind_of_method_trains_and_records_its_statistics(inputs, tmp_path, method, names):
    _, outcome = fit(inputs, method, tmp_path)
    assert outcome == {"status": "completed", "last_step": 4}
    rows = RunDir(tmp_path).read_metrics()
    assert names <= set(rows[-1])
    if find_method(method).verl is not None:
        assert "tr/mask_frac" not in rows[-1]  # verl's functions report their own statistics, not our surrogate's


def test_a_local_run_reads_no_spec_after_it_was_resolved(inputs, tmp_path, monkeypatch):
    """The command resolves the run once (dppo_bench.config.runs); the trainer grades with the training spec's answer
    type from there and reads no spec itself."""
    from dppo_bench.config import specs

    setting, base, train = inputs
    resolved, read = resolve_run(setting, "pg_is", 0), []
    load = specs._load
    monkeypatch.setattr(specs, "_load", lambda model, path: read.append(path) or load(model, path))
    LocalTrainer(LocalRun(resolved, base, train), RunDir(tmp_path).create(), progress=False).fit()
    assert read == []
