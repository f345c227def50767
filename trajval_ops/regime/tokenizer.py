"""Character-level tokenizer of the miniature regime (46 tokens), with a chat template.

One token per character: the 4 special tokens ``<pad>`` (0), ``<eos>`` (1), ``<bos>`` (2),
``<unk>`` (3), then the digits, the lowercase letters, space and ``+-*%=``. Decoding joins the
characters without separators, so ``decode(encode(text)) == text`` for any text over
:data:`CHARS`.

Chat template: user turns are written as they are, an assistant turn as ``=`` + content + ``<eos>``,
and the generation prompt is ``=``; so ``[{"role": "user", "content": "47+38"}]`` renders as
``"47+38="`` and the model answers ``"85"`` then ``<eos>``. System turns are left out: the model
knows no instructions, and leaving them out keeps prompts of the project's ``math`` template (a
system prompt plus the question) usable. Nothing is added at encoding time (no BOS), so TRL's
``tokenizer(text)`` and the engines' ``add_special_tokens=False`` give the same ids.
"""

from __future__ import annotations

SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
PAD, EOS, BOS, UNK = SPECIAL_TOKENS
#: The ordinary tokens, one character each.
CHARS = "0123456789abcdefghijklmnopqrstuvwxyz +-*%="
#: What the generation prompt appends after the question.
ANSWER_MARKER = "="

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{{ message['content'] }}"
    "{%- elif message['role'] == 'assistant' -%}{{ '" + ANSWER_MARKER + "' + message['content'] + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '" + ANSWER_MARKER + "' }}{%- endif -%}"
)

#: Longest input the tokenizer announces (the model's RoPE positions go as far).
MODEL_MAX_LENGTH = 2048


def vocabulary() -> dict[str, int]:
    """Token -> id: the special tokens first, then :data:`CHARS` in order."""
    return {token: index for index, token in enumerate((*SPECIAL_TOKENS, *CHARS))}


def build_char_tokenizer():
    """A ``PreTrainedTokenizerFast`` over single characters with pad/eos/bos/unk and the chat
    template (see the module docstring)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=vocabulary(), unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD, eos_token=EOS, bos_token=BOS, unk_token=UNK,
        model_max_length=MODEL_MAX_LENGTH,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
