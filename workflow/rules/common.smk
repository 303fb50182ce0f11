# Helpers of the pipeline: the config and every experiment, setting and method recipe are validated at
# start (a bad yaml stops here with the file and the field), and targets are derived from experiments.
import os

from snakemake.utils import validate

from dppo_bench import config as dc
from dppo_bench.start_checks import load_suite
from dppo_bench.eval.protocol import setting_protocol_sha256
from dppo_bench.config.specs import load_any
from dppo_bench.eval.step_samples import validated_online
from dppo_bench.io import CorruptFileError
from dppo_bench.plan import PROBE_RUNTIME_MIN, on_gpus
from dppo_bench.rundir import RunDir, probe_record
from dppo_bench.verify import changed_records

validate(config, "../schemas/config.schema.yaml")

# The wandb switch reaches `dppo-bench train` through its environment (jobs inherit it; SLURM jobs with
# --export=ALL), not through the rules' parameters: switching it on must not make finished runs out of date.
if str(config["wandb"]).lower() == "true":
    os.environ.update(DPPO_BENCH_WANDB="1")  # set for the jobs, not read here (no envvars: directive)

# Every yaml of the recipe roots (DPPO_BENCH_CONFIG_ROOT, or this checkout), each valid and all consistent: a local
# setting evaluates only the tiny task, every metric an experiment shows is one its runs write, every run has its
# hyperparameter profile. A bad file stops the pipeline here, with the file and the field.
SUITE = load_suite()
EXPERIMENTS, SETTINGS, METHODS, BENCHMARKS = SUITE.experiments, SUITE.settings, SUITE.methods, SUITE.benchmarks
for _i, _id in enumerate(config["experiments"]):
    if _id not in EXPERIMENTS:
        raise ValueError(f"config/config.yaml: field 'experiments.{_i}': unknown experiment {_id!r}")


wildcard_constraints:
    setting="[a-z0-9_]+",
    method="[a-z0-9_]+",
    seed=r"\d+",
    benchmark="[a-z0-9_]+",
    base="[a-z0-9_]+",
    experiment="[a-z0-9_]+",


def run_dir(w):
    return str(RunDir.of(w.setting, w.method, w.seed).path)


def run_targets(setting, method, seed):
    """What one run contributes to an experiment: its training and every benchmark's evaluation (online and
    offline)."""
    run = RunDir.of(setting, method, seed)
    return [str(run.done)] + [str(run.eval_dir(b) / "summary.json") for b in SETTINGS[setting].eval.benchmarks]


def experiment_inputs(w):
    """Every run's markers, plus any record that changed after its marker vouched for it (changed_records): a
    damaged scores.json or metrics.jsonl makes the aggregation run again, and verify there names it."""
    experiment = EXPERIMENTS[w.experiment]
    keys = experiment.run_keys(lambda s: SETTINGS[s].seeds)
    changed = [p for key in keys for p in changed_records(RunDir.of(*key).path)]
    return [t for key in keys for t in run_targets(*key)] + [probe_target(s) for s in experiment.probes] + changed


def probe_target(setting):
    """Fig. 2's mismatch probe of one setting (one rollout batch, no training)."""
    return str(probe_record(setting))


def experiment_targets(ids):
    """Every experiment has tables; those with panels also have a figure."""
    names = ["table.md", "table.csv", "table.tex"]
    return [
        f"results/{i}/{name}"
        for i in ids
        for name in names + (["figure.png", "figure.pdf"] if EXPERIMENTS[i].panels else [])
    ]


def base_of(w):
    """The setting whose pretrained base model (and task data) a local setting shares."""
    return dc.base_setting_id(w.setting)


def tiny_train_data(w):
    return f"results/data/tiny/{base_of(w)}/train.jsonl"


def base_model(w):
    return f"results/base/{base_of(w)}/model"


def eval_data(w):
    """The problems a run is evaluated on: for a verl run, the benchmark's prepared set (its online validation's);
    for a local run, the held-out split of its own base setting's tiny task (the start checks allow a local setting
    no benchmark but the tiny task's)."""
    if backend(w) == "verl":
        return prepared(w.benchmark, "problems.jsonl")
    return f"results/data/tiny/{base_of(w)}/{os.path.basename(BENCHMARKS[w.benchmark].sources.local.path)}"


def eval_steps(w):
    return ",".join(str(s) for s in SETTINGS[w.setting].eval_steps(w.benchmark))


def eval_engine(w):
    """What generates from a run's saved weights: vLLM on a GPU setting's GPUs, else the HF backend on the CPU (the
    tiny models of the local settings and of tiny_verl)."""
    setting = SETTINGS[w.setting]
    return "vllm" if setting.backend == "verl" and setting.verl.device == "cuda" else "hf"


def eval_gpus(w):
    """GPUs of an evaluation that generates on them: an offline benchmark of a GPU setting, or an online one whose
    spec changed after the run validated it (its run.json says which); converting dumps needs none."""
    setting = SETTINGS[w.setting]
    if eval_engine(w) != "vllm":
        return None
    try:
        info = RunDir(run_dir(w)).read_run()
    except CorruptFileError:
        return None  # the evaluation fails on it, naming the file
    if w.benchmark in setting.eval.online and (not info or validated_online(info, BENCHMARKS[w.benchmark])):
        return None
    return setting.verl.parallelism.rollout_tensor


# Recipe files are read from the recipe roots (dppo_bench.config.roots), not the working directory, so the pipeline
# also runs with --directory elsewhere.
def setting_file(w):
    return str(dc.SETTINGS_DIR / f"{w.setting}.yaml")


def base_setting_file(w):
    return str(dc.SETTINGS_DIR / f"{w.base}.yaml")


def method_file(w):
    return str(dc.METHODS_DIR / f"{w.method}.yaml")


def experiment_file(w):
    return str(dc.EXPERIMENTS_DIR / f"{w.experiment}.yaml")


def backend(w):
    """Which backend trains the run (its setting's ``backend``): the input, parameter and resource functions of the
    train and evaluate rules choose by it, so each of them is one rule for both backends."""
    return SETTINGS[w.setting].backend


def train_inputs(w):
    """What `dppo-bench train` reads besides the recipes. local: the tiny base model and train split; verl: the
    prepared parquet training set and online benchmarks, and the model when the pipeline builds it."""
    if backend(w) == "verl":
        return {"train": verl_train_data(w), "val": verl_val_data(w), "model": verl_model(w)}
    return {"train": tiny_train_data(w), "base": base_model(w)}


def train_backend_options(w, input):
    """The options of `dppo-bench train` only one backend takes: local, its base model; verl, its online benchmarks."""
    if backend(w) == "verl":
        return "--val-data " + " ".join(input.val)
    return f"--base-model {input.base}"


def train_threads(w):
    return verl_threads(w) if backend(w) == "verl" else SETTINGS[w.setting].local.threads


def eval_threads(w):
    """local: one thread generates (one evaluation per run and benchmark runs beside the others); verl: math-verify
    workers re-scoring the dumps."""
    return 4 if backend(w) == "verl" else 1


def verl_only(resource):
    """A resource of verl training jobs (from the setting); a local run's job leaves it unset."""
    return lambda w: resource(w) if backend(w) == "verl" else None


# What a run is (run.json's setting and recipe sha256, which the trainer compares before it resumes) is a
# parameter of every job built from the run: an edit that changes what the run computes makes its training,
# evaluations, tables and figures out of date. How a run is evaluated is not part of it (eval_protocol: a new or
# edited benchmark re-evaluates, never retrains). The trainer then refuses to overwrite the old run, and keeps refusing
# on every later snakemake (even after a failed attempt removed train.completed), until the run directory is moved
# away or the recipe restored: the old run is never reported as the new recipe's. The recipe files themselves are
# ancient() inputs: their time is not what a job depends on, so a comment or a renamed display_name (which the
# identity leaves out) plans no training; the tables and figures, which show the names, take them as a parameter.
def run_identity(w):
    return f"{SETTINGS[w.setting].sha256()}:{METHODS[w.method].sha256()}"


def setting_identity(w):
    """What of a setting reaches a job that reads no method recipe (the mismatch probe)."""
    return SETTINGS[w.setting].sha256()


def base_identity(w):
    """What of a local setting its tiny task data and base model are made from (dppo_bench.config.base_setting_id
    compares the same): a label or a training value leaves them, and so the runs on them, as they are."""
    local = SETTINGS[w.base].local
    return dc.canonical_sha256([local.model.model_dump(), local.task.model_dump(), local.pretrain.model_dump()])


def eval_protocol(w):
    """How the run is scored on the benchmark (dppo_bench.eval.protocol: the spec without its title and notes, the
    steps, the longest response), which summary.json records: a change to it makes the evaluation out of date."""
    return setting_protocol_sha256(SETTINGS[w.setting], BENCHMARKS[w.benchmark])


def experiment_runs_identity(w):
    keys = EXPERIMENTS[w.experiment].run_keys(lambda s: SETTINGS[s].seeds)
    return dc.canonical_sha256(
        [[s, m, seed, SETTINGS[s].sha256(), METHODS[m].sha256()] for s, m, seed in keys]
    )


def experiment_shown(w):
    """What the tables and figures show besides the runs' records: the experiment and its names."""
    experiment = EXPERIMENTS[w.experiment]
    names = {g.setting: SETTINGS[g.setting].display_name for g in experiment.runs}
    names |= {m: METHODS[m].display_name for g in experiment.runs for m in g.methods}
    return dc.canonical_sha256([experiment.model_dump(mode="json"), names])


# Setting ids by where their jobs run, as wildcard constraints. The probe of each backend is its own rule
# (probe.smk), and the jobs that need GPUs (verl settings on CUDA) are rules of their own, train_gpu and
# probe_mismatch_gpu: a cluster profile gives its GPU partition, GPU model and host memory to those rules, which a
# profile can only do rule by rule (profiles/slurm); local and verl-on-CPU jobs never ask for a GPU.
def setting_ids(keep):
    return "|".join(sorted(s for s, v in SETTINGS.items() if keep(v))) or "(?!)"  # (?!): no id at all


LOCAL_SETTINGS = setting_ids(lambda s: s.backend == "local")
VERL_CPU_SETTINGS = setting_ids(lambda s: s.backend == "verl" and not on_gpus(s))
CPU_SETTINGS = setting_ids(lambda s: not on_gpus(s))
GPU_SETTINGS = setting_ids(on_gpus)


# CPUs of a job that uses the whole machine it runs on (tiny pretraining, verl on the CPU). On one machine: every
# core given with --cores (Snakemake runs nothing beside it). On a cluster, where each job is an allocation of its
# own and no --cores is needed, CLUSTER_MACHINE_THREADS, the same when the executor submits the job and when the
# job runs in its allocation (--set-threads tiny_pretrain=8 raises it for a rule).
CLUSTER_MACHINE_THREADS = 2


def machine_threads(w):
    if workflow.non_local_exec or workflow.remote_exec:
        return CLUSTER_MACHINE_THREADS
    return workflow.cores


def prepared(dataset, suffix):
    """A training set or benchmark as ``dppo-bench data prepare`` writes it."""
    return f"results/data/verl/{dataset}.{suffix}"


def generated(path):
    """A path the pipeline itself writes (under results/), so that a rule reading it depends on its producer."""
    return [path] if path.startswith("results/") else []


def dataset_source(w):
    """The local file a dataset is prepared from, when the pipeline generates it (the tiny task's splits)."""
    spec = load_any(w.dataset)
    local = spec.sources.local
    return generated(local.path) if local is not None and spec.default_source() == "local" else []


def source_option(w, input):
    """``data prepare``'s --source: the generated file of :func:`dataset_source`, read from this directory; none for
    a dataset from the hub or the shared data."""
    return f"--source {input[0]}" if input else ""


def verl_model(w):
    """The model a verl setting trains, when the pipeline builds it (tiny_verl trains a tiny base model)."""
    return generated(SETTINGS[w.setting].verl.model.path)


def verl_threads(w):
    """verl on the CPU (verl.device: cpu) takes the machine: its Ray processes share every core. On GPUs the
    job's CPUs come from the profile (cpus_per_gpu)."""
    return machine_threads(w) if SETTINGS[w.setting].verl.device == "cpu" else 1


def verl_train_data(w):
    return prepared(SETTINGS[w.setting].verl.train_data, "parquet")


def verl_val_data(w):
    """The online benchmarks, which verl validates on during training."""
    return [prepared(b, "parquet") for b in SETTINGS[w.setting].eval.online]


def verl_problems(w):
    return prepared(w.benchmark, "problems.jsonl")


# Resources of a verl job, from its setting (GPU model, partition, account: the profile's). GPUs only for settings
# on GPUs: a verl.device: cpu setting's gpus_per_node are logical devices of its Ray cluster.
def verl_nodes(w):
    return SETTINGS[w.setting].verl.nodes


def verl_gpus(w):
    v = SETTINGS[w.setting].verl
    return v.nodes * v.gpus_per_node


def verl_runtime(w):
    return SETTINGS[w.setting].verl.runtime_min


def verl_mpi(w):
    """A job over several nodes runs its command in the batch step (the SLURM plugin's mpi jobs), where the
    launcher starts Ray on every node with srun; one node: unset (the plugin runs it in one srun task)."""
    return "srun" if SETTINGS[w.setting].verl.nodes > 1 else None


def verl_tasks_per_node(w):
    """One task per GPU; the plugin's mpi jobs need more than one task per node."""
    v = SETTINGS[w.setting].verl
    return max(2, v.gpus_per_node) if v.nodes > 1 else None
