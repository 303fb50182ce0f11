"""``data prepare``: a spec's problem set -> ``<out>/<id>.parquet`` (verl), ``<id>.problems.jsonl`` (normalized,
what ``score --data`` reads) and ``<id>.manifest.json`` (source, hashes, template), written atomically.

Re-preparing the same problem set rewrites identical files; a different problem set under the same id in the
same directory is refused, so nothing already written (and perhaps already trained on) is silently replaced.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from dppo_bench.config.prompts import PromptTemplate
from dppo_bench.config.specs import DatasetSpec
from dppo_bench.io import atomic_write, atomic_write_json, atomic_write_text, file_sha256
from dppo_bench.problem_sets.load import DataError, ProblemSet


def verl_rows(spec: DatasetSpec, problems: ProblemSet, template: PromptTemplate) -> list[dict]:
    """One verl row per problem (verl's data format: prompt as chat messages, reward_model.ground_truth)."""
    return [
        {
            "data_source": spec.data_source,
            "prompt": template.messages(p.problem),
            "ability": spec.ability,
            "reward_model": {"style": "rule", "ground_truth": p.answer},
            "extra_info": {
                "split": spec.split,
                "index": i,
                "problem_id": p.id,
                "answer_type": spec.answer_type,
                "dataset": spec.id,
            },
        }
        for i, p in enumerate(problems.problems)
    ]


def prepare(spec: DatasetSpec, problems: ProblemSet, template: PromptTemplate, out_dir: Path) -> dict:
    """Write the three files; returns the manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / f"{spec.id}.manifest.json"
    if manifest_path.is_file():
        old = json.loads(manifest_path.read_text())
        if old.get("data_sha256") != problems.sha256:
            raise DataError(
                f"{manifest_path}: already holds {spec.id} with data_sha256 {old.get('data_sha256')}; this problem "
                f"set is {problems.sha256}. Prepare into another directory (nothing was overwritten)."
            )
    manifest = {
        "id": spec.id,
        "spec": str(spec.path),
        "data_source": spec.data_source,
        "rows": len(problems.problems),
        "data_sha256": problems.sha256,
        "pinned_sha256": problems.pinned_sha256,
        "verified": problems.pinned_sha256 is not None,
        "origin": problems.origin,
        "source": problems.source_kind,
        "dropped_duplicates": problems.dropped_duplicates,
        "prompt": {"id": template.id, "sha256": template.sha256()},
        "answer_type": spec.answer_type,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    table = pa.Table.from_pylist(verl_rows(spec, problems, template))
    parquet, problems_file = out_dir / f"{spec.id}.parquet", out_dir / f"{spec.id}.problems.jsonl"
    atomic_write(parquet, lambda f: pq.write_table(table, f))
    atomic_write_text(problems_file, "".join(json.dumps(p.row(), ensure_ascii=False) + "\n" for p in problems.problems))
    # written last, with the sha256 of both files: what reads the parquet checks it (dppo_bench.problem_sets.pins)
    manifest["files"] = {p.name: file_sha256(p) for p in (parquet, problems_file)}
    atomic_write_json(manifest_path, manifest)
    return manifest
