"""Every patch of verl 0.9.1 the suite makes, applied in one process, for the pinned verl only.

Called by the plugin's entry point (:mod:`dppo_bench.verl_plugin.entry`) on ``import verl``, so it runs in the
driver, the TaskRunner and every Ray worker (vLLM servers, agent-loop workers, actor workers). Each patch waits for
its module (:mod:`dppo_bench.verl_plugin.topk.hooks`); applying twice changes nothing. On any verl other than the
pinned one nothing is patched and :class:`VerlVersionError` says why; the Top-K loss modes then refuse to run with
the same message. Importing this module patches nothing.
"""

from __future__ import annotations

from dppo_bench.verl_plugin import masked_tokens, mismatch
from dppo_bench.verl_plugin.contract import PINNED_VERL, cpu_requested
from dppo_bench.verl_plugin.topk import agent_loop, fsdp, loss, megatron, rollout
from dppo_bench.verl_plugin.topk.hooks import Patch, when_imported

# (module, the patch applied to it once it is imported), in order
PATCHES: tuple[tuple[str, Patch], ...] = (
    # the Top-K plumbing (dppo_bench.verl_plugin.topk)
    ("verl.workers.rollout.vllm_rollout.vllm_async_server", rollout.patch_vllm_server),
    ("verl.experimental.agent_loop.agent_loop", agent_loop.patch_output),
    ("verl.experimental.agent_loop.single_turn_agent_loop", agent_loop.patch_single_turn),
    ("verl.trainer.ppo.padding_utils", agent_loop.patch_padding_template),
    ("verl.workers.utils.losses", loss.patch_ppo_loss),
    ("verl.workers.engine_workers", loss.patch_ppo_loss),
    ("verl.workers.engine.fsdp.transformer_impl", fsdp.patch_engine),
    ("verl.workers.engine.megatron.transformer_impl", megatron.patch_engine),
    # |pi - mu| at equal parameters in bypass mode
    (mismatch.TRAINER_MODULE, mismatch.patch_trainer),
    # App. D's counts of masked token ids, in runs that set their directory
    (masked_tokens.TRAINER_MODULE, masked_tokens.patch_trainer),
    (masked_tokens.WORKER_MODULE, masked_tokens.patch_worker),
)


class VerlVersionError(RuntimeError):
    """The installed verl is not the version the patches were written against."""


_status: VerlVersionError | None = None  # why the patches are not installed, once install() ran


def check_verl_version(version: str) -> None:
    if version != PINNED_VERL:
        raise VerlVersionError(
            f"dppo-bench's patches target verl {PINNED_VERL} and the installed verl is {version}: nothing was "
            f"patched, and dppo_topk_* loss modes cannot run; install verl=={PINNED_VERL}"
        )


def install() -> None:
    """Check the verl version, then register every patch (idempotent); with ``DPPO_BENCH_VERL_DEVICE=cpu``, also
    verl's CPU support (:mod:`dppo_bench.verl_plugin.cpu`)."""
    global _status
    import verl

    try:
        check_verl_version(verl.__version__)
    except VerlVersionError as err:
        _status = err
        raise
    for name, patch in PATCHES:
        when_imported(name, patch)
    if cpu_requested():
        from dppo_bench.verl_plugin import cpu  # optional: a CPU run's alone; it imports verl's platform layer

        cpu.install()
    _status = None


def installation_error() -> VerlVersionError | None:
    """The reason the patches are missing in this process, if :func:`install` refused."""
    return _status
