"""A byte-level BPE tokenizer for the toy world, trained with HF `tokenizers` (chapter 01).

Wrapped as a `PreTrainedTokenizerFast` with a chat template, EOS, PAD and a reserved mask
token that the parallel drafter fills its block with (chapter 03).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, EOS, USER, ASSISTANT, MASK = "<|pad|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|mask|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, EOS, USER, ASSISTANT, MASK)
BYTE_ALPHABET = 256
# The template renders exactly what `format_chat` renders, so training and chat agree.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|user|>\n{{ m['content'] }}\n"
    "{% elif m['role'] == 'assistant' %}<|assistant|>\n{{ m['content'] }}<|eos|>"
    "{% else %}{{ raise_exception('roles are user and assistant, got ' + m['role']) }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def format_chat(prompt: str, reply: str | None = None) -> str:
    """The one-turn conversation string the target is trained on (reply None = generation prompt)."""
    text = f"{USER}\n{prompt}\n{ASSISTANT}\n"
    return text if reply is None else f"{text}{reply}{EOS}"


def min_vocab_size() -> int:
    """The smallest vocabulary that holds the 256 bytes, the special tokens and a few merges."""
    return BYTE_ALPHABET + len(SPECIAL_TOKENS) + 32


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on texts and wrap it with the chat template and special tokens."""
    if vocab_size < min_vocab_size():
        raise ValueError(
            f"vocab_size={vocab_size} is too small: the byte alphabet ({BYTE_ALPHABET}) and the "
            f"{len(SPECIAL_TOKENS)} special tokens need at least {min_vocab_size()}")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(texts, trainer=trainer)
    return wrap(bpe)


def wrap(bpe: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a raw `tokenizers.Tokenizer` as a transformers tokenizer with our special tokens."""
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token=PAD, eos_token=EOS, mask_token=MASK,
        additional_special_tokens=[USER, ASSISTANT], clean_up_tokenization_spaces=False)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def load_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    """Reload a tokenizer saved with `save_pretrained`, checking the special tokens survived."""
    tok = PreTrainedTokenizerFast.from_pretrained(str(folder))
    missing = [t for t in SPECIAL_TOKENS if t not in tok.get_vocab()]
    if missing:
        raise ValueError(f"tokenizer at {folder} lacks the special tokens {missing}")
    return tok
