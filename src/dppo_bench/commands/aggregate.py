"""``dppo-bench aggregate <experiment>``: the figure and tables of one experiment from its run directories."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.aggregate import contrasts
from dppo_bench.aggregate.collect import collect
from dppo_bench.aggregate.figures import plot
from dppo_bench.aggregate.probe import aggregate_probes
from dppo_bench.aggregate.reference import load_references
from dppo_bench.aggregate.tables import table_rows, to_csv, to_latex, to_markdown, write_tables
from dppo_bench.config import find_experiment, find_method, find_setting
from dppo_bench.errors import UserError
from dppo_bench.io import CorruptFileError
from dppo_bench.rundir import run_name
from dppo_bench.verify import redo, report


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("aggregate", help="figure (png, pdf) and tables (md, csv, tex) of an experiment")
    p.add_argument("experiment")
    p.add_argument("--runs", type=Path, default=Path("results/runs"), help="root of the run directories")
    p.add_argument("--probes", type=Path, default=Path("results/probes"), help="root of the mismatch probe records")
    p.add_argument("--out", type=Path, help="output directory (default: results/<experiment>)")
    p.add_argument("--only", choices=["table", "figure"], help="write only the tables or only the figure")
    p.set_defaults(func=aggregate)


def aggregate(args: argparse.Namespace) -> int:
    experiment = find_experiment(args.experiment)
    out = args.out or Path("results") / experiment.id
    out.mkdir(parents=True, exist_ok=True)
    if experiment.probes:
        aggregate_probes(experiment, args.probes, out, args.only)
        return 0
    settings = {g.setting: find_setting(g.setting) for g in experiment.runs}
    methods = {m: find_method(m) for g in experiment.runs for m in g.methods}
    runs = collect(experiment, settings, methods, args.runs)
    refuse_damage(runs)
    references = load_references(experiment.id)
    usable = sum(r.usable for r in runs)
    print(f"{experiment.id}: {usable}/{len(runs)} runs usable -> {out}")
    for run in runs:
        if run.outdated_evaluations:
            print(
                f"  {run_name(run.setting, run.method, run.seed)}: not shown until evaluated again (their spec or "
                f"steps changed; snakemake re-evaluates, without retraining): {', '.join(run.outdated_evaluations)}"
            )
    if experiment.masked_tokens is not None:
        return write_token_table(experiment, runs, args.runs, settings, out, args.only)
    if args.only != "figure":
        rows = table_rows(experiment, runs, references)
        markdown = to_markdown(experiment, rows) + contrasts.to_markdown(contrasts.contrast_rows(experiment, runs))
        write_tables(out, markdown, to_csv(experiment, rows), to_latex(experiment, rows))
    if args.only != "table":
        if not experiment.panels:
            raise UserError(f"experiment {experiment.id!r} has no panels, so no figure")
        plot(experiment, runs, out / "figure", references)
    return 0


def refuse_damage(runs) -> None:
    """No table or figure from damaged records: name them, and remove the markers of those the pipeline makes
    again (an evaluation's), so that the same command reruns what is needed."""
    found = [d for run in runs for d in run.damage]
    if found:
        damaged = sum(bool(run.damage) for run in runs)
        raise CorruptFileError(f"damaged records in {damaged} run(s):\n{report(found, redo(found))}")


def write_token_table(experiment, runs, root: Path, settings, out: Path, only: str | None) -> int:
    from dppo_bench.aggregate import masked_tokens as table  # heavy: torch, which the CLI's other commands skip

    if only == "figure":
        raise UserError(f"experiment {experiment.id!r} is a table of masked tokens, with no figure")
    rows = table.token_rows(experiment, runs, root, settings)
    write_tables(out, table.to_markdown(experiment, runs, rows), table.to_csv(rows), table.to_latex(rows))
    return 0
