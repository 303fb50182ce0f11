"""Prompt templates (``eval/prompts/<id>.yaml``): a user message around ``{problem}``, optionally a system one.

``opens_reasoning`` says that the models this template is used with start their response inside a reasoning
block (their chat template ends the prompt with ``<think>``): a completion without ``</think>`` then stopped
inside its reasoning and states no answer, whatever the reasoning says.

The problem is substituted with ``str.replace``, never ``str.format``: problems are LaTeX, full of braces.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import field_validator

from dppo_bench.config.identity import canonical_sha256
from dppo_bench.config.loader import load_model, locate
from dppo_bench.config.roots import PROMPTS_DIR
from dppo_bench.config.yaml_io import Strict

PLACEHOLDER = "{problem}"


class PromptTemplate(Strict):
    id: str
    description: str
    source: str  # where the exact text comes from
    user: str  # contains {problem} exactly once
    system: str | None = None
    opens_reasoning: bool = False

    @field_validator("user")
    @classmethod
    def _one_placeholder(cls, v: str) -> str:
        if v.count(PLACEHOLDER) != 1:
            raise ValueError(f"must contain {PLACEHOLDER} exactly once")
        return v

    def messages(self, problem: str) -> list[dict[str, str]]:
        """Chat messages for one problem, as verl's ``prompt`` column and chat templates expect them."""
        user = {"role": "user", "content": self.user.replace(PLACEHOLDER, problem)}
        return [{"role": "system", "content": self.system}, user] if self.system else [user]

    def sha256(self) -> str:
        return canonical_sha256({"user": self.user, "system": self.system})


def load_prompt(prompt_id: str, prompts_dir: Path = PROMPTS_DIR) -> PromptTemplate:
    return load_model(PromptTemplate, locate("prompt template", prompt_id, prompts_dir))
