"""The packaged real LM built into its checkpoint directory: the same weights as the GGUF, the GGUF's stop token,
its chat template, and a record of where it came from."""

from __future__ import annotations

import json

import pytest
import torch
from real_lm import REAL_LM, real_lm  # noqa: F401 (a fixture)

from dppo_bench.config.models import load_packaged_model
from dppo_bench.io import verify_checksums
from dppo_bench.packaged_model import SOURCE_FILE

pytestmark = pytest.mark.slow


def test_the_directory_records_its_source_and_checksums(real_lm):  # noqa: F811
    spec = load_packaged_model(REAL_LM)
    source = json.loads((real_lm / SOURCE_FILE).read_text())
    assert (source["package"], source["version"], source["sha256"]) == (spec.package, spec.version, spec.sha256)
    verify_checksums(real_lm)


def test_the_tokenizer_stops_at_im_end_and_keeps_the_chat_template(real_lm):  # noqa: F811
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(real_lm)
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token_id) == ("<|im_end|>", 2, 2)
    assert GenerationConfig.from_pretrained(real_lm).eos_token_id == 2
    messages = [{"role": "user", "content": "1+1?"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n")


def test_the_weights_are_the_ggufs_dequantised_exactly(real_lm):  # noqa: F811
    from transformers import AutoModelForCausalLM

    gguf = load_packaged_model(REAL_LM).gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    built = AutoModelForCausalLM.from_pretrained(real_lm, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 4093, 198, 1780, 314, 216, 34, 27, 35, 47, 2, 198, 1, 520, 9531, 198]])
    with torch.no_grad():
        assert torch.equal(reference(ids).logits, built(ids).logits)
    assert built.config.tie_word_embeddings and built.config.vocab_size == 49152
