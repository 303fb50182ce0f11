"""The model a run had at a saved step, for offline evaluation: what :func:`dppo_bench.eval.generate.resolve_model`
loads, by the run's backend (run.json's ``backend``).

- ``local``: the step's checkpoint, ``checkpoints/step_<N>`` (an HF model directory; step 0 is the base model),
  checked against its SHA256SUMS. The local trainer keeps every one, so a missing one is damage.
- ``verl``: step 0 is the setting's base model (run.json's ``model``); step N the model part of verl's checkpoint,
  which :class:`dppo_bench.verl_plugin.keep_weights.KeepWeights` keeps in ``weights/step_<N>`` (verl deletes all
  but the last two checkpoints), or the checkpoint itself while verl has not deleted it. Both are in verl's own
  format: ``resolve_model`` converts them with verl's model merger. A step verl saved nothing of is not an error
  (:class:`NotSaved`): the evaluation lists it.
"""

from __future__ import annotations

from pathlib import Path

from dppo_bench.errors import UserError
from dppo_bench.io import verify_checksums
from dppo_bench.rundir import RunDir


class NotSaved(FileNotFoundError):
    """verl kept no weights of the step (a run trained before weights were kept, or one step short of a save)."""


def saved_model(run: RunDir, info: dict, step: int) -> str:
    """The model of ``step``: a directory (HF or verl checkpoint), or a hub id for a verl run's base model."""
    backend = info.get("backend")
    if backend == "local":
        checkpoint = run.checkpoint_dir(step)
        if not checkpoint.is_dir():
            raise FileNotFoundError(f"{checkpoint}: no checkpoint for step {step} of this run")
        verify_checksums(checkpoint)
        return str(checkpoint)
    if backend != "verl":
        raise UserError(f"{run.run_json}: field 'backend': expected 'local' or 'verl', got {backend!r}")
    if step == 0:
        return base_model(run, info)
    for directory in (run.weights_dir(step), run.checkpoints / f"global_step_{step}"):
        if directory.is_dir():
            return str(directory)
    raise NotSaved(f"{run.weights_dir(step)}: verl kept no weights of step {step} of this run")


def base_model(run: RunDir, info: dict) -> str:
    """What a verl run started from (run.json's ``model``, written by the launcher): its pinned snapshot, the local
    directory it names, or an unpinned hub id."""
    model = info.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("path"), str):
        raise UserError(f"{run.run_json}: field 'model': no record of the base model this run started from")
    if model.get("snapshot"):
        return str(model["snapshot"])
    if model.get("local") and not Path(model["path"]).is_dir():
        raise FileNotFoundError(f"{model['path']}: the base model of {run.path} (run.json field 'model') is gone")
    return model["path"]
