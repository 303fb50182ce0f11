"""A setting's engine probe (``probe:``): what it may say, and that settings without one keep their identity."""

from __future__ import annotations

import pytest
import yaml

from dppo_bench.config import ConfigError, find_setting
from dppo_bench.config.roots import SETTINGS_DIR
from dppo_bench.config.settings import setting_data, setting_sha256


def _write(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _copy(tmp_path, setting_id: str, probe: str):
    """The setting's yaml (its extends resolved) in ``tmp_path``, with ``probe`` as its probe section."""
    data = setting_data(SETTINGS_DIR / f"{setting_id}.yaml")
    data.pop("probe", None)
    return _write(tmp_path, "probe_case", yaml.safe_dump(data) + probe)


@pytest.mark.parametrize(
    ("probe", "message"),
    [
        ("probe: {engine: local}\n", "the local engine needs a numeric format"),
        ("probe: {engine: vllm, rollout: {weights: bf16}}\n", "the local engine needs a numeric format"),
        ("probe: {engine: sglang}\n", "probe.engine"),
    ],
)
def test_a_probe_that_cannot_run_is_refused_naming_the_field(tmp_path, probe, message):
    path = _copy(tmp_path, "smollm_probe_vllm", probe)
    with pytest.raises(ConfigError, match=message) as error:
        find_setting(str(path))
    assert "probe" in str(error.value) and str(path) in str(error.value)


def test_a_local_setting_may_not_have_an_engine_probe(tmp_path):
    path = _copy(tmp_path, "tiny_sanity", "probe: {engine: vllm}\n")
    with pytest.raises(ConfigError, match="an engine probe reads a verl setting"):
        find_setting(str(path))


def test_settings_without_a_probe_keep_the_identity_they_had_before_settings_could_have_one():
    """A record's setting dump from before the field existed has no "probe" key: it must hash as today's setting."""
    for setting_id in ("tiny_verl", "verl_cpu_smollm", "tiny_sanity"):
        setting = find_setting(setting_id)
        dump = setting.model_dump(mode="json")
        dump.pop("probe")
        assert setting_sha256(dump) == setting.sha256()


def test_the_probe_is_part_of_a_probe_settings_identity():
    assert find_setting("smollm_probe_bf16").sha256() != find_setting("smollm_probe_fp8").sha256()
