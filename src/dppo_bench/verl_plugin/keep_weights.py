"""verl's checkpoint callback that keeps the model of every checkpoint, for offline evaluation after training.

verl keeps the last two checkpoints of a run (``trainer.max_actor_ckpt_to_keep=2``: what resuming needs, without
the optimizer state of every save). After each save, verl 0.9.1's trainer calls the ``on_save`` of the class that
``trainer.checkpoint_callback_class`` names, on the driver, once the workers have written the checkpoint
(:mod:`verl.trainer.ppo.checkpoint_callback`). This one hard-links the model part of the actor's checkpoint (every
entry but the optimizer's and the extra state's: learning-rate schedule and RNG) into ``RUN_DIR/weights/step_<N>``.
A hard link takes no space while verl's checkpoint exists, and the model outlives verl's deletion of it. It stays in
verl's format; :mod:`dppo_bench.eval.saved_weights` hands it to verl's model merger when a benchmark is scored on it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from dppo_bench.rundir import RunDir

# what of an actor checkpoint is not the model: FSDP's optim_world_size_*/extra_state_world_size_* files, Megatron's
# optimizer/ and extra/ directories
NOT_MODEL = ("optim", "extra")


class KeepWeights(CheckpointCallback):
    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        if async_save:  # files may still be in flight; the suite never asks verl for asynchronous saves
            print(f"dppo-bench: step {global_step} was saved asynchronously; its weights are not kept", flush=True)
            return
        run = RunDir(Path(str(self.config.trainer.default_local_dir)).parent)  # RUN_DIR/checkpoints (run_config)
        keep_model(Path(checkpoint_dir) / "actor", run.weights_dir(global_step))


def keep_model(actor: Path, target: Path) -> None:
    """Link the model part of ``actor`` (a verl actor checkpoint) into ``target``, which appears whole (replacing
    any earlier one) or not at all."""
    if not actor.is_dir():
        raise FileNotFoundError(f"{actor}: no actor checkpoint to keep the weights of")
    partial = target.with_name(f"{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for source in sorted(actor.rglob("*")):
        relative = source.relative_to(actor)
        if relative.parts[0].startswith(NOT_MODEL):
            continue
        destination = partial / relative
        if source.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, destination)
        except OSError:  # a filesystem without hard links: a copy
            shutil.copy2(source, destination)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
