"""Reading one yaml file into a validated model, with bad input reported as the file and the field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dppo_bench.errors import UserError

ID_PATTERN = re.compile(r"^[a-z0-9_]+$")  # ids are path components and snakemake wildcards
Id = Annotated[str, Field(pattern=ID_PATTERN.pattern)]


class ConfigError(UserError):
    """Bad input in a config file: the message names the file and the field."""

    def __init__(self, path: Path | str, field: str, message: str):
        self.path, self.field = str(path), field
        where = f"{path}: field '{field}'" if field else str(path)
        super().__init__(f"{where}: {message}")


class FieldError(ValueError):
    """Raised inside a model's validator to point at a nested field (``validate`` names it)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


M = TypeVar("M", bound=BaseModel)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int):
        self.key, self.line = key, line
        super().__init__(f"{key!r} given twice (again on line {line})")


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, except that a key given twice in one mapping is an error instead of the last one winning
    silently (``{delta: 0.15, delta: 0.5}``, a profile written twice)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> dict:
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader: builds plain data only
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except _DuplicateKey as e:
        raise ConfigError(path, str(e.key), str(e)) from None
    except yaml.YAMLError as e:
        raise ConfigError(path, "", f"not valid yaml: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "", "expected a mapping at the top level")
    return data


def validate(model: type[M], data: dict, path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, FieldError):
            raise ConfigError(path, cause.field, str(cause)) from None
        field = ".".join(str(part) for part in err["loc"])
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(path, field, message) from None
