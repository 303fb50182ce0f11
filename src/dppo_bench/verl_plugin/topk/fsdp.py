"""Trainer-side top-K divergence in verl 0.9.1's FSDP engine.

Patched: ``FSDPEngineWithLMHead.prepare_model_outputs``. When the micro-batch carries mu's
kept set and a loss will be computed, the wrapper runs verl's own method with its top-K
logits-processor hook switched on (the hook top-K distillation uses; it hands over the
temperature-scaled, TP-gathered logits of this rank's Ulysses slice, before the log-prob
pass). Our processor only gathers the logits at the K kept ids and at the sampled token: no
vocabulary-sized tensor is made. After verl has computed log pi of the sampled token, the
log-normaliser is recovered from it (``logit - log pi``), the gathered rows are all-gathered
over the SP group the way verl gathers its own outputs, and the per-token TV and KL land in
``model_output`` as nested tensors next to ``log_probs``.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType

import torch
from tensordict import TensorDict

from dppo_bench.topk import divergences_from_gathered, logits_at
from dppo_bench.verl_plugin.topk.fields import DIVERGENCE_KEYS, TOPK_IDS
from dppo_bench.verl_plugin.topk.hooks import wrap
from dppo_bench.verl_plugin.topk.layout import packed_kept_set, sequence_parallel_slice

FLAG = "distillation_use_topk"  # verl's switch for the logits-processor hook


class GatherAtKeptIds:
    """The logits processor: keeps the logits at mu's kept ids and at the sampled token."""

    def __init__(self, ids: torch.Tensor, sampled: torch.Tensor):
        self.ids = torch.cat([ids, sampled.reshape(-1, 1).long()], dim=-1)
        self.gathered: torch.Tensor | None = None

    def __call__(self, student_logits: torch.Tensor, data: TensorDict) -> dict[str, torch.Tensor]:
        logits = student_logits.squeeze(0)
        if logits.shape[0] != self.ids.shape[0]:
            raise RuntimeError(
                f"top-K: the engine's logits have {logits.shape[0]} rows on this rank, mu's kept set "
                f"{self.ids.shape[0]}; the packed layout differs from the one dppo-bench expects"
            )
        if bool((self.ids >= logits.shape[-1]).any()):
            raise ValueError(f"top-K: a kept id is outside the model's vocabulary of {logits.shape[-1]}")
        self.gathered = logits_at(logits, self.ids.to(logits.device))
        return {}


def check_supported(engine, micro_batch: TensorDict) -> None:
    from verl.utils import tensordict_utils as tu

    if tu.get_non_tensor_data(micro_batch, key="use_fused_kernels", default=False):
        raise RuntimeError("Top-K DPPO needs the logits: set actor_rollout_ref.model.use_fused_kernels=False")
    if tu.get_non_tensor_data(micro_batch, key=FLAG, default=False):
        raise RuntimeError("Top-K DPPO cannot be combined with top-K distillation (both use the logits hook)")
    if engine.pad_to_length:
        raise RuntimeError("Top-K DPPO does not support the engine's pad_to_length (the kept set would misalign)")


@contextmanager
def logits_hook_on(micro_batch: TensorDict):
    """Switch verl's logits-processor hook on for one call, restoring the micro-batch after."""
    from verl.utils import tensordict_utils as tu

    had = FLAG in micro_batch.keys()
    tu.assign_non_tensor(micro_batch, **{FLAG: True})
    try:
        yield
    finally:
        if had:
            tu.assign_non_tensor(micro_batch, **{FLAG: False})
        else:
            micro_batch.pop(FLAG)


def local_rows(engine, micro_batch: TensorDict, ids: torch.Tensor) -> torch.Tensor:
    """The kept-set rows of this rank's logits: all of them, or its Ulysses slice."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.ulysses import get_ulysses_sequence_parallel_rank

    if not tu.get_non_tensor_data(micro_batch, key="use_remove_padding", default=True) or not engine.use_ulysses_sp:
        return ids
    return sequence_parallel_slice(ids, engine.ulysses_sequence_parallel_size, get_ulysses_sequence_parallel_rank())


def patch_engine(module: ModuleType) -> None:
    """Wrap ``FSDPEngineWithLMHead.prepare_model_outputs`` of verl's FSDP engine module."""
    wrap(
        module.FSDPEngineWithLMHead,
        "prepare_model_outputs",
        ("self", "output", "output_args", "micro_batch", "logits_processor_func"),
        with_topk_outputs,
    )


def with_topk_outputs(original):
    def prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func):
        if logits_processor_func is None or TOPK_IDS not in micro_batch.keys():
            return original(self, output, output_args, micro_batch, logits_processor_func)
        check_supported(self, micro_batch)
        ids, mu_logprobs = packed_kept_set(micro_batch)
        device = output_args["input_ids_rmpad_rolled"].device
        capture = GatherAtKeptIds(local_rows(self, micro_batch, ids.to(device)), output_args["input_ids_rmpad_rolled"])
        with logits_hook_on(micro_batch):
            model_output = original(self, output, output_args, micro_batch, capture)
        gathered = capture.gathered
        if "pad_size" in output_args:  # the remove-padding path: undo the SP split and its pad
            gathered = self._gather_and_unpad_packed(gathered, output_args["pad_size"])
        log_probs = model_output["log_probs"]
        divergences = divergences_from_gathered(gathered, log_probs.values().detach(), mu_logprobs.to(device))
        offsets = micro_batch["input_ids"].offsets()
        for kind, values in divergences.items():
            model_output[DIVERGENCE_KEYS[kind]] = torch.nested.nested_tensor_from_jagged(values, offsets)
        return model_output

    return prepare_model_outputs
