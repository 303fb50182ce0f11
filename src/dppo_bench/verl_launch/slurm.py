"""A Ray cluster inside a SLURM allocation, for verl runs that span several nodes.

verl's trainer connects to a running Ray cluster when ``RAY_ADDRESS`` is set, and starts a one-node cluster of
its own otherwise. Across nodes the cluster has to be built inside the allocation first, the way verl's
``examples/slurm/ray_on_slurm.slurm`` does it: one ``srun`` step per node, ``ray start --head`` on the first
node and ``ray start --address`` on the others (each ``--block``, so the step lives as long as Ray does), then the
trainer on the head node. :class:`RayOnSlurm` does this, waits until every node and GPU has joined, and stops Ray
when the trainer ends. A ``ray start`` that exits before the cluster is up is started again, a few times: Ray
waits a fixed 30 s for a node's raylet to register (``ray/_private/node.py``), which a loaded node can miss. The
commands are built by plain functions; tests/slurm runs them on a real SLURM.

Ray 2.60's ``ray start --head`` turns on token authentication and admits only processes that hold the token, which
a node or driver given the address does not get by itself: each cluster gets a token of its own, handed to every
step (and to the trainer) in its environment, so no shared home directory is needed (:func:`ray_auth_env`).

The pipeline runs a multi-node training job as an ``mpi`` job of the SLURM executor plugin, so that its command
runs in the batch step on the first node instead of inside a one-task ``srun`` (see ``verl_mpi`` in
``workflow/rules/common.smk``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

RAY_PORT = 6379  # Ray's own default, for a cluster planned outside an allocation
RAY_START_TRIES = 3  # starts of a node's Ray (or of a one-node trainer, which starts its own) before giving up


def ray_port(job_id: str) -> int:
    """The head's port in allocation ``job_id``: not Ray's default 6379, where a Ray that a user left running on
    the node would be in the way, and distinct for jobs that share a node; below Linux's ephemeral range."""
    digits = re.match(r"\d*", job_id)[0]  # 123, or 123 of an array task's 123_4
    return 20000 + int(digits or 0) % 10000


class ClusterError(RuntimeError):
    """The Ray cluster could not be built inside the allocation."""


def _output(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ClusterError(f"{argv[0]} not found on PATH (needed for: {' '.join(argv)})") from None
    if proc.returncode:
        raise ClusterError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc.stdout


def job_command(job_id: str) -> list[str]:
    return ["scontrol", "show", "job", job_id]


def job_fields(text: str) -> dict[str, str]:
    """The ``Key=Value`` pairs of ``scontrol show job`` (any line layout; words without ``=`` are skipped)."""
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


def _leading_int(value: str) -> int | None:
    """``3`` or the lower bound of a pending job's ``3-3``; None for ``N/A`` and the like."""
    head = value.split("-", 1)[0]
    return int(head) if head.isdigit() else None


@dataclass(frozen=True)
class SlurmJob:
    """The allocation this process runs in."""

    job_id: str
    nodelist: str
    num_nodes: int
    cpus_per_task: int | None

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, output: Callable[[list[str]], str] = _output) -> SlurmJob | None:
        """From SLURM's variables where they are set; else from ``scontrol show job``. The Snakemake SLURM
        executor's job-step plugin strips every SLURM_* variable but the job, array and cluster ids before it runs
        a job's command, so inside the pipeline's jobs only SLURM_JOB_ID is left."""
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if not job_id:
            return None
        nodelist, num_nodes = env.get("SLURM_JOB_NODELIST"), env.get("SLURM_JOB_NUM_NODES")
        if not (nodelist and num_nodes):
            return cls.from_scontrol(job_id, output=output)
        cpus = env.get("SLURM_CPUS_PER_TASK")
        return cls(job_id, nodelist, int(num_nodes), int(cpus) if cpus else None)

    @classmethod
    def from_scontrol(cls, job_id: str, *, output: Callable[[list[str]], str] = _output) -> SlurmJob:
        fields = job_fields(output(job_command(job_id)))
        nodelist, num_nodes = fields.get("NodeList", "(null)"), _leading_int(fields.get("NumNodes", ""))
        if nodelist in ("", "(null)") or num_nodes is None:
            raise ClusterError(
                f"scontrol show job {job_id} names no nodes (NodeList={nodelist}, NumNodes={fields.get('NumNodes')})"
            )
        return cls(job_id, nodelist, num_nodes, _leading_int(fields.get("CPUs/Task", "")))

    def record(self) -> dict:
        return {"job_id": self.job_id, "nodelist": self.nodelist, "num_nodes": self.num_nodes}


@dataclass(frozen=True)
class RayCluster:
    head: str
    workers: tuple[str, ...]
    head_ip: str
    gpus_per_node: int
    cpus_per_node: int | None = None
    port: int = RAY_PORT
    ray: str = "ray"  # the ray executable (of the environment the trainer runs in)
    job_id: str | None = None  # the allocation every srun step joins (explicit: see on_node)

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.head, *self.workers)


def on_node(node: str, argv: Sequence[str], job_id: str | None = None) -> list[str]:
    """One task on one node of the allocation; ``--overlap`` lets the Ray steps and the trainer share the node.
    ``--jobid`` names the allocation outright: srun otherwise finds it only through SLURM_JOB_ID, the one SLURM
    variable the Snakemake SLURM executor leaves in a job's environment, and without it would queue a new job."""
    job = [f"--jobid={job_id}"] if job_id else []
    return ["srun", *job, "--overlap", "--nodes=1", "--ntasks=1", "-w", node, *argv]


def _resources(cluster: RayCluster) -> list[str]:
    cpus = [f"--num-cpus={cluster.cpus_per_node}"] if cluster.cpus_per_node else []
    return [f"--num-gpus={cluster.gpus_per_node}", *cpus]


def head_command(cluster: RayCluster) -> list[str]:
    start = [cluster.ray, "start", "--head", f"--node-ip-address={cluster.head_ip}", f"--port={cluster.port}"]
    return on_node(cluster.head, [*start, *_resources(cluster), "--block"], cluster.job_id)


def worker_command(cluster: RayCluster, node: str) -> list[str]:
    argv = [cluster.ray, "start", f"--address={cluster.address}", *_resources(cluster), "--block"]
    return on_node(node, argv, cluster.job_id)


def driver_command(cluster: RayCluster, argv: Sequence[str]) -> list[str]:
    return on_node(cluster.head, argv, cluster.job_id)


def hostnames_command(nodelist: str) -> list[str]:
    return ["scontrol", "show", "hostnames", nodelist]


def ip_command(node: str, job_id: str | None = None) -> list[str]:
    return on_node(node, ["hostname", "--ip-address"], job_id)


def parse_ip(output: str) -> str:
    """The node's address from ``hostname --ip-address`` (the first IPv4 one when it prints several)."""
    addresses = output.split()
    if not addresses:
        raise ClusterError("hostname --ip-address printed nothing")
    ipv4 = [a for a in addresses if a.count(".") == 3 and all(p.isdigit() for p in a.split("."))]
    return (ipv4 or addresses)[0]


def plan_cluster(
    job: SlurmJob, nodes: int, gpus_per_node: int, *, output: Callable[[list[str]], str] = _output
) -> RayCluster:
    """Head and workers among the allocation's nodes, and the head's address."""
    hosts = output(hostnames_command(job.nodelist)).split()
    if len(hosts) < nodes:
        raise ClusterError(f"the setting needs {nodes} nodes; SLURM job {job.job_id} has {len(hosts)} ({job.nodelist})")
    ray = Path(sys.executable).with_name("ray")
    return RayCluster(
        head=hosts[0],
        workers=tuple(hosts[1:nodes]),
        head_ip=parse_ip(output(ip_command(hosts[0], job.job_id))),
        gpus_per_node=gpus_per_node,
        cpus_per_node=job.cpus_per_task,
        port=ray_port(job.job_id),
        ray=str(ray) if ray.exists() else "ray",
        job_id=job.job_id,
    )


def ray_auth_env(token: str) -> dict[str, str]:
    """What lets a process into a Ray cluster started with ``token`` (Ray versions without token authentication
    ignore it)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


_PROBE = (
    "import json, sys, ray\n"
    "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
    "alive = [n for n in ray.nodes() if n['Alive']]\n"
    "print(json.dumps({'nodes': len(alive), 'gpus': sum(n['Resources'].get('GPU', 0) for n in alive)}))\n"
)


def probe_cluster(address: str, env: Mapping[str, str]) -> tuple[int, float] | None:
    """(alive nodes, GPUs) of the cluster at ``address``; None while it does not answer. ``env``: this process's
    environment with the cluster's token."""
    argv = [sys.executable, "-c", _PROBE, address]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=dict(env))
    if proc.returncode:
        return None
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return info["nodes"], info["gpus"]


class RayOnSlurm:
    """``with RayOnSlurm(cluster) as env:`` a running cluster; ``env`` points the trainer at it and lets it in."""

    def __init__(
        self,
        cluster: RayCluster,
        *,
        probe: Callable[[str, Mapping[str, str]], tuple[int, float] | None] = probe_cluster,
        popen: Callable[..., subprocess.Popen] = subprocess.Popen,
        timeout_s: float = 600.0,
        poll_s: float = 5.0,
        stop_timeout_s: float = 60.0,
        start_tries: int = RAY_START_TRIES,
        log: Callable[[str], None] = print,
    ):
        self.cluster, self.probe, self.popen, self.log = cluster, probe, popen, log
        self.timeout_s, self.poll_s, self.stop_timeout_s = timeout_s, poll_s, stop_timeout_s
        self.start_tries = start_tries
        self.steps: list[tuple[str, list[str], subprocess.Popen]] = []
        self.starts: dict[str, int] = {}  # node: how often its ray start was started
        self.auth = ray_auth_env(secrets.token_hex(32))
        self.env = {**os.environ, **self.auth}  # of the srun steps and the probe: srun passes it to every node

    def __enter__(self) -> dict[str, str]:
        c = self.cluster
        try:
            self._start(c.head, head_command(c))
            self._wait(1, 0)
            for node in c.workers:
                self._start(node, worker_command(c, node))
            self._wait(len(c.nodes), len(c.nodes) * c.gpus_per_node)
        except BaseException:
            self.stop()
            raise
        self.log(f"ray: {len(c.nodes)} nodes, {len(c.nodes) * c.gpus_per_node} GPUs at {c.address}")
        return {"RAY_ADDRESS": c.address, **self.auth}

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, node: str, argv: list[str]) -> None:
        self.log(f"ray: starting on {node}: {' '.join(argv)}")
        self.steps.append(self._spawn(node, argv))

    def _spawn(self, node: str, argv: list[str]) -> tuple[str, list[str], subprocess.Popen]:
        self.starts[node] = self.starts.get(node, 0) + 1
        return node, argv, self.popen(argv, env=self.env)

    def _restart_exited(self) -> None:
        """Start again each step that exited while the cluster was coming up, until its node's tries are spent."""
        for i, (node, argv, step) in enumerate(self.steps):
            if step.poll() is None:
                continue
            tries = self.starts[node]
            if tries >= self.start_tries:
                raise ClusterError(
                    f"ray start on {node} exited with {step.returncode} before the cluster was up ({tries} tries)"
                )
            self.log(
                f"ray: the step on {node} exited with {step.returncode} before the cluster was up; "
                f"starting it again (try {tries + 1} of {self.start_tries})"
            )
            self.steps[i] = self._spawn(node, argv)

    def _wait(self, nodes: int, gpus: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._restart_exited()
            seen = self.probe(self.cluster.address, self.env)
            if seen is not None and seen[0] >= nodes and seen[1] >= gpus:
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"after {self.timeout_s:.0f} s the Ray cluster at {self.cluster.address} has "
                    f"{'no answer' if seen is None else f'{seen[0]} nodes and {seen[1]:g} GPUs'}; "
                    f"expected {nodes} nodes and {gpus} GPUs"
                )
            time.sleep(self.poll_s)

    def stop(self) -> None:
        """End every ``ray start --block`` step (Ray stops on that node with it), workers first."""
        for _, _, step in reversed(self.steps):
            if step.poll() is None:
                step.terminate()
        for node, _, step in reversed(self.steps):
            try:
                step.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.log(f"ray: the step on {node} did not stop in {self.stop_timeout_s:.0f} s; killing it")
                step.kill()
                step.wait()
        self.steps.clear()
