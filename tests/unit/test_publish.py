"""`dppo-bench publish`: a documentation page made from an experiment's aggregated table, its figure and the
records of the runs behind them, never typed in."""

from dppo_bench.cli import main
from dppo_bench.rundir import RunDir

TABLE = "# Tiny smoke [none]\n\n| run | reward end |\n|---|---|\n| DPPO-Binary-TV | 0.61 |\n"


def recorded(tmp_path, method, status, sha):
    run = RunDir.of("tiny_smoke", method, 0, tmp_path / "results/runs").create()
    run.write_run({"status": status, "provenance": {"git": {"sha": sha}, "host": "lab-1"}})


def test_the_page_holds_the_table_figure_and_where_the_numbers_come_from(tmp_path):
    (tmp_path / "results/tiny_smoke").mkdir(parents=True)
    (tmp_path / "results/tiny_smoke/table.md").write_text(TABLE)
    (tmp_path / "results/tiny_smoke/figure.png").write_bytes(b"\x89PNG")
    recorded(tmp_path, "dppo_binary_tv", "completed", "a" * 40)
    recorded(tmp_path, "minirl", "diverged", "b" * 40)
    args = ["--results", str(tmp_path / "results"), "--runs", str(tmp_path / "results/runs")]
    assert main(["publish", "tiny_smoke", *args, "--out", str(tmp_path / "docs")]) == 0
    page = (tmp_path / "docs/tiny_smoke.md").read_text()
    assert page.startswith("# ") and "| DPPO-Binary-TV | 0.61 |" in page and "# Tiny smoke [none]" not in page
    assert "![" in page and (tmp_path / "docs/tiny_smoke.png").read_bytes() == b"\x89PNG"
    assert "1 completed, 1 diverged, 1 missing" in page and "aaaaaaaaaa, bbbbbbbbbb" in page and "lab-1" in page
    assert "`dppo-bench publish tiny_smoke`" in page
    index = (tmp_path / "docs/index.md").read_text()
    assert f"- [{page.splitlines()[0].removeprefix('# ')}](tiny_smoke.md)" in index


def test_without_an_aggregated_table_it_says_how_to_build_one(tmp_path, capsys):
    args = ["--results", str(tmp_path), "--runs", str(tmp_path), "--out", str(tmp_path / "docs")]
    assert main(["publish", "tiny_smoke", *args]) != 0
    assert "table.md: no aggregated table; build it first: snakemake --cores 2 tiny_smoke" in capsys.readouterr().err
    assert not (tmp_path / "docs").exists()
