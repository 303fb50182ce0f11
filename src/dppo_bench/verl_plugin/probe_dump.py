"""Fig. 2's probe inside verl's actor workers: the patched ``ppo_loss`` (:mod:`dppo_bench.verl_plugin.topk.loss`)
writes each call's response tokens (mu, pi and the top-K TV) when the probe's directory is set; the launcher's
probe (:mod:`dppo_bench.verl_launch.probe`) joins the files after the run."""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

import numpy as np
import torch

from dppo_bench.io import atomic_write
from dppo_bench.verl_plugin.contract import PROBE_DIR_ENV, PROBE_FILE_PREFIX

_calls = itertools.count()


@torch.no_grad()
def dump_if_probing(log_prob: torch.Tensor, mu_log_prob: torch.Tensor, tv: torch.Tensor, mask: torch.Tensor) -> None:
    """In a probe run, write this call's response tokens: mu, pi and the top-K TV (padded (batch, len) tensors)."""
    dump_dir = os.environ.get(PROBE_DIR_ENV)
    if not dump_dir:
        return
    valid = mask.bool()
    arrays = {
        "mu": mu_log_prob.detach().float()[valid].exp(),
        "pi": log_prob.detach().float()[valid].exp(),
        "tv": tv.detach().float()[valid],
    }
    path = Path(dump_dir) / f"{PROBE_FILE_PREFIX}{socket.gethostname()}-{os.getpid()}-{next(_calls)}.npz"
    atomic_write(path, lambda f: np.savez(f, **{k: v.cpu().numpy() for k, v in arrays.items()}))
