"""A decode step of a Llama-family model in few torch ops: the hf engine's per-token forward on CPU.

A decode step runs one new token per row through the model. At the batch sizes a rollout decodes
(1 to 64 rows), transformers' forward is several thousand small torch ops a step (SmolLM2-135M:
about 180 a layer, most of them views, dtype casts, mask building and the shared-prefix attention's
merge), and on a CPU each op costs microseconds of dispatch whatever its size: measured on the 2-core
AVX2 EPYC, a 1-row SmolLM2 step took 92 ms of which its linears were 43 ms. ``DecodeStep`` computes
the same step from the model's own weights with about 40 ops a layer: the norms, linears, rotary
embedding and MLP as transformers' Llama code writes them (identical arithmetic), and attention
through ``aloft.inference.shared_prefix.decode_attention`` (the same attention, merged in fewer ops:
logits differ from transformers' by float rounding only, tested). The step's mask and rotary angles
are computed once per step, not once per layer.

Prefill and any request with more than one new token keep transformers' forward. Models other than
``SUPPORTED`` (or with parts this step does not reproduce) keep it for every step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, LlamaForCausalLM, PreTrainedModel, Qwen2ForCausalLM

from aloft.inference.prepacked import PrepackedLinear
from aloft.inference.shared_prefix import SegmentPlan, decode_attention
from aloft.models.compat import plain_causal_attention

SUPPORTED = (LlamaForCausalLM, Qwen2ForCausalLM)
"""Model classes whose decoder layer is: RMSNorm, q/k/v projections (biases allowed), rotary
embedding, causal attention, o projection, residual; RMSNorm, SiLU-gated MLP, residual."""

Linear = Callable[[torch.Tensor], torch.Tensor]


def decode_step_supported(model: nn.Module) -> bool:
    """Whether ``DecodeStep`` reproduces ``model``'s forward: one of ``SUPPORTED`` exactly, on CPU,
    with plain causal attention, SiLU MLPs, and its own modules in every place (plain or packed
    linears, the class's RMSNorm): a module swapped in (a LoRA layer injected in place, a quantized
    linear) computes something the step would not."""
    if type(model) not in SUPPORTED or next(model.parameters()).device.type != "cpu":
        return False
    config = model.config
    if config.hidden_act != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return False
    if not plain_causal_attention(config):
        return False
    inner = model.model
    linears = [model.lm_head]
    norms = [inner.norm]
    for layer in inner.layers:
        attention, mlp = layer.self_attn, layer.mlp
        linears += [attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj]
        linears += [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        norms += [layer.input_layernorm, layer.post_attention_layernorm]
    return (
        type(inner.embed_tokens) is nn.Embedding
        and all(type(linear) in (nn.Linear, PrepackedLinear) for linear in linears)
        and all(type(norm) is type(inner.norm) and type(norm).__name__.endswith("RMSNorm") for norm in norms)
    )


def _linear(module: nn.Linear) -> Linear:
    """The module's product without ``nn.Module.__call__`` (its packed oneDNN weight where it has one)."""
    weight, bias = module.weight, module.bias
    if isinstance(module, PrepackedLinear):
        packed = module._packed
        return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return lambda x: F.linear(x, weight, bias)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm's arithmetic: normalize in float32, scale in the model's dtype."""
    if x.dtype == torch.float32:  # the same ops less two casts that would do nothing (each op costs)
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    input_eps: float
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    scale: float
    post_norm: torch.Tensor
    post_eps: float
    gate: Linear
    up: Linear
    down: Linear


class DecodeStep:
    """``model``'s forward for one new token per row over shared-prefix attention (see the module doc).

    Holds references to the model's weights as they are when built (packed ones included): build it
    again after the weights change.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        if not decode_step_supported(model):
            raise ValueError(f"DecodeStep does not reproduce {type(model).__name__}; use the model's forward")
        inner, config = model.model, model.config
        self.embed = inner.embed_tokens.weight
        self.rotary = inner.rotary_emb
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.layers = [
            _Layer(
                input_norm=layer.input_layernorm.weight,
                input_eps=layer.input_layernorm.variance_epsilon,
                q=_linear(layer.self_attn.q_proj),
                k=_linear(layer.self_attn.k_proj),
                v=_linear(layer.self_attn.v_proj),
                o=_linear(layer.self_attn.o_proj),
                scale=layer.self_attn.scaling,
                post_norm=layer.post_attention_layernorm.weight,
                post_eps=layer.post_attention_layernorm.variance_epsilon,
                gate=_linear(layer.mlp.gate_proj),
                up=_linear(layer.mlp.up_proj),
                down=_linear(layer.mlp.down_proj),
            )
            for layer in inner.layers
        ]
        self.norm, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.lm_head = _linear(model.lm_head)

    def __call__(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache,
        attention_mask: torch.Tensor,
        segments: SegmentPlan,
    ) -> torch.Tensor:
        """Next-token logits ``[B, V]`` after ``tokens [B]`` at ``positions [B]``.

        ``cache``: each row's own keys and values (layers that append in place; the new token's are
        appended here), ``attention_mask [B, W]``: 1 over the real columns of the cache including the
        new token, ``segments``: the rows' shared prefixes.
        """
        rows, heads, kv_heads, half = tokens.shape[0], self.heads, self.kv_heads, self.head_dim // 2
        hidden = F.embedding(tokens, self.embed)  # [B, C]
        cos, sin = self.rotary(hidden, positions[:, None])  # [B, 1, D]
        # Rotary as transformers applies it, x * cos + rotate_half(x) * sin, with rotate_half(x) * sin
        # written as the swapped halves of x times sin with its first half negated (the same products).
        cos = cos.view(rows, 1, 2, half)
        sin = sin.view(rows, 1, 2, half) * sin.new_tensor([-1.0, 1.0]).view(1, 1, 2, 1)
        private_bias = torch.zeros(attention_mask.shape, dtype=torch.float32, device=hidden.device)
        private_bias = private_bias.masked_fill_(attention_mask == 0, float("-inf"))[:, None, None, :]
        for index, layer in enumerate(self.layers):
            x = _rms_norm(hidden, layer.input_norm, layer.input_eps)
            query = layer.q(x).view(rows, heads, 2, half)
            key = layer.k(x).view(rows, kv_heads, 2, half)
            query = query * cos + query.flip(2) * sin
            key = key * cos + key.flip(2) * sin
            keys, values = cache.layers[index].update(
                key.view(rows, kv_heads, 1, 2 * half), layer.v(x).view(rows, kv_heads, 1, 2 * half)
            )  # [B, H_kv, W, D]
            attended = decode_attention(
                query.view(rows, heads, 2 * half), keys, values, private_bias, segments, index, layer.scale
            )
            hidden = hidden + layer.o(attended.view(rows, heads * 2 * half))
            x = _rms_norm(hidden, layer.post_norm, layer.post_eps)
            hidden = hidden + layer.down(F.silu(layer.gate(x), inplace=True).mul_(layer.up(x)))
        return self.lm_head(_rms_norm(hidden, self.norm, self.norm_eps))
