"""``extends:`` in method recipes, as in settings: a sweep's recipe is its base with the values it changes."""

import pytest

from dppo_bench.config import ConfigError, load_method, load_methods, setting_data
from dppo_bench.config.methods import method_data
from dppo_bench.config.roots import METHODS_DIR, SETTINGS_DIR

BASE = "mask: mask_bad_updates\nanchor: rollout\nhyperparameters:\n  sanity: {delta: 0.5, is_cap: null}\n"


def write(directory, name, text):
    (directory / f"{name}.yaml").write_text(f"display_name: {name}\npaper: a test\n{text}")
    return directory / f"{name}.yaml"


def test_a_sweep_recipe_is_its_base_with_the_values_it_changes():
    recipes = load_methods()
    base, sweep = recipes["grpo_relax_both_alpha0p1"], recipes["grpo_relax_both_alpha0p3"]
    assert "extends" in (METHODS_DIR / "grpo_relax_both_alpha0p3.yaml").read_text()
    assert sweep.profile("efficiency").values() == {**base.profile("efficiency").values(), "alpha": 0.3}
    assert (sweep.mask, sweep.anchor, sweep.paper) == (base.mask, base.anchor, base.paper)
    assert sweep.display_name == "Relax-both (α = 0.3)" and sweep.sha256() != base.sha256()


def test_a_child_overrides_key_by_key_and_keeps_its_own_identity(tmp_path):
    write(tmp_path, "base", BASE)
    child = write(tmp_path, "child", "extends: base\nanchor: recompute\nhyperparameters:\n  sanity: {delta: 0.8}\n")
    flat = write(tmp_path, "flat", BASE.replace("rollout", "recompute").replace("0.5", "0.8"))
    assert method_data(child) == {**method_data(flat), "display_name": "child"}
    resolved = load_method(child)
    assert resolved.id == "child" and resolved.profile("sanity").values()["delta"] == 0.8
    assert resolved.model_dump(exclude={"id", "display_name"}) == load_method(flat).model_dump(
        exclude={"id", "display_name"}
    )


def test_a_missing_base_is_named_with_the_file_and_the_field(tmp_path):
    write(tmp_path, "base", BASE)
    child = write(tmp_path, "child", "extends: nobody\n")
    with pytest.raises(
        ConfigError, match=f"{child}: field 'extends': no method 'nobody' to extend; known: base, child"
    ):
        load_method(child)


def test_a_cycle_is_named_with_the_file_and_the_field(tmp_path):
    a = write(tmp_path, "a", "extends: b\n")
    write(tmp_path, "b", "extends: c\n")
    write(tmp_path, "c", "extends: a\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: field 'extends': a cycle: a -> b -> c -> a"):
        load_method(a)
    itself = write(tmp_path, "itself", "extends: itself\n")
    with pytest.raises(ConfigError, match=f"{itself}: field 'extends': a cycle: itself -> itself"):
        load_method(itself)


def test_an_extends_that_is_not_an_id_is_refused(tmp_path):
    child = write(tmp_path, "child", "extends: [a, b]\n")
    with pytest.raises(ConfigError, match=f"{child}: field 'extends': expected the id of a method"):
        load_method(child)


def test_settings_extend_through_the_same_mechanism(tmp_path):
    (tmp_path / "loop.yaml").write_text("extends: loop\n")
    with pytest.raises(ConfigError, match="field 'extends': a cycle: loop -> loop"):
        setting_data(tmp_path / "loop.yaml")
    with pytest.raises(ConfigError, match="no setting 'nobody' to extend"):
        (tmp_path / "orphan.yaml").write_text("extends: nobody\n")
        setting_data(tmp_path / "orphan.yaml")
    assert "extends" not in setting_data(SETTINGS_DIR / "tiny_smoke.yaml")
