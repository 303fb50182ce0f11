"""The plugin's patches of verl: applied on import in any process, once, and only on the pinned verl."""

import sys
import types

import pytest
import verl
from test_topk_support import result_of, run_python

from dppo_bench.verl_plugin import patches
from dppo_bench.verl_plugin.contract import PINNED_VERL
from dppo_bench.verl_plugin.patches import VerlVersionError, check_verl_version
from dppo_bench.verl_plugin.topk import fsdp, hooks
from dppo_bench.verl_plugin.topk.hooks import PatchError, require_parameters, when_imported


def test_the_pin_is_the_installed_verl():
    assert verl.__version__ == PINNED_VERL == "0.9.1"
    check_verl_version("0.9.1")


@pytest.mark.parametrize("version", ["0.9.0", "0.9.2", "0.10.0.dev", "0.9.1.post1"])
def test_any_other_verl_version_is_refused(version):
    with pytest.raises(VerlVersionError, match=f"target verl 0.9.1 and the installed verl is {version}"):
        check_verl_version(version)


def test_install_on_another_version_patches_nothing_and_says_why(monkeypatch):
    before = {name: list(patches) for name, patches in hooks._FINDER.patches.items()}
    monkeypatch.setattr(verl, "__version__", "0.9.2")
    with pytest.raises(VerlVersionError):
        patches.install()
    assert "0.9.2" in str(patches.installation_error())
    assert hooks._FINDER.patches == before
    monkeypatch.setattr(verl, "__version__", "0.9.1")
    patches.install()  # twice on the pinned version: no duplicate registrations
    assert patches.installation_error() is None
    assert {name: list(patches) for name, patches in hooks._FINDER.patches.items()} == before


def test_patching_twice_wraps_once():
    import verl.workers.engine.fsdp.transformer_impl as impl

    patched = impl.FSDPEngineWithLMHead.prepare_model_outputs
    fsdp.patch_engine(impl)
    assert impl.FSDPEngineWithLMHead.prepare_model_outputs is patched


def test_a_changed_signature_fails_loudly():
    class Engine:
        def prepare_model_outputs(self, output, micro_batch):  # not verl 0.9.1's
            return {}

    with pytest.raises(PatchError, match="not verl 0.9.1's code"):
        fsdp.patch_engine(types.SimpleNamespace(FSDPEngineWithLMHead=Engine))
    with pytest.raises(PatchError):
        require_parameters(lambda a, b: None, ("a", "c"))


def test_a_patch_waits_for_its_module_and_runs_once_per_execution(tmp_path, monkeypatch):
    (tmp_path / "dppo_hook_target.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def patch(module):
        seen.append(module.VALUE)
        module.VALUE = 2

    when_imported("dppo_hook_target", patch)
    when_imported("dppo_hook_target", patch)  # registered once
    assert seen == []
    import dppo_hook_target

    assert seen == [1] and dppo_hook_target.VALUE == 2
    seen.clear()
    when_imported("dppo_hook_target", lambda module: seen.append("now"))  # already imported: applied at once
    assert seen == ["now"]
    monkeypatch.delitem(sys.modules, "dppo_hook_target")


FRESH = r"""
import json, sys
import verl  # loads the plugin through its entry point; nothing of ours imported yet
import verl.workers.engine.fsdp.transformer_impl as fsdp_impl
import verl.workers.engine_workers as workers
import verl.experimental.agent_loop.single_turn_agent_loop as single
import verl.trainer.ppo.padding_utils as padding
marked = lambda fn: hasattr(fn, "__dppo_bench_patched__")
print("RESULT" + json.dumps({
    "fsdp": marked(fsdp_impl.FSDPEngineWithLMHead.prepare_model_outputs),
    "ppo_loss": marked(workers.ppo_loss),
    "single_turn": marked(single.SingleTurnAgentLoop.run),
    "padding": marked(padding.construct_minimal_padding_template),
    "vllm_imported": "vllm" in sys.modules,
}))
"""

WRONG_VERSION = r"""
import logging
import verl
verl.__version__ = "0.9.2"
try:
    import dppo_bench.verl_plugin.entry
except Exception as err:
    print("RAISED", type(err).__name__)
from dppo_bench.methods import get_mask
from dppo_bench.verl_plugin.losses import make_verl_loss
try:
    make_verl_loss(get_mask("dppo_topk_tv"))(None, None, None, None, config={})
except RuntimeError as err:
    print("LOSS", err)
"""


@pytest.mark.slow
def test_a_plain_import_verl_patches_every_module_it_then_imports():
    out = result_of(run_python(FRESH, VERL_USE_EXTERNAL_PLUGINS="auto", VERL_USE_EXTERNAL_MODULES=""))
    assert {k: v for k, v in out.items() if k != "vllm_imported"} == {
        "fsdp": True,
        "ppo_loss": True,
        "single_turn": True,
        "padding": True,
    }


@pytest.mark.slow
def test_the_plugin_fails_loudly_on_another_verl():
    proc = run_python(WRONG_VERSION, VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="")
    assert "RAISED VerlVersionError" in proc.stdout
    assert "installed verl is 0.9.2" in proc.stderr  # logged at error level: verl hides plugin import errors
    assert "LOSS loss mode 'dppo_topk_tv': dppo-bench's patches target verl 0.9.1" in proc.stdout
