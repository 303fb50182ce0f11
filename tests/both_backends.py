"""One update of verl 0.9.1's actor and one of the local trainer on the same batch and weights, per method: the
comparison that lets the local backend stand in for verl (tests/unit/test_backends_agree.py), and that a method of
one's own runs through too (README, journey 2; tests/unit/test_new_method.py).

Each runs in a fresh process, with the environment the launcher gives every process of a CPU run of verl; a
``DPPO_BENCH_CONFIG_ROOT`` in ``env`` makes the methods those of another config root.
"""

import json
import os
import subprocess
import sys

from dppo_bench.config import find_setting
from dppo_bench.verl_launch.run_config import device_env

UPDATE_BOTH = r"""
import json, os, socket, sys, tempfile  # the methods are the arguments
from pathlib import Path
from functools import partial

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
import torch
import verl  # the plugin: our loss modes, our patches, and (DPPO_BENCH_VERL_DEVICE=cpu) the CPU platform
from tensordict import TensorDict
from verl.trainer.config.config import CheckpointConfig
from verl.utils import tensordict_utils as tu
from verl.utils.distributed import initialize_global_process_group_ray
from verl.workers.config import ActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig, PolicyLossConfig
from verl.workers.engine import EngineRegistry
from verl.workers.utils.losses import ppo_loss

from dppo_bench.config import find_method, find_setting
from dppo_bench.divergence import topk_of_log_probs
from dppo_bench.local.model import build_model, load_model, save_model
from dppo_bench.local.tokenizer import build_tokenizer
from dppo_bench.local.update import Batch, Loss, update
from dppo_bench.methods.verl_losses import IN_LOSS, rollout_correction
from dppo_bench.verl_plugin.contract import LOSS_ENV, encode

initialize_global_process_group_ray(timeout_second=60)
setting = find_setting("tiny_verl_local")
K, PROMPTS, RESPONSES = setting.local.top_k, [3, 5, 4, 2, 6, 3], [7, 4, 9, 5, 2, 8]
ADVANTAGES = [1.0, -1.0, 0.5, -0.5, 1.0, -1.0]
g = torch.Generator().manual_seed(0)
tokenizer = build_tokenizer()
model_dir = Path(tempfile.mkdtemp()) / "model"
save_model(build_model(setting.local.model.model_dump(), tokenizer, seed=0), tokenizer, model_dir)
V = len(tokenizer)

engine = EngineRegistry.new(
    model_type="language_model", backend="fsdp2",
    model_config=HFModelConfig(path=str(model_dir), load_tokenizer=False, use_remove_padding=True,
                               override_config={"attn_implementation": "sdpa"}),
    engine_config=FSDPEngineConfig(
        strategy="fsdp2", fsdp_size=1, use_torch_compile=False, micro_batch_size_per_gpu=len(PROMPTS),
        infer_micro_batch_size_per_gpu=len(PROMPTS),
        mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
    ),
    # lr 0: verl's weights stay the initial ones, so every method is compared at the same weights
    optimizer_config=FSDPOptimizerConfig(lr=0.0, weight_decay=0.0, clip_grad=1.0),
    checkpoint_config=CheckpointConfig(),
)
engine.initialize()
policy = load_model(model_dir).train()
initial = {k: v.detach().clone() for k, v in policy.state_dict().items()}

# the batch: random prompts and responses sampled from mu, a perturbed pi (a mismatched rollout engine)
NOISE = 2.0
seqs, samples = [], []
for p, r in zip(PROMPTS, RESPONSES):
    s = torch.randint(4, V, (p,), generator=g)
    mu_rows = []
    with torch.no_grad():
        for _ in range(r):
            logits = policy(s[None]).logits[0, -1].float()
            mu_logits = logits + NOISE * torch.randn(logits.shape, generator=g)
            token = torch.multinomial(torch.softmax(mu_logits, -1), 1, generator=g)
            s, mu_rows = torch.cat([s, token]), [*mu_rows, mu_logits]
        pi = torch.log_softmax(policy(s[None]).logits[0].float(), -1)[p - 1 : p - 1 + r]
    mu_logits = torch.stack(mu_rows)
    ids, mu_topk = topk_of_log_probs(mu_logits.float().log_softmax(-1), K, s[p:])
    # pi_old of the recompute anchor: the policy one update earlier (as for a step's second mini-batch)
    old = torch.log_softmax(pi + 1.0 * torch.randn(pi.shape, generator=g), -1)
    seqs.append(s)
    samples.append({
        "pi_old": old.gather(-1, s[p:, None]).squeeze(-1),
        "mu": torch.log_softmax(mu_logits, -1).gather(-1, s[p:, None]).squeeze(-1),
        "ids": ids, "mu_topk": mu_topk,
    })

def nested(ts):
    return torch.nested.as_nested_tensor(ts, layout=torch.jagged)

def verl_batch(anchor, correction=None):
    fields = {
        "input_ids": nested(seqs),
        "position_ids": nested([torch.arange(len(s)) for s in seqs]),
        "prompts": nested([s[:p] for s, p in zip(seqs, PROMPTS)]),
        "responses": nested([s[p:] for s, p in zip(seqs, PROMPTS)]),
        "response_mask": nested([torch.ones(r, dtype=torch.long) for r in RESPONSES]),
        "loss_mask": nested([torch.ones(r, dtype=torch.long) for r in RESPONSES]),
        "advantages": nested([torch.full((r,), a) for r, a in zip(RESPONSES, ADVANTAGES)]),
        "rollout_topk_ids": nested([x["ids"].int() for x in samples]),
        "rollout_topk_logprobs": nested([x["mu_topk"] for x in samples]),
    }
    if anchor == "rollout":  # bypass mode: old_log_probs is mu
        fields["old_log_probs"] = nested([x["mu"] for x in samples])
    elif correction is None:  # our rules' decoupled mode: pi_old, beside rollout IS weights and mu itself
        fields["old_log_probs"] = nested([x["pi_old"] for x in samples])
        fields["rollout_is_weights"] = nested([(x["pi_old"] - x["mu"]).exp() for x in samples])
        fields["rollout_log_probs"] = nested([x["mu"] for x in samples])
    else:  # verl's mode in decoupled mode: the driver's correction, computed by verl's helper on padded rows
        weights, mask = correction
        fields["old_log_probs"] = nested([x["pi_old"] for x in samples])
        fields["response_mask"] = nested([mask[i, :r].long() for i, r in enumerate(RESPONSES)])
        if weights is not None:
            fields["rollout_is_weights"] = nested([weights[i, :r] for i, r in enumerate(RESPONSES)])
    data = TensorDict(fields, batch_size=[len(seqs)])
    tu.assign_non_tensor(data, temperature=1.0, use_remove_padding=True, use_dynamic_bsz=False,
                         micro_batch_size_per_gpu=len(seqs), max_token_len_per_gpu=4096, use_fused_kernels=False,
                         global_batch_size=len(seqs))
    return data

def local_batch(anchor, loss=None):
    L, T = max(PROMPTS), max(RESPONSES)
    B = len(seqs)
    ids = torch.full((B, L + T), tokenizer.pad_token_id)
    attention = torch.zeros(B, L + T, dtype=torch.bool)
    per_token = {name: torch.zeros(B, T) for name in ("mu", "pi_old", "adv")}
    mask = torch.zeros(B, T, dtype=torch.bool)
    topk_ids, topk_lp = torch.zeros(B, T, K, dtype=torch.long), torch.zeros(B, T, K)
    for i, (s, p, r) in enumerate(zip(seqs, PROMPTS, RESPONSES)):
        ids[i, L - p : L + r] = s
        attention[i, L - p : L + r] = True
        mask[i, :r] = True
        per_token["mu"][i, :r], per_token["pi_old"][i, :r] = samples[i]["mu"], samples[i]["pi_old"]
        per_token["adv"][i, :r] = ADVANTAGES[i]
        topk_ids[i, :r], topk_lp[i, :r] = samples[i]["ids"], samples[i]["mu_topk"]
    batch = Batch(
        input_ids=ids, attention_mask=attention, prompt_len=L, responses=ids[:, L:], response_mask=mask,
        mu_log_probs=per_token["mu"], anchor_log_probs=per_token["mu" if anchor == "rollout" else "pi_old"],
        advantages=per_token["adv"], topk_ids=topk_ids, topk_log_probs=topk_lp,
    )
    if anchor == "recompute" and loss is not None and loss.verl is not None:  # as the local trainer does, per batch
        weights, kept, _ = rollout_correction(loss.values, batch.anchor_log_probs, batch.mu_log_probs, mask)
        batch = Batch(**{**batch.__dict__, "rollout_is_weights": weights, "response_mask": kept, "loss_mask": mask})
    return batch

def verl_actor(recipe, values):
    # verl's ActorConfig of the method, from the keys our overrides write: our rules read our channel (set here
    # as Ray sets it for a worker); verl's modes read their declared verl keys
    fields, policy_loss = {}, {"loss_mode": recipe.loss_mode}
    if recipe.rule is not None:
        os.environ[LOSS_ENV] = encode(recipe.rule, values)
    else:
        for key, value in recipe.verl.keys(recipe.anchor, values).items():
            if key.startswith(IN_LOSS + "."):
                policy_loss.setdefault("rollout_correction", {})[key.rpartition(".")[2]] = value
            elif key.startswith("actor_rollout_ref.actor.policy_loss."):
                policy_loss[key.rpartition(".")[2]] = value
            elif key.startswith("actor_rollout_ref.actor."):
                fields[key.rpartition(".")[2]] = value
    return ActorConfig(strategy="fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=len(seqs),
                       ppo_mini_batch_size=len(seqs), loss_agg_mode="token-mean",
                       policy_loss=PolicyLossConfig(**policy_loss), **fields)

STATS = ["mask_frac", "is_ratio_mean", "masked_mu_mean", "gate_mean", "penalty_mean", "pg_clipfrac", "ppo_kl"]
out = {}
for method in sys.argv[1:]:
    recipe = find_method(method)
    # the efficiency study's rules have only the efficiency profile
    profile = "efficiency" if "efficiency" in recipe.hyperparameters else setting.hyperparameter_profile
    hp = recipe.profile(profile)
    loss_spec = Loss.of(recipe, profile, "token-mean", {})
    local = local_batch(recipe.anchor, loss_spec)
    correction = None
    if recipe.verl is not None and recipe.anchor == "recompute":
        correction = (local.rollout_is_weights, local.response_mask)
    actor = verl_actor(recipe, hp)
    torch.manual_seed(0)  # verl's clip_cov draws its masked tokens from torch's global generator, on both sides
    with engine.train_mode():
        trained = engine.train_batch(verl_batch(recipe.anchor, correction),
                                     loss_function=partial(ppo_loss, config=actor))
    metrics = {k: (v.aggregate() if hasattr(v, "aggregate") else v) for k, v in trained["metrics"].items()}
    policy.load_state_dict(initial)  # the local update moved them
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4, weight_decay=0.0)
    torch.manual_seed(0)
    loss, grad_norm, stats = update(policy, optimizer, local, loss_spec, temperature=1.0, grad_clip=1.0)
    scalar = lambda v: float(v[0] if isinstance(v, list) else v)
    out[method] = {
        "verl": {"loss": scalar(metrics["actor/pg_loss"]), "grad_norm": scalar(metrics["grad_norm"]),
                 **{k: scalar(metrics[f"actor/{k}"]) for k in STATS if f"actor/{k}" in metrics}},
        "local": {"loss": loss, "grad_norm": grad_norm, **{k: stats[k] for k in STATS if k in stats}},
    }
print("RESULT" + json.dumps(out))
"""


def one_update_on_both_backends(*methods: str, **env: str) -> dict:
    """method -> {"verl": {...}, "local": {...}}: the loss, gradient norm and statistics of one update on each."""
    cpu = device_env(find_setting("tiny_verl"))  # what the launcher gives every process of a CPU run
    proc = subprocess.run(
        [sys.executable, "-c", UPDATE_BOTH, *methods],
        capture_output=True,
        text=True,
        env={**os.environ, **cpu, "VERL_USE_EXTERNAL_PLUGINS": "auto", **env},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])
