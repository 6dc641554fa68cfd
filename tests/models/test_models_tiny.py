"""Tiny random models: loadable, deterministic, ChatML-shaped like SmolLM2/Qwen."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from aloft.models import build_tiny_model, build_tiny_tokenizer

TOKENIZER = build_tiny_tokenizer()


def test_build_writes_a_loadable_hf_directory_quickly(tmp_path):
    build_tiny_model(tmp_path / "warmup")  # first call pays for transformers' lazy imports
    started = time.perf_counter()
    path = build_tiny_model(tmp_path / "m")
    assert time.perf_counter() - started < 2.0
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "llama"
    assert model.config.vocab_size == len(tokenizer) == 384
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, 384)


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    def weights(name, seed):
        return load_file(Path(build_tiny_model(tmp_path / name, seed=seed)) / "model.safetensors")

    a, b, c = weights("a", 0), weights("b", 0), weights("c", 1)
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


def test_build_does_not_disturb_the_global_rng(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", seed=7)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_architectures_and_shape_options(tmp_path, arch):
    path = build_tiny_model(
        tmp_path / arch,
        arch=arch,
        hidden_size=64,
        num_layers=3,
        num_heads=2,
        num_kv_heads=1,
        head_dim=32,
        vocab_size=512,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    model = AutoModelForCausalLM.from_pretrained(path)
    config = model.config
    assert config.model_type == arch
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (3, 2, 1)
    assert (config.head_dim, config.vocab_size, config.max_position_embeddings) == (32, 512, 128)
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()


def test_bad_arguments_fail_with_a_clear_message(tmp_path):
    with pytest.raises(ValueError, match="unknown arch 'gpt2'"):
        build_tiny_model(tmp_path / "x", arch="gpt2")
    with pytest.raises(ValueError, match="vocab_size 100 < tokenizer size 384"):
        build_tiny_model(tmp_path / "y", vocab_size=100)


def test_chat_template_is_chatml_with_im_end_eos_and_endoftext_pad():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]
    text = TOKENIZER.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert TOKENIZER.eos_token == "<|im_end|>" and TOKENIZER.pad_token == "<|endoftext|>"
    assert [
        TOKENIZER.pad_token_id,
        TOKENIZER.convert_tokens_to_ids("<|im_start|>"),
        TOKENIZER.eos_token_id,
    ] == [0, 1, 2]
    ids = TOKENIZER(text)["input_ids"]
    assert (
        ids[0] == 1 and ids.count(TOKENIZER.eos_token_id) == 2
    )  # special tokens are single ids, no BOS added


def test_tokenizer_merges_common_corpus_words():
    # BPE trained on the arithmetic corpus: frequent words become few tokens, unlike raw bytes.
    assert len(TOKENIZER("What is the answer")["input_ids"]) < len("What is the answer") // 2


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=60))
def test_any_text_round_trips_through_the_byte_level_tokenizer(text):
    ids = TOKENIZER(text)["input_ids"]
    assert TOKENIZER.decode(ids) == text
