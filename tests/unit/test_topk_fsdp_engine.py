"""The trainer-side top-K divergence through verl 0.9.1's own FSDP engine, on CPU.

A fresh process builds ``FSDPEngineWithLMHead`` around a tiny random Qwen2 saved to a tmp dir
(nothing downloaded) on the plugin's CPU support (the environment a CPU run's processes get: a CPU
platform, ``VERL_ENGINE_DEVICE=cuda``), with sdpa attention and fsdp2 on a gloo group of one.
``import verl`` loads the plugin, which patches the engine as it is imported. The
divergences the engine returns (both the remove-padding and the padded forward) are compared
with ``topk_divergence`` on the full softmax of an HF forward of the same model; then one
training step runs a Top-K loss mode end to end.
"""

import pytest
from test_topk_support import result_of, run_python

from dppo_bench.config import find_setting
from dppo_bench.methods import get_mask
from dppo_bench.verl_launch.run_config import device_env
from dppo_bench.verl_plugin.contract import LOSS_ENV, encode

ENGINE_CHECK = r"""
import json, os, sys, tempfile
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
from functools import partial

import torch
import torch.distributed as dist
import verl  # the plugin: our loss modes and patches, and the CPU platform (the environment's switch)

dist.init_process_group("gloo", rank=0, world_size=1)

from tensordict import TensorDict
from transformers import AutoModelForCausalLM, Qwen2Config
from verl.trainer.config.config import CheckpointConfig
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig, FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
from verl.workers.engine import EngineRegistry
from verl.workers.utils.losses import ppo_loss  # patched by the plugin on import

from dppo_bench.divergence import topk_divergence, topk_of_log_probs

K, T, V = 6, 0.7, 512
PROMPTS, RESPONSES = [4, 2, 3, 1], [5, 3, 6, 2]
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
model_dir = tempfile.mkdtemp()
hf = AutoModelForCausalLM.from_config(Qwen2Config(
    vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, attn_implementation="sdpa"))
hf.save_pretrained(model_dir)
engine = EngineRegistry.new(
    model_type="language_model", backend="fsdp2",
    model_config=HFModelConfig(path=model_dir, load_tokenizer=False, use_remove_padding=True,
                               override_config={"attn_implementation": "sdpa"}),
    engine_config=FSDPEngineConfig(
        strategy="fsdp2", fsdp_size=1, use_torch_compile=False, micro_batch_size_per_gpu=2,
        infer_micro_batch_size_per_gpu=2,
        mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
    ),
    optimizer_config=FSDPOptimizerConfig(lr=1e-3),
    checkpoint_config=CheckpointConfig(),
)
engine.initialize()

# sequences, and mu: the model's own distribution (temperature T), perturbed like a rollout engine would
seqs = [torch.randint(0, V, (p + r,), generator=g) for p, r in zip(PROMPTS, RESPONSES)]
with torch.no_grad():
    pi_full = [torch.log_softmax(hf(s[None]).logits[0].float() / T, -1) for s in seqs]
rows = {"ids": [], "mu": [], "expected_tv": [], "expected_kl": [], "sampled_mu": []}
for s, lp, p, r in zip(seqs, pi_full, PROMPTS, RESPONSES):
    scoring = lp[p - 1 : p - 1 + r]  # row t scores token t + 1
    mu_logits = scoring + 0.8 * torch.randn(scoring.shape, generator=g)
    ids, mu_lp = topk_of_log_probs(mu_logits.float().log_softmax(-1), K, s[p:])
    rows["ids"].append(ids.int()); rows["mu"].append(mu_lp)
    rows["sampled_mu"].append(torch.log_softmax(mu_logits, -1).gather(-1, s[p:, None]).squeeze(-1))
    rows["expected_tv"].append(topk_divergence(mu_lp, scoring.gather(-1, ids), "tv"))
    rows["expected_kl"].append(topk_divergence(mu_lp, scoring.gather(-1, ids), "kl"))

def nested(ts):
    return torch.nested.as_nested_tensor(ts, layout=torch.jagged)

def batch(remove_padding):
    data = TensorDict({
        "input_ids": nested(seqs),
        "position_ids": nested([torch.arange(len(s)) for s in seqs]),
        "prompts": nested([s[:p] for s, p in zip(seqs, PROMPTS)]),
        "responses": nested([s[p:] for s, p in zip(seqs, PROMPTS)]),
        "response_mask": nested([torch.ones(r, dtype=torch.long) for r in RESPONSES]),
        "loss_mask": nested([torch.ones(r, dtype=torch.long) for r in RESPONSES]),
        "old_log_probs": nested(rows["sampled_mu"]),
        "advantages": nested([torch.full((r,), a) for r, a in zip(RESPONSES, [1.0, -1.0, 0.5, -0.5])]),
        "rollout_topk_ids": nested(rows["ids"]),
        "rollout_topk_logprobs": nested(rows["mu"]),
    }, batch_size=[4])
    tu.assign_non_tensor(data, temperature=T, use_remove_padding=remove_padding, use_dynamic_bsz=False,
                         micro_batch_size_per_gpu=2, max_token_len_per_gpu=4096, use_fused_kernels=False,
                         global_batch_size=4)
    return data

actor = ActorConfig(strategy="fsdp2", rollout_n=1, ppo_micro_batch_size_per_gpu=2, ppo_mini_batch_size=4,
                    clip_ratio_low=0.05, clip_ratio_high=0.05, clip_ratio_c=1e4, loss_agg_mode="token-mean",
                    policy_loss={"loss_mode": sys.argv[1]})
loss_fn = partial(ppo_loss, config=actor)
out = {"patched": hasattr(type(engine).prepare_model_outputs, "__dppo_bench_patched__")}
for remove_padding in (True, False):
    with engine.eval_mode():
        result = engine.infer_batch(batch(remove_padding), loss_function=loss_fn)
    mo = result["model_output"]
    got = {}
    for kind in ("tv", "kl"):
        full = mo[f"dppo_topk_{kind}"]
        got[kind] = [full[i][p - 1 : p - 1 + r] for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES))]
    out[f"rmpad={remove_padding}"] = {
        kind: {"got": torch.cat(got[kind]).tolist(), "expected": torch.cat(rows[f"expected_{kind}"]).tolist()}
        for kind in ("tv", "kl")
    }
with engine.train_mode():
    trained = engine.train_batch(batch(True), loss_function=loss_fn)
metrics = {k: (v.aggregate() if hasattr(v, "aggregate") else v) for k, v in trained["metrics"].items()}
out["train"] = {k: float(v) if not isinstance(v, list) else [float(x) for x in v] for k, v in metrics.items()
                if k.startswith("actor/") or k == "grad_norm"}
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def engine_run():
    cpu = device_env(find_setting("tiny_verl"))  # verl on the CPU, as the launcher sets it up
    rule = get_mask("dppo_topk_tv")
    channel = {LOSS_ENV: encode(rule, rule.values(delta=0.05, is_cap=None))}  # as Ray gives it to a worker
    return result_of(run_python(ENGINE_CHECK, "dppo_topk_tv", **cpu, **channel, VERL_USE_EXTERNAL_PLUGINS="auto"))


@pytest.mark.slow
@pytest.mark.parametrize("path", ["rmpad=True", "rmpad=False"])
@pytest.mark.parametrize("kind", ["tv", "kl"])
def test_engine_divergence_equals_the_full_softmax_one(engine_run, path, kind):
    assert engine_run["patched"]
    got, expected = engine_run[path][kind]["got"], engine_run[path][kind]["expected"]
    assert len(got) == len(expected) == 16  # every response token of the four samples
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 1e-5
    assert min(expected) > 0.01  # mu was perturbed: nothing trivially zero


@pytest.mark.slow
def test_a_topk_mode_trains_through_the_engine(engine_run):
    train = engine_run["train"]
    tv = engine_run["rmpad=True"]["tv"]["expected"]
    # micro-batches of two samples: samples 0-1 and 2-3, 8 response tokens each; verl averages
    # the per-micro-batch statistics
    assert train["actor/topk_divergence_mean"] == pytest.approx(sum(tv) / len(tv), rel=1e-4)
    assert train["actor/topk_divergence_max"] == pytest.approx((max(tv[:8]) + max(tv[8:])) / 2, rel=1e-4)
    assert 0.0 < train["actor/mask_frac"] < 1.0
    assert train["grad_norm"] > 0 and abs(train["actor/pg_loss"]) > 0
