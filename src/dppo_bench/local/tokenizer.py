"""A character-level Hugging Face tokenizer for the tiny arithmetic task (plus one ``\\boxed{`` token), and the
lexicon's connective words (``keli ``, with their space) as one token each when the task has them.

It is a real ``PreTrainedTokenizerFast`` saved next to the model, so every stage (training,
``dppo-bench eval generate --backend hf``, scoring) loads checkpoints the same way as any HF model.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from dppo_bench.local.task import BOX  # one token: the answer marker costs one step, not seven

CHARS = "0123456789+-*=,}"
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# A chat template that is just the user's text after <bos>: the task needs no roles.
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"


def build_tokenizer(words: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """``words``: the lexicon's tokens (lowercase letters and one trailing space), after the characters."""
    vocab = {tok: i for i, tok in enumerate([*SPECIALS, BOX, *sorted(set(CHARS)), *words])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"\\boxed\{|[a-z]+ |."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
