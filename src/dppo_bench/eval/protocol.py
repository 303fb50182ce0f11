"""How a run is scored on one benchmark, and what of that makes its evaluation (never its training) out of date.

An evaluation's *protocol* is the benchmark spec (without its title and notes), the steps it scores and the
sampling of its samples: ``n``, ``temperature`` and ``top_p`` of the benchmark and, as the longest response, the
setting's ``train.max_response_length`` (what verl's online validation generates at most, so that online and
offline scores of one benchmark are the same measurement). Its sha256 is written into ``summary.json`` by
``dppo-bench evaluate``, is a parameter of the pipeline's evaluate job, and is compared by aggregation and
``dppo-bench plan``: an edited spec or a new list of steps re-evaluates, and a setting's training identity
(:meth:`dppo_bench.config.Setting.sha256`) does not move with it.
"""

from __future__ import annotations

from dppo_bench.config import Setting, canonical_sha256, identity_sha256
from dppo_bench.config.specs import BenchmarkSpec

SPEC_NOT_PROTOCOL = ("title", "notes")  # what an eval spec holds for its readers only


def spec_sha256(spec: BenchmarkSpec) -> str:
    """What the benchmark is: its problems, answer type, prompt, n and sampling."""
    return identity_sha256(spec, SPEC_NOT_PROTOCOL)


def sampling_of(
    spec: BenchmarkSpec,
    max_tokens: int | None,
    *,
    n: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
) -> dict:
    """How samples of ``spec`` are drawn: its n, temperature and top_p, each unless given (a command's flag; None
    means the spec's), and ``max_tokens`` (a run's max response length). The one place sampling is resolved."""
    s = spec.sampling
    return {
        "n": spec.n if n is None else n,
        "temperature": s.temperature if temperature is None else temperature,
        "top_p": s.top_p if top_p is None else top_p,
        "max_tokens": max_tokens,
    }


def protocol_sha256(spec: BenchmarkSpec, steps: list[int], max_tokens: int) -> str:
    return canonical_sha256({"spec": spec_sha256(spec), "steps": list(steps), "max_tokens": max_tokens})


def setting_protocol_sha256(setting: Setting, spec: BenchmarkSpec) -> str:
    """The protocol a setting's runs are evaluated with on ``spec`` today (what their summary.json must record)."""
    return protocol_sha256(spec, setting.eval_steps(spec.id), setting.train.max_response_length)
