"""The pipeline's prepare_data rule passes --source only for a dataset it generates itself (common.smk's
source_option), and reads a hub or shared dataset from where its spec says."""

from snakemake_fixtures import snakemake


def test_only_a_generated_dataset_is_prepared_from_a_source(tmp_path):
    targets = ["results/data/verl/tiny_arith_train.parquet", "results/data/verl/aime24.parquet"]
    proc = snakemake(tmp_path, "-n", "-p", "--cores", "1", *targets)
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if "dppo-bench data prepare" in line]
    generated = next(c for c in commands if "prepare tiny_arith_train " in c)
    hub = next(c for c in commands if "prepare aime24 " in c)
    assert "--source results/data/tiny/tiny_sanity/train.jsonl --out results/data/verl" in generated
    assert "--source" not in hub and "--out results/data/verl" in hub
