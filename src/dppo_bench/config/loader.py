"""The one way a yaml file becomes a config: its id is its file name, and an id names a file of one directory.

Methods, settings, experiments, benchmarks and training datasets are all found and read through here, so the
rules (and their error messages) are written once.
"""

from __future__ import annotations

from pathlib import Path

from dppo_bench.config.yaml_io import ConfigError, M, read_yaml, validate


def entry_paths(directory: Path) -> list[Path]:
    """The entries of a directory of yaml, sorted ("_name.yaml" files are bases that entries extend)."""
    return [p for p in sorted(directory.glob("*.yaml")) if not p.name.startswith("_")]


def known_ids(directory: Path) -> str:
    return ", ".join(p.stem for p in entry_paths(directory)) or "none"


def unknown(kind: str, entry_id: object, directory: Path) -> str:
    """The message for an id that names no file of ``directory``."""
    return f"unknown {kind} {entry_id!r}; known: {known_ids(directory)}"


def locate(kind: str, id_or_path: str, directory: Path) -> Path:
    """The file of an id (``<directory>/<id>.yaml``); anything ending in .yaml is a path of its own."""
    path = Path(id_or_path) if id_or_path.endswith(".yaml") else directory / f"{id_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(path, "", unknown(kind, id_or_path, directory))
    return path


def require(kind: str, entry_id: str, directory: Path, path: Path, field: str) -> None:
    """A reference from ``path``'s ``field`` to an entry of ``directory`` must name an existing one."""
    if not (directory / f"{entry_id}.yaml").is_file():
        raise ConfigError(path, field, unknown(kind, entry_id, directory))


def refuse_id(path: Path, data: dict) -> dict:
    """The id is the file name, so a file may not set one (two names for one thing would drift apart)."""
    if "id" in data:
        raise ConfigError(path, "id", "the id is the file name; do not set it")
    return data


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def extended_data(kind: str, path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """``path``'s yaml with ``extends: <parent id>`` resolved: the parent's values (a file of the same directory, its
    own ``extends`` resolved), overridden key by key by the file's own; ``kind`` names the entries in errors."""
    data = refuse_id(path, read_yaml(path))
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(path, "extends", f"expected the id of a {kind}, got {parent!r}")
    parent_path = path.parent / f"{parent}.yaml"
    if not parent_path.is_file():
        raise ConfigError(path, "extends", f"no {kind} {parent!r} to extend; known: {known_ids(path.parent)}")
    chain = (*_seen, path)
    if parent_path in chain:
        cycle = " -> ".join(p.stem for p in (*chain[chain.index(parent_path) :], parent_path))
        raise ConfigError(path, "extends", f"a cycle: {cycle}")
    return _deep_merge(extended_data(kind, parent_path, chain), data)


def load_model(model: type[M], path: Path, data: dict | None = None, extra: dict | None = None) -> M:
    """``path``'s yaml (or ``data`` read from it) as ``model``, with the id taken from the file name and the
    ``extra`` fields the loader adds."""
    data = refuse_id(path, read_yaml(path) if data is None else data)
    return validate(model, {"id": path.stem, **(extra or {}), **data}, path)
