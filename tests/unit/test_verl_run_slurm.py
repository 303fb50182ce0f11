"""Ray inside a SLURM allocation: the srun/ray commands, the start-up order, waiting, stopping; no SLURM needed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dppo_bench.verl_launch import launch as L
from dppo_bench.verl_launch import slurm as S

CLUSTER = S.RayCluster(
    head="gpu01", workers=("gpu02", "gpu03"), head_ip="10.1.0.1", gpus_per_node=8, cpus_per_node=64, job_id="4242"
)
ENV = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[01-03]", "SLURM_JOB_NUM_NODES": "3"}


def test_commands_follow_verls_ray_on_slurm_example():
    assert S.head_command(CLUSTER) == [
        *("srun", "--jobid=4242", "--overlap", "--nodes=1", "--ntasks=1", "-w", "gpu01"),
        *("ray", "start", "--head", "--node-ip-address=10.1.0.1", "--port=6379"),
        *("--num-gpus=8", "--num-cpus=64", "--block"),
    ]
    assert S.worker_command(CLUSTER, "gpu03") == [
        *("srun", "--jobid=4242", "--overlap", "--nodes=1", "--ntasks=1", "-w", "gpu03"),
        *("ray", "start", "--address=10.1.0.1:6379", "--num-gpus=8", "--num-cpus=64", "--block"),
    ]
    assert S.driver_command(CLUSTER, ["python", "-m", "verl.trainer.main_ppo", "a=1"]) == [
        *("srun", "--jobid=4242", "--overlap", "--nodes=1", "--ntasks=1", "-w", "gpu01"),
        *("python", "-m", "verl.trainer.main_ppo", "a=1"),
    ]
    no_cpus = S.RayCluster(head="n1", workers=(), head_ip="10.0.0.9", gpus_per_node=4)
    assert "--num-cpus" not in " ".join(S.head_command(no_cpus))
    assert "--jobid" not in " ".join(S.head_command(no_cpus))  # no job known: srun's own SLURM_JOB_ID
    assert S.hostnames_command("gpu[01-03]") == ["scontrol", "show", "hostnames", "gpu[01-03]"]


@pytest.mark.parametrize(
    ("output", "ip"),
    [("10.1.0.1\n", "10.1.0.1"), ("fe80::1 10.1.0.7\n", "10.1.0.7"), ("fe80::1\n", "fe80::1")],
)
def test_head_address_prefers_ipv4(output, ip):
    assert S.parse_ip(output) == ip


def test_empty_hostname_output_is_an_error():
    with pytest.raises(S.ClusterError, match="printed nothing"):
        S.parse_ip("  \n")


def test_plan_takes_the_first_nodes_of_the_allocation():
    calls = []

    def output(argv):
        calls.append(argv)
        return "gpu01\ngpu02\ngpu03\ngpu04\n" if argv[0] == "scontrol" else "10.1.0.1\n"

    job = S.SlurmJob.from_env({**ENV, "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_CPUS_PER_TASK": "32"})
    cluster = S.plan_cluster(job, 3, 8, output=output)
    assert (cluster.head, cluster.workers, cluster.head_ip) == ("gpu01", ("gpu02", "gpu03"), "10.1.0.1")
    assert cluster.cpus_per_node == 32 and cluster.address == "10.1.0.1:24242"  # not 6379: a user's Ray may be there
    assert calls[1] == S.ip_command("gpu01", "4242") and cluster.job_id == "4242"
    with pytest.raises(S.ClusterError, match="needs 5 nodes; SLURM job 4242 has 4"):
        S.plan_cluster(job, 5, 8, output=output)


def test_job_from_env():
    assert S.SlurmJob.from_env({}) is None
    assert S.SlurmJob.from_env(ENV, output=no_scontrol) == S.SlurmJob("4242", "gpu[01-03]", 3, None)


def no_scontrol(argv):
    raise AssertionError(f"SLURM's variables are set: no {argv} needed")


# What the Snakemake SLURM executor's job-step plugin leaves of SLURM's variables in a job's environment
STRIPPED = {"SLURM_JOB_ID": "4242", "SLURM_CLUSTER_NAME": "c1", "SLURM_SUBMIT_DIR": "/home/u/dppo-bench"}
# `scontrol show job` of a two-node job on Slurm 22.05 (Debian 12), from the test cluster of tests/slurm, where the
# whole path (stripped variables, scontrol, srun --jobid, Ray on both nodes) runs for real
SCONTROL_SHOW_JOB = """JobId=31 JobName=probe
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901757 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Partition=debug AllocNode:Sid=localhost:2693
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=node[1-2]
   BatchHost=node1
   NumNodes=2 NumCPUs=4 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=4,mem=200M,node=2,billing=4
"""


def test_stripped_variables_are_read_back_from_scontrol():
    def output(argv):
        assert argv == S.job_command("31")
        return SCONTROL_SHOW_JOB

    assert S.SlurmJob.from_env({"SLURM_JOB_ID": "31"}, output=output) == S.SlurmJob("31", "node[1-2]", 2, 1)
    assert S.SlurmJob.from_env({"SLURM_JOBID": "31"}, output=output) == S.SlurmJob("31", "node[1-2]", 2, 1)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("JobId=7 JobState=PENDING NodeList=(null) NumNodes=3-3", "names no nodes"),
        ("JobId=7 JobState=RUNNING", "names no nodes"),
    ],
)
def test_scontrol_without_nodes_is_an_error(output, message):
    with pytest.raises(S.ClusterError, match=message):
        S.SlurmJob.from_env({"SLURM_JOB_ID": "7"}, output=lambda _: output)


def test_a_missing_scontrol_stops_a_multi_node_run_but_not_a_one_node_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(S.ClusterError, match="scontrol not found on PATH"):
        L.placement(STRIPPED, 3)
    code, where = L.run_trainer(["t"], STRIPPED, 1, 8, popen=lambda argv, env, **_: FakeStep(argv, dies=True))
    assert code == 1 and where["slurm"]["job_id"] == "4242" and "scontrol not found" in where["slurm"]["error"]


class FakeStep:
    """A ``srun ... ray start --block`` step: runs until terminated (or dies when told to)."""

    stdout = None  # not piped

    def __init__(self, argv, dies=False):
        self.argv, self.returncode, self.signals = argv, (1 if dies else None), []

    def poll(self):
        return self.returncode

    def terminate(self):
        self.signals.append("TERM")
        self.returncode = -15

    def kill(self):
        self.signals.append("KILL")
        self.returncode = -9

    def wait(self, timeout=None):
        return self.returncode


class FakeSlurm:
    """Steps on the nodes of CLUSTER; the step on node ``die`` exits at once, its first ``die_times`` starts."""

    def __init__(self, answers, die=None, die_times=1_000):
        self.answers, self.die, self.die_times, self.steps, self.probed = list(answers), die, die_times, [], []

    def popen(self, argv, env):
        dies = self.die is not None and self.die in argv and self.die_times > 0
        self.die_times -= dies
        step = FakeStep(argv, dies=dies)
        step.env = env
        self.steps.append(step)
        return step

    def probe(self, address, env):
        assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"]  # the cluster's token lets the probe in
        self.probed.append((address, len(self.steps)))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_head_first_then_workers_then_wait_for_every_gpu():
    fake = FakeSlurm([None, (1, 8), (2, 16), (3, 24)])
    ray = S.RayOnSlurm(CLUSTER, probe=fake.probe, popen=fake.popen, poll_s=0, log=lambda _: None)
    with ray as env:
        token = env.pop("RAY_AUTH_TOKEN")
        assert env == {"RAY_ADDRESS": "10.1.0.1:6379", "RAY_AUTH_MODE": "token"} and len(token) == 64
        assert all(s.env["RAY_AUTH_TOKEN"] == token for s in fake.steps)  # every node's Ray gets the same token
        assert [s.argv for s in fake.steps] == [
            S.head_command(CLUSTER),
            S.worker_command(CLUSTER, "gpu02"),
            S.worker_command(CLUSTER, "gpu03"),
        ]
        # the workers start once the head answers; the cluster is up once 3 nodes and 24 GPUs have joined
        assert fake.probed == [("10.1.0.1:6379", 1), ("10.1.0.1:6379", 1), ("10.1.0.1:6379", 3), ("10.1.0.1:6379", 3)]
        assert all(s.poll() is None for s in fake.steps)
    assert [s.signals for s in fake.steps] == [["TERM"], ["TERM"], ["TERM"]]  # Ray stopped on every node


def test_a_worker_that_keeps_dying_stops_the_start_up_after_its_tries():
    fake = FakeSlurm([(1, 8)], die="gpu03")
    ray = S.RayOnSlurm(CLUSTER, probe=fake.probe, popen=fake.popen, poll_s=0, log=lambda _: None)
    with pytest.raises(S.ClusterError, match=r"ray start on gpu03 exited with 1 before the cluster was up \(3 tries"):
        with ray:
            pass
    assert [s.argv for s in fake.steps].count(S.worker_command(CLUSTER, "gpu03")) == 3
    assert fake.steps[0].signals == ["TERM"] and fake.steps[1].signals == ["TERM"]


def test_a_ray_start_that_exits_before_the_cluster_is_up_is_started_again():
    """As a loaded node's does when its raylet misses Ray's fixed 30 s window to register."""
    fake = FakeSlurm([(1, 8), (1, 8), (3, 24)], die="gpu02", die_times=2)
    logged = []
    with S.RayOnSlurm(CLUSTER, probe=fake.probe, popen=fake.popen, poll_s=0, log=logged.append):
        alive = sorted(s.argv for s in fake.steps if s.poll() is None)
        assert alive == sorted([S.head_command(CLUSTER), *(S.worker_command(CLUSTER, n) for n in ("gpu02", "gpu03"))])
    assert [s.argv for s in fake.steps].count(S.worker_command(CLUSTER, "gpu02")) == 3
    assert sum("starting it again" in line for line in logged) == 2


def test_a_cluster_that_never_fills_up_times_out():
    fake = FakeSlurm([(2, 16)])
    ray = S.RayOnSlurm(CLUSTER, probe=fake.probe, popen=fake.popen, timeout_s=0, poll_s=0, log=lambda _: None)
    with pytest.raises(S.ClusterError, match="has 2 nodes and 16 GPUs; expected 3 nodes and 24 GPUs"), ray:
        pass


def test_a_step_that_ignores_the_stop_is_killed():
    class Stubborn(FakeStep):
        def terminate(self):
            self.signals.append("TERM")

        def wait(self, timeout=None):
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.argv, timeout)
            return self.returncode

    steps = []

    def popen(argv, **_):
        steps.append(Stubborn(argv))
        return steps[-1]

    one = S.RayCluster(head="n1", workers=(), head_ip="10.0.0.9", gpus_per_node=4)
    with S.RayOnSlurm(one, probe=lambda *_: (1, 4), popen=popen, poll_s=0, stop_timeout_s=0, log=lambda _: None):
        pass
    assert steps[0].signals == ["TERM", "KILL"]


def test_run_trainer_builds_the_cluster_and_runs_verl_on_the_head():
    seen = {}

    class Cluster:
        def __init__(self, cluster):
            seen["cluster"] = cluster

        def __enter__(self):
            seen["entered"] = True
            return {"RAY_ADDRESS": "10.1.0.1:6379"}

        def __exit__(self, *exc):
            seen["stopped"] = True

    def popen(argv, env, **_):
        seen.update(argv=argv, env=env)
        return FakeStep(argv, dies=True)

    def plan(job, nodes, gpus):
        seen["plan"] = (job.job_id, nodes, gpus)
        return CLUSTER

    code, where = L.run_trainer(
        ["python", "-m", "verl.trainer.main_ppo"], ENV, 3, 8, popen=popen, cluster=Cluster, plan=plan
    )
    assert code == 1 and seen["plan"] == ("4242", 3, 8) and seen["cluster"] is CLUSTER and seen["stopped"]
    assert seen["argv"] == S.driver_command(CLUSTER, ["python", "-m", "verl.trainer.main_ppo"])
    assert seen["env"]["RAY_ADDRESS"] == "10.1.0.1:6379" and seen["env"]["SLURM_JOB_ID"] == "4242"
    assert where == {
        "nodes": 3,
        "gpus_per_node": 8,
        "slurm": {"job_id": "4242", "nodelist": "gpu[01-03]", "num_nodes": 3},
        "ray": "10.1.0.1:6379",
        "signal": None,
    }


def _trainer(tmp_path, ray_timeouts, code=1, then="print('trained')"):
    """A trainer (a real process) whose Ray node start times out, with Ray's own message, its first
    ``ray_timeouts`` starts, each exiting ``code``, and runs ``then`` after; the file counts its starts."""
    starts = tmp_path / "starts"
    script = (
        "import pathlib, sys\n"
        f"p = pathlib.Path({str(starts)!r}); n = int(p.read_text()) if p.exists() else 0; p.write_text(str(n + 1))\n"
        f"if n < {ray_timeouts}:\n"
        "    print('Exception: The current node timed out during startup. This could happen because some of the "
        "raylet failed to startup or the GCS has become overloaded.', file=sys.stderr)\n"
        f"    sys.exit({code})\n"
        f"{then}\n"
    )
    return [sys.executable, "-c", script], starts


def test_a_one_node_trainer_whose_ray_start_timed_out_is_started_again(tmp_path, capsys):
    argv, starts = _trainer(tmp_path, ray_timeouts=2)
    code, where = L.run_trainer(argv, dict(os.environ), 1, 1)
    out = capsys.readouterr().out
    assert code == 0 and starts.read_text() == "3" and where["ray_start_failures"] == 2
    assert "timed out during startup" in out and out.rstrip().endswith("trained")  # its output is passed on


def test_the_message_the_launcher_looks_for_is_the_installed_rays():
    import ray._private.node

    assert L.RAY_NODE_TIMEOUT in Path(ray._private.node.__file__).read_bytes()


def test_a_one_node_trainer_is_started_at_most_three_times(tmp_path, capsys):
    argv, starts = _trainer(tmp_path, ray_timeouts=5)
    code, where = L.run_trainer(argv, dict(os.environ), 1, 1)
    assert code == 1 and starts.read_text() == "3" and where["ray_start_failures"] == 2


def test_a_trainer_that_failed_otherwise_is_not_started_again(tmp_path, capsys):
    argv, starts = _trainer(tmp_path, ray_timeouts=0, then="sys.exit(3)")
    code, where = L.run_trainer(argv, dict(os.environ), 1, 1)
    assert code == 3 and starts.read_text() == "1" and "ray_start_failures" not in where
    # nor one that printed Ray's message and still exited 0
    argv, starts = _trainer(tmp_path / "zero", ray_timeouts=1, code=0)
    (tmp_path / "zero").mkdir()
    assert L.run_trainer(argv, dict(os.environ), 1, 1)[0] == 0 and starts.read_text() == "1"


def test_one_node_or_a_users_cluster_runs_verl_directly():
    seen = []

    def popen(argv, env, **_):
        seen.append((argv, env.get("RAY_ADDRESS")))
        return FakeStep(argv, dies=True)

    def no_cluster(*_):
        raise AssertionError("no Ray cluster is built for one node")

    assert L.run_trainer(["t"], {}, 1, 8, popen=popen, plan=no_cluster)[1]["ray"] == "started by verl"
    assert L.run_trainer(["t"], {"RAY_ADDRESS": "h:1"}, 4, 8, popen=popen, plan=no_cluster)[1]["ray"] == "h:1"
    assert seen == [(["t"], "local"), (["t"], "h:1")]  # local: a Ray of its own, whatever runs on the machine
