"""Patch a module when it is imported, and mark what was patched.

Our plugin is loaded while ``import verl`` runs, before any of the modules we patch exist in
that process; importing them eagerly would pull vLLM into trainer workers and Megatron into
FSDP runs. So each patch is registered against a module name and applied right after that
module executes (or at once, if it is already imported), in whichever process imports it.
"""

from __future__ import annotations

import importlib.abc
import inspect
import sys
from collections.abc import Callable
from types import ModuleType

Patch = Callable[[ModuleType], None]
# Set (to True) on every wrapper. Never the wrapped function: Ray serialises patched methods of its actor classes
# by value with every attribute, and verl's original, no longer importable by name, would be serialised with them.
MARK = "__dppo_bench_patched__"


class PatchError(RuntimeError):
    """A patch target does not look like the verl 0.9.1 code it was written against."""


_ORIGINALS: dict[Callable, Callable] = {}  # wrapper -> the function it wraps (for tests and inspection)


def is_patched(fn: object) -> bool:
    return hasattr(fn, MARK)


def original_of(wrapper: Callable) -> Callable:
    """The function ``wrapper`` replaced."""
    return _ORIGINALS[wrapper]


def mark_patched(wrapper, original):
    """Tag ``wrapper`` as ours (so a second application is a no-op) and let it read like ``original``."""
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, name, getattr(original, name, None))
    setattr(wrapper, MARK, True)
    _ORIGINALS[wrapper] = original
    return wrapper


def require_parameters(fn: Callable, names: tuple[str, ...]) -> None:
    """Fail loudly unless ``fn`` takes exactly these leading parameters."""
    if not names:
        return
    found = tuple(inspect.signature(fn).parameters)[: len(names)]
    if found != names:
        raise PatchError(f"{fn.__module__}.{fn.__qualname__} takes {found}, expected {names}: not verl 0.9.1's code")


def wrap(owner: object, name: str, parameters: tuple[str, ...], make_wrapper: Callable[[Callable], Callable]) -> None:
    """Replace ``owner.name`` (a module's function or a class's method) by ``make_wrapper(original)``.

    Once: a name already wrapped is left alone. The original must take ``parameters`` first.
    """
    original = getattr(owner, name)
    if is_patched(original):
        return
    require_parameters(original, parameters)
    setattr(owner, name, mark_patched(make_wrapper(original), original))


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, patches: list[Patch]):
        self._inner, self._patches = inner, patches

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        for patch in self._patches:
            patch(module)

    def __getattr__(self, name: str):  # get_source, get_resource_reader, ... of the real loader
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.patches: dict[str, list[Patch]] = {}

    def find_spec(self, fullname, path, target=None):
        patches = self.patches.get(fullname)
        if not patches:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, patches)
                return spec
        return None


_FINDER = _Finder()


def when_imported(name: str, patch: Patch) -> None:
    """Apply ``patch`` to module ``name`` after it executes; now, if it already has."""
    patches = _FINDER.patches.setdefault(name, [])
    if patch not in patches:
        patches.append(patch)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
