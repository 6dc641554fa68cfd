"""The completion logits of a training forward: padded (a group's prompt run once) or packed.

``token_logits`` is what the workers call; ``completion_logits`` is the padded layout and
``aloft.training.packing`` the packed one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn
from transformers import DynamicCache

from aloft.models.compat import attention_implementation, cache_kwarg
from aloft.training.batch import TrainBatch
from aloft.training.packing import packed_completion_logits


def token_logits(
    model: nn.Module,
    batch: TrainBatch,
    share_prompts: bool,
    packing: bool,
    device: torch.device | None = None,
    min_shared_prefix: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """``(logits [R, C, V], targets [R, C], to_rows)`` for the completion tokens of ``batch``.

    Padded (``completion_logits``): R, C = B, T and ``to_rows`` is the identity. Packed
    (``aloft.training.packing``): only real completion tokens, in rows of ``LOGIT_ROW``; ``to_rows``
    puts per-token values ``[R, C]`` back in the ``[B, T]`` layout. ``share_prompts``: identical
    prompts run through the model once, in both layouts; packed, so do beginnings of
    ``min_shared_prefix`` tokens or more that different prompts share (0: none). ``device``: where the model computes
    (default: where its parameters are); the outputs are there. Give ``batch`` on the CPU when
    packing: the rows are laid out there, and only the packed tensors move.
    """
    device = device if device is not None else next(model.parameters()).device
    if packing:
        packed = packed_completion_logits(model, batch, share_prompts, device, min_shared_prefix)
        return packed.logits, packed.targets, packed.to_rows
    batch = batch.to(device)
    return completion_logits(model, batch, share_prompts), batch.completion_ids, _same


def _same(values: torch.Tensor) -> torch.Tensor:
    return values


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each decoder layer's activations in backward, with the attention its forward ran.

    The training forwards switch attention for one forward (packed rows, eager attention for short
    bf16 rows) and switch back before ``backward``, where a checkpointed layer runs again: with the
    model's attention of that moment it would compute (and save) something else, and torch stops
    ("a different number of tensors was saved"). ``context_fn`` notes the attention at each layer's
    forward and puts it back around that layer's recomputation.
    """

    def forward_and_recompute_contexts() -> tuple[
        contextlib.AbstractContextManager, contextlib.AbstractContextManager
    ]:
        return contextlib.nullcontext(), attention_implementation(model, model.config._attn_implementation)

    kwargs = {"use_reentrant": False, "context_fn": forward_and_recompute_contexts}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x; the old name warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def completion_logits(model: nn.Module, batch: TrainBatch, share_prompts: bool = False) -> torch.Tensor:
    """[B, T, V] logits predicting each completion token (only those columns go through the LM head).

    With ``share_prompts``, rows whose prompts are identical (the n samples of a group) run their
    prompt through the model once: the prompt's keys/values are computed per distinct prompt, then
    indexed out to every row, and the completions attend to them. Same logits up to float rounding,
    same gradients (indexing sums the rows' gradients back into the shared prompt), and far fewer
    FLOPs when prompts are long next to completions.
    """
    with _short_sequence_attention(model, batch.input_ids.shape[1]):
        return _completion_logits(model, batch, share_prompts)


EAGER_ATTENTION_MAX_WIDTH = 160
"""Widest row (prompt + completion columns) for which the CPU bf16 training forward swaps SDPA for
eager attention (see ``_short_sequence_attention``)."""


@contextlib.contextmanager
def _short_sequence_attention(model: nn.Module, width: int) -> Iterator[None]:
    """Eager attention instead of SDPA for short rows on CPU under bf16 autocast.

    On CPU, SDPA's bf16 flash-attention backward is slow on short rows: for SmolLM2 on a 32 x 69
    batch it took ~0.6 s of a ~2 s backward, against ~0.05 s for eager's matmuls (eager's fp32
    softmax is as close to the float32 result as SDPA's). From ~192 keys on, the flash kernel wins
    (and eager's ``[B, H, T, T]`` weights grow), so longer rows, float32 training and accelerators
    keep SDPA. The switch is per call and restored after (a checkpointed layer's recomputation
    switches it again: ``enable_gradient_checkpointing``).
    """
    setter = getattr(model, "set_attn_implementation", None)
    config = getattr(model, "config", None)
    swap = (
        setter is not None
        and getattr(config, "_attn_implementation", None) == "sdpa"
        and width <= EAGER_ATTENTION_MAX_WIDTH
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and next(model.parameters()).device.type == "cpu"
    )
    with attention_implementation(model, "eager") if swap else contextlib.nullcontext():
        yield


def _completion_logits(model: nn.Module, batch: TrainBatch, share_prompts: bool) -> torch.Tensor:
    t = batch.completion_width
    if share_prompts:
        shared = _shared_prompt_logits(model, batch)
        if shared is not None:
            return shared
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=t + 1,
        use_cache=False,
    )
    return out.logits[:, :-1]


def _shared_prompt_logits(model: nn.Module, batch: TrainBatch) -> torch.Tensor | None:
    p = batch.prompt_width
    prompts = batch.input_ids[:, :p]
    unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    if unique.shape[0] == batch.num_rows:
        return None  # nothing shared: the plain forward is cheaper
    rows = torch.arange(batch.num_rows, device=inverse.device)
    first = torch.zeros(unique.shape[0], dtype=torch.long, device=inverse.device).scatter_(0, inverse, rows)
    cache = DynamicCache()
    prompt_out = model(
        input_ids=unique,
        attention_mask=batch.attention_mask[first, :p],
        position_ids=batch.position_ids[first, :p],
        logits_to_keep=1,
        use_cache=True,
        **{cache_kwarg(model): cache},
    )
    layers = getattr(cache, "layers", None)
    if not layers or not all(hasattr(layer, "keys") for layer in layers):
        return None  # a cache type we do not know how to expand
    for layer in layers:
        layer.keys = layer.keys.index_select(0, inverse)
        layer.values = layer.values.index_select(0, inverse)
    out = model(
        input_ids=batch.input_ids[:, p:],
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids[:, p:],
        logits_to_keep=batch.completion_width,
        use_cache=True,
        **{cache_kwarg(model): cache},
    )
    first_token = prompt_out.logits[:, -1:].index_select(0, inverse)  # predicts completion token 0
    return torch.cat([first_token, out.logits[:, :-1]], dim=1)
