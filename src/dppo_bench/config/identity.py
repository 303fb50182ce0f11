"""sha256 of a config's content: what a run, a benchmark or a prompt *is*, compared on resume and aggregation."""

from __future__ import annotations

import copy
import hashlib
import json

from pydantic import BaseModel


def canonical_sha256(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def identity_sha256(model: BaseModel, left_out: tuple[str, ...]) -> str:
    """sha256 of the model's dump without the dotted fields ``left_out`` (absent ones are skipped)."""
    return dump_identity_sha256(model.model_dump(mode="json"), left_out)


def dump_identity_sha256(dump: dict, left_out: tuple[str, ...]) -> str:
    """sha256 of a model's JSON dump (a live model's, or one a record holds) without the dotted fields ``left_out``."""
    data = copy.deepcopy(dump)
    for dotted in left_out:
        *parents, name = dotted.split(".")
        node = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(name, None)
    return canonical_sha256(data)
