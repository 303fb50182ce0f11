"""pi's top-K log-probs from vocabulary-parallel logits: TP = 1, 2, 4 shards simulated in one process.

Each shard runs the production code in its own thread; the all-reduce is a barrier that sums
(or maxes) the shards' tensors in rank order. Results must equal the unsharded computation.
"""

import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from dppo_bench.divergence import kept_token_set, topk_divergence
from dppo_bench.topk import (
    divergences_from_gathered,
    log_normalizer,
    logits_at,
    no_reduce,
    topk_log_probs,
)
from dppo_bench.verl_plugin.topk import megatron
from dppo_bench.verl_plugin.topk.fields import DIVERGENCE_KEYS, TOPK_IDS

V, K = 96, 5


class SimulatedGroup:
    """An all-reduce over ``size`` threads: every rank gets the reduction of all ranks' tensors."""

    def __init__(self, size: int):
        self.size = size
        self.slots: list[torch.Tensor | None] = [None] * size
        self.barrier = threading.Barrier(size, timeout=60)
        self.calls = [0] * size

    def all_reduce_for(self, rank: int):
        def all_reduce(tensor: torch.Tensor, op: str) -> torch.Tensor:
            self.calls[rank] += 1
            self.slots[rank] = tensor.clone()
            self.barrier.wait()
            stacked = torch.stack(self.slots)
            reduced = stacked.sum(0) if op == "sum" else stacked.amax(0)
            self.barrier.wait()  # all ranks have read before the next call overwrites a slot
            return tensor.copy_(reduced)

        return all_reduce


def run_shards(tp: int, fn):
    """fn(rank, all_reduce) on every rank at once; returns the per-rank results."""
    group = SimulatedGroup(tp)
    with ThreadPoolExecutor(tp) as pool:
        futures = [pool.submit(fn, rank, group.all_reduce_for(rank)) for rank in range(tp)]
        return [f.result() for f in futures], group


def shard(logits: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    width = logits.shape[-1] // tp
    return logits[..., rank * width : (rank + 1) * width].contiguous()


def case(gen, tokens=7):
    """Logits with a peaked distribution, mu's kept set (top-K of a perturbed mu), the sampled tokens."""
    logits = torch.randn(tokens, V, generator=gen) * 3
    logits[:, 11] += 6  # a dominant token, in the first shard at every TP size
    mu_logits = logits + 0.3 * torch.randn(tokens, V, generator=gen)
    sampled = torch.multinomial(torch.softmax(mu_logits, -1), 1, generator=gen).squeeze(-1)
    sampled[0] = V - 1  # far outside the top-K and in the last shard
    mu_lp_full = torch.log_softmax(mu_logits, -1)
    top_lp, top_ids = mu_lp_full.topk(K, dim=-1)
    ids, mu_lp = kept_token_set(top_ids, top_lp, sampled, mu_lp_full.gather(-1, sampled[:, None]).squeeze(-1))
    return logits, ids, mu_lp, sampled


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_sharded_gather_and_normalizer_equal_the_unsharded_ones(gen, tp):
    logits, ids, _, _ = case(gen)

    def on_rank(rank, all_reduce):
        local = shard(logits, rank, tp)
        width = local.shape[-1]
        return (
            logits_at(local, ids, vocab_start=rank * width, all_reduce=all_reduce),
            log_normalizer(local, all_reduce=all_reduce, chunk=3),  # 3 rows per step: several steps
            topk_log_probs(local, ids, vocab_start=rank * width, all_reduce=all_reduce),
        )

    results, group = run_shards(tp, on_rank)
    full_lp = torch.log_softmax(logits, -1)
    for gathered, normalizer, log_probs in results:  # every rank holds the global result
        torch.testing.assert_close(gathered, logits.gather(-1, ids))
        torch.testing.assert_close(normalizer, torch.logsumexp(logits, -1))
        torch.testing.assert_close(log_probs, full_lp.gather(-1, ids))
    assert group.calls == [6] * tp  # gather | max, sum | max, sum, gather: every rank joins every reduction


def test_a_shard_contributes_only_the_ids_it_owns(gen):
    logits, ids, _, _ = case(gen)
    local = shard(logits, 1, 2)
    got = logits_at(local, ids, vocab_start=V // 2)
    owned = (ids >= V // 2) & (ids < V)
    assert owned.any() and (~owned).any()
    torch.testing.assert_close(got[owned], logits.gather(-1, ids)[owned])
    assert (got[~owned] == 0).all()


def test_the_engines_normalizer_replaces_the_vocabulary_pass(gen):
    logits, ids, mu_lp, sampled = case(gen)
    full_lp = torch.log_softmax(logits, -1)
    gathered = logits_at(logits, torch.cat([ids, sampled[:, None]], -1))
    got = divergences_from_gathered(gathered, full_lp.gather(-1, sampled[:, None]).squeeze(-1), mu_lp)
    for kind in ("tv", "kl"):
        expected = topk_divergence(mu_lp, full_lp.gather(-1, ids), kind)
        torch.testing.assert_close(got[kind], expected, rtol=1e-5, atol=1e-6)
        assert (expected > 1e-3).all()  # not a trivially zero divergence


def test_unsharded_path_is_the_single_shard_case(gen):
    logits, ids, _, _ = case(gen)
    torch.testing.assert_close(
        topk_log_probs(logits, ids, all_reduce=no_reduce), torch.log_softmax(logits, -1).gather(-1, ids)
    )


class FakeMegatronEngine:
    """verl 0.9.1's ``_lm_head_logits_processor`` as far as top-K is concerned.

    Temperature applied in place, then the top-K hook (with the logits), then log pi of the label
    by a vocab-parallel cross entropy (here: the sharded normaliser and gather, themselves checked
    against torch above), the way ``MegatronEngineWithLMHead`` orders them.
    """

    engine_config = types.SimpleNamespace(dynamic_context_parallel=False, pad_to_length=False)

    def __init__(self, all_reduce, rank):
        self.all_reduce, self.rank = all_reduce, rank

    def _lm_head_logits_processor(
        self,
        logits,
        label,
        temperature,
        *,
        calculate_sum_pi_squared,
        calculate_entropy,
        distillation_use_topk,
        distillation_only,
        logits_processor_func,
        batch,
        data_format,
    ):
        logits.div_(temperature.unsqueeze(-1))
        ret = {}
        if distillation_use_topk:
            ret.update(logits_processor_func(student_logits=logits, data=batch, data_format=data_format))
        width = logits.shape[-1]
        log_probs = topk_log_probs(
            logits, label.unsqueeze(-1), vocab_start=self.rank * width, all_reduce=self.all_reduce
        )
        ret["log_probs"] = log_probs.squeeze(-1)
        logits.zero_()  # Megatron's cross entropy overwrites the logits: nothing may read them after
        return ret


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_patched_megatron_processor_equals_full_softmax_for_every_tp(gen, tp, monkeypatch):
    logits, ids, mu_lp, sampled = case(gen, tokens=9)
    temperature = torch.full((1, 9), 0.8)
    reference = torch.log_softmax(logits / 0.8, -1)
    rank_of = threading.local()

    class Engine(FakeMegatronEngine):
        pass

    megatron.patch_engine(types.SimpleNamespace(MegatronEngineWithLMHead=Engine))
    monkeypatch.setattr(megatron, "cp_split", lambda engine, batch, label, fmt: (ids[None], mu_lp[None]))
    monkeypatch.setattr(megatron, "torch_all_reduce", lambda group: rank_of.all_reduce)
    mpu = types.SimpleNamespace(
        get_tensor_model_parallel_rank=lambda: rank_of.rank,
        get_tensor_model_parallel_world_size=lambda: tp,
        get_tensor_model_parallel_group=lambda: None,
    )
    fake_megatron = types.ModuleType("megatron")
    fake_megatron.core = types.ModuleType("megatron.core")
    fake_megatron.core.parallel_state = mpu
    monkeypatch.setitem(sys.modules, "megatron", fake_megatron)
    monkeypatch.setitem(sys.modules, "megatron.core", fake_megatron.core)
    monkeypatch.setitem(sys.modules, "megatron.core.parallel_state", mpu)

    def on_rank(rank, all_reduce):
        rank_of.rank, rank_of.all_reduce = rank, all_reduce
        return Engine(all_reduce, rank)._lm_head_logits_processor(
            shard(logits, rank, tp)[None].clone(),
            label=sampled[None],
            temperature=temperature.clone(),
            calculate_sum_pi_squared=False,
            calculate_entropy=False,
            distillation_use_topk=False,
            distillation_only=False,
            logits_processor_func=lambda **kw: pytest.fail("the loss is not a logits processor here"),
            batch={TOPK_IDS: None},
            data_format="thd",
        )

    results, _ = run_shards(tp, on_rank)
    for ret in results:
        torch.testing.assert_close(ret["log_probs"][0], reference.gather(-1, sampled[:, None]).squeeze(-1))
        for kind, key in DIVERGENCE_KEYS.items():
            expected = topk_divergence(mu_lp, reference.gather(-1, ids), kind)
            torch.testing.assert_close(ret[key][0], expected, rtol=1e-4, atol=1e-5)


def test_megatron_refuses_distillation_and_dynamic_cp():
    engine = types.SimpleNamespace(
        engine_config=types.SimpleNamespace(dynamic_context_parallel=True, pad_to_length=False)
    )
    with pytest.raises(RuntimeError, match="distillation"):
        megatron.check_supported(engine, distillation_use_topk=True)
    with pytest.raises(RuntimeError, match="dynamic context"):
        megatron.check_supported(engine, distillation_use_topk=False)
