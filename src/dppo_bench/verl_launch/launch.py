"""One verl-backend training run: ``python -m verl.trainer.main_ppo <overrides>`` into its run directory.

An *attempt* is one start of verl's trainer. Each attempt

1. checks the prepared data against the setting (file, ``data_source``) and records its sha256s;
2. reads the step verl will resume from: ``latest_checkpointed_iteration.txt`` in ``trainer.default_local_dir``
   (``RUN_DIR/checkpoints``, ``trainer.resume_mode=auto``), as verl's ``find_latest_ckpt_path`` does;
3. records itself in run.json (the exact overrides, verl version, model, data, nodes and GPUs, the SLURM job)
   *before* verl starts, with its own FileLogger file ``RUN_DIR/verl_logs/attempt-<k>.jsonl``;
4. runs the trainer: here when the setting fits on one node (verl starts its own Ray; the trainer is started
   again when Ray's node missed its start window), or across the nodes of the SLURM allocation with a Ray cluster
   built for it (:mod:`dppo_bench.verl_launch.slurm`);
5. folds the attempt's rows into metrics.jsonl (:mod:`dppo_bench.verl_launch.records`), also when verl crashed or
   the launcher was signalled; an attempt whose fold never ran (the launcher was killed) is folded by the next one
   before it starts;
6. writes ``train.completed`` only when verl exited 0 having logged the setting's last step.

wandb stays offline unless ``WANDB_MODE`` says otherwise; metrics.jsonl is the record the aggregation reads.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from dppo_bench import canonical
from dppo_bench.config import ConfigError, Setting
from dppo_bench.config.runs import OfResolvedRun, ResolvedRun
from dppo_bench.errors import UserError
from dppo_bench.eval import protocol
from dppo_bench.io import file_sha256
from dppo_bench.provenance import now
from dppo_bench.rundir import RunDir, run_name
from dppo_bench.runlock import run_lock
from dppo_bench.verl_launch.records import MetricMap, apply_attempt
from dppo_bench.verl_launch.run_config import RunPaths, device_env, run_overrides
from dppo_bench.verl_launch.slurm import (
    RAY_START_TRIES,
    ClusterError,
    RayOnSlurm,
    SlurmJob,
    driver_command,
    plan_cluster,
)
from dppo_bench.verl_plugin.contract import PINNED_VERL, PLUGIN_MODULE

MAIN_PPO = (sys.executable, "-m", "verl.trainer.main_ppo")
TRACKER = "latest_checkpointed_iteration.txt"  # verl.utils.checkpoint.checkpoint_manager's tracker file
# What Ray raises when a new node's raylet misses its fixed 30 s window to register (ray/_private/node.py), which
# a loaded machine can: verl starts Ray before anything else, so a trainer that failed so trained nothing and is
# started again, at most RAY_START_TRIES starts in one attempt
RAY_NODE_TIMEOUT = b"The current node timed out during startup"


def resumed_step(checkpoints: Path) -> int:
    """The step verl resumes from with ``resume_mode=auto`` (0: from scratch), as ``find_latest_ckpt_path``."""
    tracker = checkpoints / TRACKER
    if not tracker.is_file():
        return 0
    text = tracker.read_text().strip()
    if not text.isdigit():
        raise UserError(f"{tracker}: expected the step of the last checkpoint, found {text[:40]!r}")
    return int(text) if (checkpoints / f"global_step_{int(text)}").is_dir() else 0


def _data_sources(path: Path) -> set[str]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=["data_source"])
    except (OSError, ValueError, KeyError) as e:  # pyarrow: not parquet / no such column
        raise ConfigError(path, "data_source", f"not a prepared parquet with a data_source column ({e})") from None
    return set(table.column("data_source").to_pylist())


def _data_record(path: Path, spec_id: str, data_source: str) -> dict:
    """What run.json records of one prepared file, after checking it is the one the setting names."""
    if not path.is_file():
        raise ConfigError(path, "", f"no such file (prepare it: dppo-bench data prepare {spec_id} --out DIR)")
    found = _data_sources(path)
    if found != {data_source}:
        raise ConfigError(path, "data_source", f"holds {sorted(found)}; {spec_id} is {data_source!r}")
    record = {"id": spec_id, "path": str(path.resolve()), "sha256": file_sha256(path)}
    manifest = path.with_name(f"{path.stem}.manifest.json")
    if manifest.is_file():  # written beside it by data prepare: the problem set's own hash and its verification
        info = json.loads(manifest.read_text())
        record.update(data_sha256=info.get("data_sha256"), verified=info.get("verified"))
    return record


def data_records(run: ResolvedRun, train: Path, val: Sequence[Path]) -> dict:
    """run.json's ``inputs``; each online benchmark's record also says what it is and how verl samples it, which
    decides whether its dumps are still its scores (:func:`dppo_bench.eval.step_samples.validated_online`)."""
    setting, train_spec, benchmarks = run.setting, run.train_data, run.online
    if len(val) != len(benchmarks):
        raise UserError(
            f"setting {setting.id!r} validates on {', '.join(setting.eval.online)}: give one --val-data file for "
            f"each, in that order (got {len(val)})"
        )
    online = [
        {
            **_data_record(p, b.id, b.data_source),
            "spec_sha256": protocol.spec_sha256(b),
            "sampling": protocol.sampling_of(b, setting.train.max_response_length),
        }
        for p, b in zip(val, benchmarks, strict=True)
    ]
    return {"train": _data_record(train, train_spec.id, train_spec.data_source), "val": online}


def model_record(setting: Setting) -> tuple[dict, Path | None]:
    """(run.json's model entry, a local snapshot to train from): a pinned revision is downloaded (or found in the
    hub cache) and its directory given to verl, which has no revision key of its own."""
    model = setting.verl.model
    record = {"path": model.path, "revision": model.revision}
    local = Path(model.path)
    if local.is_dir():  # e.g. a model the pipeline built; absolute, since Ray workers run in other directories
        weights = sorted(local.glob("*.safetensors"))
        return {**record, "local": True, "sha256": {w.name: file_sha256(w) for w in weights}}, local.resolve()
    if model.revision is None:
        return {**record, "resolved_revision": cached_revision(model.path)}, None
    from huggingface_hub import snapshot_download

    snapshot = Path(snapshot_download(repo_id=model.path, revision=model.revision))
    return {**record, "snapshot": str(snapshot)}, snapshot


def cached_revision(repo_id: str) -> str | None:
    """The hub commit of the model in the local hub cache (what an unpinned run loads), if it is there."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent.name if isinstance(found, str) else None


@dataclass(frozen=True)
class VerlRun(OfResolvedRun):
    resolved: ResolvedRun  # the setting, recipe, seed and data specs, resolved once by the command
    run_dir: RunDir
    train_data: Path
    val_data: tuple[Path, ...]
    wandb: bool = False
    command: tuple[str, ...] = MAIN_PPO  # verl's trainer entry point, e.g. wrapped in a container runtime
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def paths(self, attempt: int, model: Path | None) -> RunPaths:
        return RunPaths(
            run_dir=self.run_dir.path.resolve(),
            train_file=self.train_data.resolve(),
            val_files=tuple(p.resolve() for p in self.val_data),
            metrics_log=self.run_dir.attempt_log(attempt).resolve(),
            model=model,
        )


def _validated_at(run: VerlRun, step: int) -> bool:
    """Whether step ``step``'s online validation is already recorded (metrics and dump): then a resumed attempt
    need not validate again before training."""
    wanted = {canonical.eval_metric(b.id, b.n) for b in run.resolved.online}
    row = next((r for r in run.run_dir.read_metrics() if r["step"] == step), {})
    dump = run.run_dir.validation_dump(step)
    return wanted <= {k for k, v in row.items() if v is not None} and dump.is_file()


def fold_pending(run_dir: RunDir, metric_map: MetricMap) -> None:
    """Fold every recorded attempt whose rows never reached metrics.jsonl (its launcher was killed)."""
    attempts = run_dir.read_run().get("attempts", [])
    for a in attempts:
        if not a.get("folded"):
            a.update(apply_attempt(run_dir, Path(a["log"]), a["resumed_from"], metric_map), folded=True)
            run_dir.update_run(attempts=attempts)


class _Signals:
    """While the trainer runs, SIGTERM (SLURM's time limit, scancel) is passed on to it instead of killing the
    launcher, so the attempt is still folded and recorded."""

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.received: int | None = None

    def _handle(self, signum, _frame):
        self.received = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def __enter__(self):
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGTERM, self._previous)


def placement(env: Mapping[str, str], nodes: int) -> SlurmJob | None:
    """The SLURM job a multi-node run builds its Ray cluster in (None: one node, or the user's own cluster)."""
    if nodes == 1 or env.get("RAY_ADDRESS"):
        return None
    job = SlurmJob.from_env(env)
    if job is None:
        raise UserError(
            f"this setting trains on {nodes} nodes: run it inside a SLURM allocation of {nodes} nodes "
            "(snakemake --profile profiles/slurm) or point RAY_ADDRESS at a Ray cluster of that size"
        )
    return job


def own_ray(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a one-node trainer: verl's ``ray.init()`` without an address would join the newest
    cluster that ``ray start`` left on the machine (a user's own, on a workstation or a shared login node), and then
    fail on the ``num_cpus`` it passes; ``RAY_ADDRESS=local`` makes Ray start one of its own. A ``RAY_ADDRESS`` the
    user set is kept."""
    return {**env, "RAY_ADDRESS": env.get("RAY_ADDRESS") or "local"}


def slurm_record(env: Mapping[str, str]) -> dict | None:
    """The SLURM job a one-node run ran in, for run.json: a failed ``scontrol`` query only leaves it incomplete,
    since a one-node run does not need the node list."""
    try:
        job = SlurmJob.from_env(env)
    except ClusterError as e:
        return {"job_id": env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"), "error": str(e)}
    return job.record() if job else None


def _echo(child: subprocess.Popen) -> bool:
    """Copy the child's piped output to ours, line by line; whether Ray's node start timed out in it."""
    timed_out = False
    for line in child.stdout:
        sys.stdout.write(line.decode(errors="replace"))
        sys.stdout.flush()
        timed_out = timed_out or RAY_NODE_TIMEOUT in line
    return timed_out


def _wait(child: subprocess.Popen, grace_s: float = 60.0) -> tuple[int, bool]:
    """(the child's exit code, whether Ray's node start timed out in its piped output); if this process is
    interrupted meanwhile, the child is stopped before it returns."""
    try:
        timed_out = _echo(child) if child.stdout is not None else False
        return child.wait(), timed_out
    except BaseException:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        raise


def run_trainer(
    argv: list[str],
    env: dict[str, str],
    nodes: int,
    gpus_per_node: int,
    *,
    keep_fds: tuple[int, ...] = (),
    popen: Callable[..., subprocess.Popen] = subprocess.Popen,
    cluster: Callable[..., RayOnSlurm] = RayOnSlurm,
    plan: Callable[..., object] = plan_cluster,
) -> tuple[int, dict]:
    """Run verl's trainer to its end; (exit code, where it ran and any signal passed on to it). Several nodes
    need a SLURM allocation (a Ray cluster is built in it) or a Ray cluster of the user's own (``RAY_ADDRESS``).
    ``keep_fds``: descriptors the trainer inherits (the run's lock)."""
    job = placement(env, nodes)
    slurm = job.record() if job else slurm_record(env)
    where: dict = {"nodes": nodes, "gpus_per_node": gpus_per_node, "slurm": slurm}
    with _Signals() as signals:
        try:
            if job is None:
                where["ray"] = env.get("RAY_ADDRESS") or "started by verl"
                return _run_on_one_node(argv, env, keep_fds, popen, signals, where), where
            ray_cluster = plan(job, nodes, gpus_per_node)
            with cluster(ray_cluster) as ray_env:
                where["ray"] = ray_env["RAY_ADDRESS"]
                signals.child = popen(driver_command(ray_cluster, argv), env={**env, **ray_env}, pass_fds=keep_fds)
                return _wait(signals.child)[0], where
        finally:
            where["signal"] = signals.received


def _run_on_one_node(
    argv: list[str],
    env: dict[str, str],
    keep_fds: tuple[int, ...],
    popen: Callable[..., subprocess.Popen],
    signals: _Signals,
    where: dict,
) -> int:
    """The trainer's exit code, started again while Ray's own node start timed out (``where`` counts those)."""
    for start in range(1, RAY_START_TRIES + 1):
        pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        signals.child = popen(argv, env=own_ray(env), pass_fds=keep_fds, **pipe)
        returncode, ray_timed_out = _wait(signals.child)
        if not (returncode and ray_timed_out) or signals.received or start == RAY_START_TRIES:
            return returncode
        where["ray_start_failures"] = start
        print(
            f"Ray's node did not come up in time: starting verl's trainer again ({start + 1} of {RAY_START_TRIES})",
            flush=True,
        )


def launch(run: VerlRun, *, trainer: Callable[..., tuple[int, dict]] = run_trainer) -> dict:
    """One attempt of the run (see the module docstring); returns its outcome. The run's lock is held from its
    first write to its last (:mod:`dppo_bench.runlock`)."""
    with ExitStack() as held:
        return _attempt(run, trainer, held)


def _attempt(run: VerlRun, trainer: Callable[..., tuple[int, dict]], held: ExitStack) -> dict:
    verl_version = metadata.version("verl")
    if verl_version != PINNED_VERL:
        raise UserError(f"dppo-bench's verl runs need verl=={PINNED_VERL}; the installed verl is {verl_version}")
    s, v = run.setting, run.setting.verl
    placement(run.env, v.nodes)  # before anything is written: a multi-node run needs an allocation
    data = data_records(run.resolved, run.train_data, run.val_data)
    metric_map = MetricMap.for_benchmarks(run.resolved.online, s.train.max_response_length)
    model, snapshot = model_record(s)
    lock = held.enter_context(run_lock(run.run_dir.path))
    run.run_dir.create()
    run.run_dir.start(s, run.recipe, run.seed, data)
    fold_pending(run.run_dir, metric_map)

    attempts = run.run_dir.read_run().get("attempts", [])
    k, resumed = len(attempts) + 1, resumed_step(run.run_dir.checkpoints)
    paths = run.paths(k, snapshot)
    wandb_mode = run.env.get("WANDB_MODE", "offline")
    overrides = run_overrides(run.resolved, paths, wandb=run.wandb, wandb_mode=wandb_mode)
    if resumed and (resumed % s.eval.every or _validated_at(run, resumed)):
        # a step the schedule does not validate (an uninterrupted run has no validation there), or one recorded
        overrides.append("trainer.val_before_train=False")
    attempt = {"attempt": k, "log": str(paths.metrics_log), "resumed_from": resumed, "started_at": now()}
    attempts.append({**attempt, "overrides": overrides, "folded": False})
    run.run_dir.update_run(
        verl={"version": verl_version, "command": [*run.command], "overrides": overrides},
        model=model,
        cluster={"nodes": v.nodes, "gpus_per_node": v.gpus_per_node, "gpus": v.nodes * v.gpus_per_node},
        attempts=attempts,
    )
    run.run_dir.verl_logs.mkdir(exist_ok=True)
    paths.metrics_log.write_bytes(b"")  # fresh: verl would truncate it anyway

    env = {**run.env, **device_env(s), "VERL_FILE_LOGGER_PATH": str(paths.metrics_log), "PYTHONUNBUFFERED": "1"}
    env["VERL_USE_EXTERNAL_MODULES"] = _with_plugin(run.env.get("VERL_USE_EXTERNAL_MODULES", ""))
    env["WANDB_MODE"] = wandb_mode
    print(f"attempt {k} of {run_name(s.id, run.recipe.id, run.seed)}, resuming from step {resumed}", flush=True)
    returncode, where, error = None, {}, None
    try:
        # verl's trainer holds the run's lock too: killed, the launcher leaves no unlocked run while verl writes
        returncode, where = trainer([*run.command, *overrides], env, v.nodes, v.gpus_per_node, keep_fds=(lock,))
    except BaseException as e:
        error = e
        raise
    finally:
        attempts[-1].update(apply_attempt(run.run_dir, paths.metrics_log, resumed, metric_map), folded=True)
        attempts[-1].update(returncode=returncode, ended_at=now(), **where)
        last = max((r["step"] for r in run.run_dir.read_metrics()), default=0)
        complete = error is None and returncode == 0 and last >= s.train.steps
        signalled = isinstance(error, KeyboardInterrupt) or bool(where.get("signal"))
        status = "completed" if complete else ("interrupted" if signalled else "failed")
        why = None if complete else (repr(error) if error is not None else _why(returncode, last, s.train.steps))
        run.run_dir.update_run(status=status, last_step=last, attempts=attempts, error=why, finished_at=now())
    outcome = {"status": status, "last_step": last}
    if complete:
        run.run_dir.mark_done(outcome)
    else:
        outcome["error"] = why
    return outcome


def _with_plugin(modules: str) -> str:
    names = [m for m in modules.split(",") if m]
    return ",".join(names if PLUGIN_MODULE in names else [*names, PLUGIN_MODULE])


def _why(returncode: int | None, last: int, steps: int) -> str:
    if returncode:
        return f"verl's trainer exited with {returncode} after step {last}; rerun to resume from its last checkpoint"
    return f"verl's trainer exited 0 at step {last} of {steps}"


def parse_command(text: str | None) -> tuple[str, ...]:
    """``--verl-command``: how to start verl's trainer (default: this Python's ``-m verl.trainer.main_ppo``)."""
    return MAIN_PPO if not text else tuple(shlex.split(text))
