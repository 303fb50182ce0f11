"""A method of one's own, with a hyperparameter the suite has never seen, in three files: README journey 2's rule
module, recipe and test, written into a copy of the config root (DPPO_BENCH_CONFIG_ROOT), never into the checkout.

It validates, plans, reaches verl's workers through our channel alone (a fresh process given only the channel, as
Ray gives it to a worker, registers the rule and computes its loss), and one update of verl's actor and one of the
local trainer agree on it (slow, as tests/unit/test_backends_agree.py).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from both_backends import one_update_on_both_backends
from hydra.core.override_parser.overrides_parser import OverridesParser
from snakemake_fixtures import ENV, job_counts, recipe_root, snakemake

from dppo_bench.config.roots import ROOT_VARIABLE
from dppo_bench.verl_plugin.contract import LOSS_ENV

README = Path(__file__).resolve().parents[2] / "README.md"
NAME = "log_ratio_band"


def journey_files() -> dict[str, str]:
    """path -> content of every file README journey 2 writes (its ``cat > path <<'END'`` blocks)."""
    text = README.read_text().split("<!-- journey-2 -->")[1].split("<!-- /journey-2 -->")[0]
    return {m[1]: m[3] for m in re.finditer(r"cat > (\S+) <<'(\w+)'\n(.*?)\n\2\n", text, re.S)}


def test_the_journey_writes_the_rule_the_recipe_and_the_test_and_nothing_else():
    written = {f"recipes/rules/{NAME}.py", f"recipes/methods/{NAME}.yaml", f"tests/unit/test_{NAME}.py"}
    assert set(journey_files()) == written


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = recipe_root(tmp_path_factory.mktemp("own"))
    for path, content in journey_files().items():
        if not path.startswith("tests/"):
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(content + "\n")
    return root


def dppo_bench(root: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "dppo_bench", *args], capture_output=True, text=True,
                          env={**ENV, ROOT_VARIABLE: str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def channel(root: Path, profile: str = "sanity") -> str:
    """What the launcher puts into Ray's runtime environment for the method (read back as Hydra reads it)."""
    overrides = dppo_bench(root, "methods", "overrides", NAME, "--profile", profile).splitlines()
    parsed = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(overrides)}
    assert parsed["actor_rollout_ref.actor.policy_loss.loss_mode"] == NAME
    return parsed[f"ray_kwargs.ray_init.runtime_env.env_vars.{LOSS_ENV}"]


def test_the_recipe_validates_against_the_rules_own_declaration(root, tmp_path):
    listed = dppo_bench(root, "methods", "list")
    assert f"mask={NAME}" in listed and "log_ratio_max" in listed
    spec = json.loads(channel(root, "scaling"))
    assert spec["hyperparameters"] == {"log_ratio_max": 0.2, "is_cap": 5.0}
    assert spec["module"] == str((root / f"recipes/rules/{NAME}.py").resolve())
    bad = root / "recipes/methods" / f"{NAME}.yaml"
    text = bad.read_text()
    try:
        bad.write_text(text.replace("log_ratio_max: 0.3", "log_ratio_max: -0.3"))
        proc = subprocess.run([sys.executable, "-m", "dppo_bench", "methods", "list"], capture_output=True, text=True,
                              env={**ENV, ROOT_VARIABLE: str(root)})  # fmt: skip
        assert proc.returncode != 0
        assert f"{NAME}.yaml: field 'hyperparameters.sanity.log_ratio_max'" in proc.stderr
        assert "greater than 0" in proc.stderr
    finally:
        bad.write_text(text)


def test_the_pipeline_plans_it(root, tmp_path):
    target = f"results/runs/tiny_sanity/{NAME}/seed0/eval/tiny_arith/summary.json"
    proc = snakemake(tmp_path, "-n", target, root=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout)["train"] == 1


WORKER = r"""
import json, sys, torch
import verl  # nothing else: the plugin imports the rule's module named by the channel, as in a Ray worker
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_policy_loss_fn
g = torch.Generator().manual_seed(0)
log_mu = torch.log_softmax(torch.randn(4, 9, 5, generator=g), -1)[..., 0]
log_pi = log_mu + 0.5 * torch.randn(4, 9, generator=g)
adv = torch.randn(4, 1, generator=g).expand(4, 9).contiguous()
lp = log_pi.clone().requires_grad_()
loss, metrics = get_policy_loss_fn(sys.argv[1])(
    old_log_prob=log_mu, log_prob=lp, advantages=adv, response_mask=torch.ones(4, 9, dtype=torch.bool),
    config=OmegaConf.create({"global_batch_info": {}}))
loss.backward()
torch.save({"log_mu": log_mu, "log_pi": log_pi, "adv": adv, "grad": lp.grad}, sys.argv[2])
print("RESULT" + json.dumps({"mask_frac": metrics["actor/mask_frac"]}))
"""


def test_a_worker_given_only_the_channel_registers_and_runs_the_rule(root, tmp_path):
    env = {k: v for k, v in ENV.items() if k != ROOT_VARIABLE}  # no config root: the channel alone
    env.update({LOSS_ENV: channel(root), "VERL_USE_EXTERNAL_PLUGINS": "auto"})
    proc = subprocess.run([sys.executable, "-c", WORKER, NAME, str(tmp_path / "out.pt")], capture_output=True,
                          text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt")
    log_r = out["log_pi"] - out["log_mu"]  # the band written out again: dropped where it moves past 0.3
    dropped = ((out["adv"] > 0) & (log_r > 0.3)) | ((out["adv"] < 0) & (log_r < -0.3))
    expected = -out["adv"] * log_r.clamp(-20, 20).exp() * ~dropped / dropped.numel()
    torch.testing.assert_close(out["grad"], expected, rtol=1e-5, atol=1e-8)
    assert 0 < json.loads(proc.stdout.split("RESULT")[1])["mask_frac"] < 1
    assert os.environ.get(LOSS_ENV) is None  # nothing leaked into this process


@pytest.mark.slow
def test_verls_actor_and_the_local_trainer_agree_on_it(root):
    result = one_update_on_both_backends(NAME, **{ROOT_VARIABLE: str(root)})[NAME]
    assert result["local"]["mask_frac"] > 0 and result["local"]["grad_norm"] > 0
    assert set(result["verl"]) == set(result["local"])
    for key, value in result["local"].items():
        assert result["verl"][key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), key
