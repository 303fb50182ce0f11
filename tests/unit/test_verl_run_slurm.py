"""Ray inside a SLURM allocation: the srun/ray commands, the start-up order, waiting, stopping; no SLURM needed."""

import subprocess

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
    def __init__(self, answers, die=None):
        self.answers, self.die, self.steps, self.probed = list(answers), die, [], []

    def popen(self, argv, env):
        step = FakeStep(argv, dies=self.die is not None and self.die in argv)
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


def test_a_worker_that_dies_stops_the_start_up_with_its_node():
    fake = FakeSlurm([(1, 8)], die="gpu03")
    ray = S.RayOnSlurm(CLUSTER, probe=fake.probe, popen=fake.popen, poll_s=0, log=lambda _: None)
    with pytest.raises(S.ClusterError, match="ray start on gpu03 exited with 1"), ray:
        pass
    assert fake.steps[0].signals == ["TERM"] and fake.steps[1].signals == ["TERM"]


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
