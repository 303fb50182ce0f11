"""The FSDP top-K path under Ulysses sequence parallelism: SP = 2 on two CPU processes (gloo).

verl's FSDP engine with Ulysses needs flash-attention kernels, so the engine's forward is replaced by the part of
``prepare_model_inputs`` / ``prepare_model_outputs`` that the top-K wrapper relies on, written with verl's own
pieces: the packed sequence is rolled, padded and sliced by ``ulysses_pad_and_slice_inputs`` /
``slice_input_tensor``, each rank's logits are its slice, and log pi comes back through the engine's own
``_gather_and_unpad_packed``. Our :func:`with_topk_outputs` then slices mu's kept set for the rank (``local_rows``),
gathers the logits at it, and all-gathers and unpads the rows over the SP group; both ranks must get the
single-rank divergences, which equal ``topk_divergence`` on the full softmax.
"""

import socket
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tensordict import TensorDict
from verl.utils import ulysses
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

from dppo_bench.divergence import topk_divergence, topk_of_log_probs
from dppo_bench.verl_plugin.topk.fields import DIVERGENCE_KEYS, TOPK_IDS, TOPK_LOGPROBS
from dppo_bench.verl_plugin.topk.fsdp import with_topk_outputs

K, V = 4, 48
PROMPTS, RESPONSES = [3, 2, 4], [4, 5, 3]  # 21 packed rows: SP = 2 pads one row


class Engine:
    """What the wrapper reads of ``FSDPEngineWithLMHead``, with the engine's own gather-and-unpad."""

    pad_to_length = 0
    _gather_and_unpad_packed = FSDPEngineWithLMHead._gather_and_unpad_packed

    def __init__(self, sp_size: int):
        self.ulysses_sequence_parallel_size = sp_size
        self.use_ulysses_sp = sp_size > 1


def nested(tensors):
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def micro_batch_and_logits() -> tuple[TensorDict, torch.Tensor]:
    """Packed sequences, the trainer's logits for them (row t scores token t + 1), and mu's kept set."""
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, V, (p + r,), generator=g) for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    logits = 2 * torch.randn(sum(PROMPTS) + sum(RESPONSES), V, generator=g)
    ids, mu, start = [], [], 0
    for s, p, r in zip(seqs, PROMPTS, RESPONSES, strict=True):
        scoring = logits[start + p - 1 : start + p - 1 + r]
        kept_ids, kept_mu = topk_of_log_probs(
            (scoring + torch.randn(scoring.shape, generator=g)).float().log_softmax(-1), K, s[p:]
        )
        ids.append(kept_ids.int())
        mu.append(kept_mu)
        start += p + r
    data = TensorDict(
        {
            "input_ids": nested(seqs),
            "prompts": nested([s[:p] for s, p in zip(seqs, PROMPTS, strict=True)]),
            "responses": nested([s[p:] for s, p in zip(seqs, PROMPTS, strict=True)]),
            TOPK_IDS: nested(ids),
            TOPK_LOGPROBS: nested(mu),
        },
        batch_size=[len(seqs)],
    )
    return data, logits


def verl_forward(self, output, output_args, micro_batch, logits_processor_func):
    """verl's ``prepare_model_outputs`` on the remove-padding path, reduced to what the wrapper relies on."""
    local_logits = output.logits.squeeze(0)
    logits_processor_func(student_logits=local_logits.unsqueeze(0), data=micro_batch)
    labels = output_args["input_ids_rmpad_rolled"].unsqueeze(-1)
    log_probs = torch.log_softmax(local_logits, -1).gather(-1, labels).squeeze(-1)
    log_probs = self._gather_and_unpad_packed(log_probs, output_args["pad_size"])
    return {"log_probs": torch.nested.nested_tensor_from_jagged(log_probs, micro_batch["input_ids"].offsets())}


def topk_outputs(sp_size: int) -> dict[str, torch.Tensor]:
    """Response-token divergences from the wrapped forward, on this rank's share of the sequence."""
    data, logits = micro_batch_and_logits()
    rolled = torch.roll(data["input_ids"].values().unsqueeze(0), shifts=-1, dims=1)
    pad = 0
    if sp_size > 1:  # as prepare_model_inputs: the inputs (so the model's logits) are padded and sliced
        rolled, _, pad = ulysses.ulysses_pad_and_slice_inputs(rolled, sp_size=sp_size)
        logits = ulysses.slice_input_tensor(logits.unsqueeze(0), dim=1).squeeze(0)
    output_args = {"input_ids_rmpad_rolled": rolled.squeeze(0), "pad_size": pad}
    model_output = with_topk_outputs(verl_forward)(
        Engine(sp_size), SimpleNamespace(logits=logits.unsqueeze(0)), output_args, data, lambda **_: {}
    )
    out = {}
    for kind, key in DIVERGENCE_KEYS.items():
        rows = model_output[key]
        out[kind] = torch.cat(
            [rows[i][p - 1 : p - 1 + r] for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES, strict=True))]
        )
    return out


def expected() -> dict[str, torch.Tensor]:
    data, logits = micro_batch_and_logits()
    pi = torch.log_softmax(logits, -1)
    rows, start = [], 0
    for p, r in zip(PROMPTS, RESPONSES, strict=True):
        rows.append(torch.arange(start + p - 1, start + p - 1 + r))
        start += p + r
    scoring = pi[torch.cat(rows)]
    ids, mu = data[TOPK_IDS].values().long(), data[TOPK_LOGPROBS].values()
    return {kind: topk_divergence(mu, scoring.gather(-1, ids), kind) for kind in DIVERGENCE_KEYS}


def sp_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        ulysses.set_ulysses_sequence_parallel_group(dist.group.WORLD)
        torch.save(topk_outputs(world), f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_single_rank_matches_the_full_softmax():
    got, want = topk_outputs(1), expected()
    for kind in DIVERGENCE_KEYS:
        torch.testing.assert_close(got[kind], want[kind], rtol=1e-5, atol=1e-6)
        assert want[kind].min() > 1e-3, "mu was perturbed: nothing trivially zero"


@pytest.mark.slow
def test_sequence_parallel_ranks_gather_the_single_rank_result(tmp_path):
    mp.spawn(sp_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    single = topk_outputs(1)
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        for kind in DIVERGENCE_KEYS:
            torch.testing.assert_close(got[kind], single[kind], rtol=1e-6, atol=1e-7, msg=f"rank {rank} {kind}")
