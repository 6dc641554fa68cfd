"""Tiny random chat models for fast tests: a real HF directory in well under two seconds.

``build_tiny_model(path)`` writes a Llama- or Qwen2-shaped model with random weights plus a byte-level BPE
tokenizer trained here on a small built-in corpus (digits, arithmetic words, chat words). The result loads
with ``AutoModelForCausalLM.from_pretrained(path)`` / ``AutoTokenizer.from_pretrained(path)`` and behaves
like a (very dumb) SmolLM2/Qwen chat model: ChatML template, ``<|im_end|>`` as EOS, ``<|endoftext|>``
as pad. Same arguments and seed give byte-identical weights.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from aloft.models.loading import quiet_progress_bars

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS = [END_OF_TEXT, IM_START, IM_END]
"""Trained first, so their ids are 0, 1, 2 in every tiny tokenizer."""

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""The ChatML layout SmolLM2 and Qwen use: ``<|im_start|>role\\ncontent<|im_end|>\\n`` per message."""

_ARCHES = {"llama": LlamaConfig, "qwen2": Qwen2Config}

_NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve twenty hundred".split()
_MATH_WORDS = (
    "plus minus times divided by equals sum product difference answer is the what of and total each "
    "how many more less than number result compute calculate solve step first then so"
).split()
_CHAT_WORDS = (
    "user assistant system you are a helpful please think about it final answer question sure here "
    "let me check tool call result observation done yes no thanks"
).split()


def _tiny_corpus(num_lines: int = 400) -> list[str]:
    """A few KB of generated text covering digits, arithmetic and chat words (fixed, not seeded)."""
    rng = random.Random(1234)
    ops = ["+", "-", "*", "/", "="]
    lines = []
    for _ in range(num_lines):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        op = rng.choice(ops)
        words = rng.sample(_MATH_WORDS, 4) + rng.sample(_CHAT_WORDS, 3) + rng.sample(_NUMBER_WORDS, 2)
        rng.shuffle(words)
        lines.append(f"What is {a} {op} {b}? {' '.join(words)}. The answer is {a + b}.\n")
    return lines


def build_tiny_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on the built-in corpus and wrap it with the ChatML template.

    Every byte is in the vocabulary (so any text round-trips); ``vocab_size`` counts the 256 bytes,
    the 3 special tokens and the merges. Training is deterministic: the corpus is fixed.
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"build_tiny_tokenizer: vocab_size must be >= {256 + len(SPECIAL_TOKENS)}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_tiny_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=CHATML_TEMPLATE,
        model_max_length=4096,
    )


def build_tiny_model(
    path: str | Path,
    *,
    arch: str = "llama",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int | None = None,
    vocab_size: int | None = None,
    max_position_embeddings: int = 512,
    seed: int = 0,
    tie_word_embeddings: bool = True,
) -> str:
    """Write a random-weight causal LM with a tiny ChatML tokenizer to ``path``; return the path.

    ``vocab_size`` defaults to the tokenizer's size; a larger one pads the embedding with rows the
    tokenizer never emits. ``head_dim`` defaults to ``hidden_size // num_heads`` (vLLM needs >= 32).
    Weights are drawn with ``initializer_range=0.2`` (10x the usual) so next-token distributions are
    peaked enough for greedy/top-k/top-p to behave differently in tests.
    """
    if arch not in _ARCHES:
        raise ValueError(f"build_tiny_model: unknown arch {arch!r}; choose one of {sorted(_ARCHES)}")
    tokenizer = build_tiny_tokenizer()
    vocab_size = vocab_size or len(tokenizer)
    if vocab_size < len(tokenizer):
        raise ValueError(f"build_tiny_model: vocab_size {vocab_size} < tokenizer size {len(tokenizer)}")
    config = _ARCHES[arch](
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim or hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        initializer_range=0.2,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_progress_bars():
        model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
