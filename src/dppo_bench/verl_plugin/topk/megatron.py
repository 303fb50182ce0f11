"""Trainer-side top-K divergence in verl 0.9.1's Megatron engine (vocabulary-parallel logits).

Patched: ``MegatronEngineWithLMHead._lm_head_logits_processor``, the function Megatron's
forward calls on the last pipeline stage with this rank's logits shard (tokens of its
context-parallel slice, columns of its tensor-parallel vocabulary shard). The wrapper runs
verl's own processor with the top-K hook switched on; our hook gathers the logits at mu's
kept ids and at the sampled token from the local shard and SUM-reduces them over the TP group
(correct for any TP size: each id lives on exactly one rank). verl then computes log pi of the
sampled token with its vocab-parallel cross entropy; the log-normaliser is recovered from it,
and the per-token TV and KL are returned next to ``log_probs``, so verl's forward gathers
them over CP into nested tensors like every other output.

The kept set is brought to the CP-split layout with verl's own ``preprocess_*_engine`` (as top-K
distillation does), and checked against the engine's label: the rolled input ids run through
the same call must equal the label Megatron hands the processor, or the layouts differ.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

import torch
from tensordict import TensorDict

from dppo_bench.topk import AllReduce, divergences_from_gathered, logits_at, torch_all_reduce
from dppo_bench.verl_plugin.topk.fields import DIVERGENCE_KEYS, TOPK_IDS
from dppo_bench.verl_plugin.topk.hooks import wrap
from dppo_bench.verl_plugin.topk.layout import packed_kept_set


class GatherAtKeptIdsSharded:
    """The logits processor on one TP rank: global-id logits from the local vocabulary shard."""

    def __init__(self, ids: torch.Tensor, label: torch.Tensor, tp_rank: int, tp_size: int, all_reduce: AllReduce):
        self.ids = torch.cat([ids.long(), label.long().clamp(min=0).unsqueeze(-1)], dim=-1)
        self.tp_rank, self.tp_size, self.all_reduce = tp_rank, tp_size, all_reduce
        self.gathered: torch.Tensor | None = None

    def __call__(self, student_logits: torch.Tensor, data: TensorDict, data_format: str) -> dict[str, torch.Tensor]:
        shard = student_logits.shape[-1]
        if student_logits.shape[:-1] != self.ids.shape[:-1]:
            raise RuntimeError(
                f"top-K: logits rows {tuple(student_logits.shape[:-1])} differ from the kept set's "
                f"{tuple(self.ids.shape[:-1])} on this rank"
            )
        if bool((self.ids >= shard * self.tp_size).any()):
            raise ValueError(f"top-K: a kept id is outside the model's vocabulary of {shard * self.tp_size}")
        self.gathered = logits_at(
            student_logits,
            self.ids.to(student_logits.device),
            vocab_start=self.tp_rank * shard,
            all_reduce=self.all_reduce,
        )
        return {}


def cp_split(engine, batch: TensorDict, label: torch.Tensor, data_format: str) -> tuple[torch.Tensor, torch.Tensor]:
    """mu's kept ids and log-probs in the layout of this rank's logits, checked against ``label``."""
    from verl.models.mcore.util import preprocess_bshd_engine, preprocess_thd_engine
    from verl.utils import tensordict_utils as tu

    use_fp8_padding = getattr(engine.tf_config, "fp8", None) in ("e4m3", "hybrid")
    if data_format == "thd":
        layout = engine._get_context_parallel_layout(SimpleNamespace(config=engine.tf_config))

        def split(nested, need_roll=False):
            return preprocess_thd_engine(
                nested, pre_process=True, need_roll=need_roll, use_fp8_padding=use_fp8_padding, cp_layout=layout
            )[0]
    else:
        forced = tu.get_non_tensor_data(data=batch, key="forced_max_seqlen", default=None)

        def split(nested, need_roll=False):
            return preprocess_bshd_engine(
                nested, pre_process=True, need_roll=need_roll, use_fp8_padding=use_fp8_padding, forced_max_seqlen=forced
            )[0]

    input_ids = batch["input_ids"]
    if not torch.equal(split(input_ids, need_roll=True).to(label.device), label):
        raise RuntimeError(
            "top-K: the kept set cannot be put in the layout of Megatron's logits (the rolled input ids do not "
            "reproduce the engine's label); unsupported packing options are in use"
        )
    ids, logprobs = packed_kept_set(batch)
    offsets = input_ids.offsets()
    nested = [torch.nested.nested_tensor_from_jagged(rows.to(offsets.device), offsets) for rows in (ids, logprobs)]
    return split(nested[0]), split(nested[1])


def check_supported(engine, distillation_use_topk: bool) -> None:
    if distillation_use_topk:
        raise RuntimeError("Top-K DPPO cannot be combined with top-K distillation (both use the logits hook)")
    if engine.engine_config.dynamic_context_parallel:
        raise RuntimeError("Top-K DPPO does not support Megatron's dynamic context parallelism")
    if engine.engine_config.pad_to_length:
        raise RuntimeError("Top-K DPPO does not support the engine's pad_to_length (the kept set would misalign)")


def patch_engine(module: ModuleType) -> None:
    """Wrap ``MegatronEngineWithLMHead._lm_head_logits_processor`` of verl's Megatron engine module."""
    wrap(
        module.MegatronEngineWithLMHead,
        "_lm_head_logits_processor",
        ("self", "logits", "label", "temperature"),
        with_topk_outputs,
    )


def with_topk_outputs(original):
    def _lm_head_logits_processor(self, logits, label, temperature, **kwargs):
        batch = kwargs["batch"]
        if kwargs["logits_processor_func"] is None or TOPK_IDS not in batch.keys():
            return original(self, logits, label, temperature, **kwargs)
        from megatron.core import parallel_state as mpu

        check_supported(self, kwargs["distillation_use_topk"])
        ids, mu_logprobs = cp_split(self, batch, label, kwargs["data_format"])
        capture = GatherAtKeptIdsSharded(
            ids,
            label,
            tp_rank=mpu.get_tensor_model_parallel_rank(),
            tp_size=mpu.get_tensor_model_parallel_world_size(),
            all_reduce=torch_all_reduce(mpu.get_tensor_model_parallel_group()),
        )
        kwargs.update(distillation_use_topk=True, distillation_only=False, logits_processor_func=capture)
        ret = original(self, logits, label, temperature, **kwargs)
        divergences = divergences_from_gathered(
            capture.gathered, ret["log_probs"].detach(), mu_logprobs.to(logits.device)
        )
        ret.update({DIVERGENCE_KEYS[kind]: values for kind, values in divergences.items()})
        return ret

    return _lm_head_logits_processor
