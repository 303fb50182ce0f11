"""A verl-backend run built in a temporary directory: a short setting, prepared parquet files, a fake trainer.

``fake_main_ppo.py`` stands in for ``python -m verl.trainer.main_ppo``: it reads the overrides the launcher gives
verl, resumes from verl's checkpoint tracker and logs FileLogger rows in verl 0.9.1's fit-loop order.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from dppo_bench.config import SETTINGS_DIR, load_setting, setting_data

FAKE_MAIN_PPO = Path(__file__).with_name("fake_main_ppo.py")
FAKE_COMMAND = (sys.executable, str(FAKE_MAIN_PPO))


def write_verl_setting(tmp: Path, name: str = "verl_test", base: str = "sanity_r1d_1p5b", **train) -> Path:
    """``base``'s values with a short schedule: steps 10, a checkpoint every 4, validation every 2."""
    data = setting_data(SETTINGS_DIR / f"{base}.yaml")
    data["train"].update({"steps": 10, "save_every": 4, **train})
    data["eval"]["every"] = 2
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write_parquet(path: Path, data_source: str, rows: int = 4) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(
        [{"data_source": data_source, "prompt": [{"role": "user", "content": f"q{i}"}]} for i in range(rows)]
    )
    pq.write_table(table, path)
    return path


def prepared_data(tmp: Path, setting_path: Path) -> tuple[Path, tuple[Path, ...]]:
    """Train and validation parquet files with the data_source each of the setting's specs declares."""
    from dppo_bench.config.specs import load_any, load_benchmark

    setting = load_setting(setting_path)
    train_spec = load_any(setting.verl.train_data)
    train = write_parquet(tmp / "data" / f"{train_spec.id}.parquet", train_spec.data_source)
    val = tuple(
        write_parquet(tmp / "data" / f"{b}.parquet", load_benchmark(b).data_source) for b in setting.eval.online
    )
    return train, val
