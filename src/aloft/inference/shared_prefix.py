"""Shared-prefix ("cascade") attention: a prompt's KV cache stored once for every row that continues it.

The n samples of a GRPO group continue one prompt. Copying the prompt's keys and values into each
row's cache makes every decode step read them n times: at 1,000-token prompts that is most of what a
step reads (SmolLM2, 64 rows: ~3 GB of fp32 KV per step, against 0.5 GB of weights). Here each row's
cache holds only its own tokens (the *private* part, an ordinary transformers cache layer) and points
at one *segment*: a prefix whose keys and values are stored once, per layer, for all rows on it.

Attention of a row's queries is split over the two parts and merged exactly with their log-sum-exps
(as FlashAttention merges blocks)::

    out = (exp(lse_s) * out_s + exp(lse_p) * out_p) / (exp(lse_s) + exp(lse_p))

- segment part: the queries of all rows on a segment are stacked into one batch entry (grouped-query
  heads folded in too), so one matmul reads the segment's keys once for all of them. Every query sees
  the whole segment (it comes before all of the row's own tokens): only the segment's padding is masked.
- private part: the row's own tokens, causally masked by transformers' usual (sdpa) mask.

``SegmentBatch`` holds the segments of the running batch; ``shared_prefix_attention`` is registered
with transformers as ``"aloft_shared_prefix"`` and falls back to plain SDPA when a forward passes no
``segments`` (so the engine's model can keep it switched on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from aloft.models.compat import plain_causal_attention

SHARED_PREFIX_ATTENTION = "aloft_shared_prefix"


def shared_prefix_supported(model: nn.Module) -> bool:
    """Whether the model's attention is plain causal softmax attention that ``shared_prefix_attention``
    reproduces (``aloft.models.compat.plain_causal_attention``); other models keep one full cache per row."""
    config = getattr(model, "config", None)
    return config is not None and hasattr(model, "set_attn_implementation") and plain_causal_attention(config)


@dataclass
class SegmentBatch:
    """The shared prefixes of a running batch and which rows continue which.

    Shapes: G segments padded to P positions (left padding), B rows, L layers, V vocabulary.
    """

    keys: list[torch.Tensor]
    """Per layer ``[G, H_kv, P, D]``: each segment's keys, right-aligned."""
    values: list[torch.Tensor]
    """Per layer ``[G, H_kv, P, D]``."""
    lengths: torch.Tensor
    """``[G]`` real positions of each segment (the last ``lengths[g]`` columns)."""
    tokens: list[tuple[int, ...]]
    """Each segment's token ids."""
    logits: list[torch.Tensor]
    """Each segment's ``[V]`` next-token logits (on CPU): what a row that adds nothing to it samples from."""
    row_segment: torch.Tensor
    """``[B]`` the segment each row continues."""

    @property
    def width(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def __len__(self) -> int:
        return len(self.tokens)

    def index(self, tokens: tuple[int, ...]) -> int | None:
        """The position of the segment with these tokens, if it is in the batch."""
        try:
            return self.tokens.index(tokens)
        except ValueError:
            return None

    def layer_states(self, segment: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One segment's keys and values without padding: per layer ``[H_kv, lengths[g], D]`` views."""
        length = int(self.lengths[segment])
        return (
            [k[segment, :, k.shape[2] - length :] for k in self.keys],
            [v[segment, :, v.shape[2] - length :] for v in self.values],
        )

    def add_segments(self, other: SegmentBatch) -> list[int]:
        """Add ``other``'s segments (not its rows); returns where each went (a known one keeps its place)."""
        places = [self.index(tokens) for tokens in other.tokens]
        new = [g for g, place in enumerate(places) if place is None]
        if new:
            keep = torch.tensor(new, dtype=torch.long)
            width = max(self.width, int(other.lengths[keep].max()))
            pick = keep.to(other.keys[0].device)
            self.keys = [
                torch.cat([_left_pad(a, width), _left_pad(b.index_select(0, pick), width)])
                for a, b in zip(self.keys, other.keys)
            ]
            self.values = [
                torch.cat([_left_pad(a, width), _left_pad(b.index_select(0, pick), width)])
                for a, b in zip(self.values, other.values)
            ]
            for g in new:
                places[g] = len(self.tokens)
                self.tokens.append(other.tokens[g])
                self.logits.append(other.logits[g])
            self.lengths = torch.cat([self.lengths, other.lengths[keep]])
        return [int(place) for place in places]

    def add_rows(self, segments: list[int]) -> None:
        self.row_segment = torch.cat([self.row_segment, torch.tensor(segments, dtype=torch.long)])

    def keep_rows(
        self, order: list[int]
    ) -> list[tuple[tuple[int, ...], list[torch.Tensor], list[torch.Tensor], torch.Tensor]]:
        """Keep rows ``order`` (old indices, in their new order); drop the segments no row continues any more.

        Returns each dropped segment as ``(tokens, keys, values, logits)``, states per layer ``[H_kv, L, D]``
        (views of the old buffers: copy what you keep).
        """
        self.row_segment = self.row_segment[torch.tensor(order, dtype=torch.long)]
        live = sorted(set(self.row_segment.tolist()))
        if len(live) == len(self):
            return []
        dropped = [
            (self.tokens[g], *self.layer_states(g), self.logits[g])
            for g in sorted(set(range(len(self))) - set(live))
        ]
        if live:
            self.select_segments(live)
        return dropped

    @classmethod
    def of_one(
        cls,
        tokens: tuple[int, ...],
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        logits: torch.Tensor,
    ) -> SegmentBatch:
        """A batch of one segment (states per layer ``[H_kv, L, D]``) and no rows."""
        return cls(
            keys=[k[None] for k in keys],
            values=[v[None] for v in values],
            lengths=torch.tensor([len(tokens)]),
            tokens=[tokens],
            logits=[logits],
            row_segment=torch.zeros((0,), dtype=torch.long),
        )

    def select_segments(self, live: list[int]) -> None:
        """Keep only segments ``live`` (old positions, ascending) and renumber the rows' references."""
        keep = torch.tensor(live, dtype=torch.long)
        renumber = torch.full((len(self),), -1, dtype=torch.long)
        renumber[keep] = torch.arange(len(live))
        self.row_segment = renumber[self.row_segment]
        self.lengths = self.lengths[keep]
        self.tokens = [self.tokens[g] for g in live]
        self.logits = [self.logits[g] for g in live]
        width = int(self.lengths.max()) if live else 0  # padding no segment needs any more is cut too
        index = keep.to(self.keys[0].device)
        self.keys = [k.index_select(0, index)[:, :, k.shape[2] - width :] for k in self.keys]
        self.values = [v.index_select(0, index)[:, :, v.shape[2] - width :] for v in self.values]

    def plan(self, dtype: torch.dtype, row_segment: torch.Tensor | None = None) -> SegmentPlan:
        """What every layer of a forward needs: query slots and the segments' key mask.

        ``row_segment``: the segment of each row of that forward (default: the batch's rows).
        """
        segments = (self.row_segment if row_segment is None else row_segment).tolist()
        used = sorted(set(segments))
        # A forward for a few joining rows reads only their segments (a copy of those), not every one.
        subset = None if len(used) == len(self) else used
        local = {g: i for i, g in enumerate(used)}
        per_segment = max(segments.count(g) for g in used)
        counts: dict[int, int] = {}
        slots = []
        for g in segments:
            rank = counts.get(g, 0)
            counts[g] = rank + 1
            slots.append(local[g] * per_segment + rank)
        device = self.keys[0].device
        lengths = self.lengths if subset is None else self.lengths[torch.tensor(used)]
        width = int(lengths.max())
        columns = torch.arange(width, device=device)
        padding = columns[None, :] < (width - lengths.to(device))[:, None]  # [G', P']
        key_bias = torch.zeros(padding.shape, dtype=dtype, device=device).masked_fill_(padding, float("-inf"))
        return SegmentPlan(
            batch=self,
            slots=torch.tensor(slots, dtype=torch.long, device=device),
            rows_per_segment=per_segment,
            slot_rows=(
                torch.tensor(
                    sorted(range(len(slots)), key=slots.__getitem__), dtype=torch.long, device=device
                )
                if per_segment == 1
                else None
            ),
            key_bias=key_bias[:, None, None, :],
            subset=None if subset is None else torch.tensor(subset, dtype=torch.long, device=device),
            width=width,
        )

    def plan_states(self, plan: SegmentPlan, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``[G', H_kv, P', D]`` keys and values of the segments a forward reads, at one layer."""
        keys, values = self.keys[layer], self.values[layer]
        if plan.subset is not None:
            keys, values = keys.index_select(0, plan.subset), values.index_select(0, plan.subset)
        return keys[:, :, keys.shape[2] - plan.width :], values[:, :, values.shape[2] - plan.width :]


@dataclass(frozen=True)
class SegmentPlan:
    """Per-forward view of a ``SegmentBatch`` handed to the attention of every layer."""

    batch: SegmentBatch
    slots: torch.Tensor
    """``[B]`` where each row's queries go in the ``[G * R]`` grid of segment query slots."""
    rows_per_segment: int
    """R: the most rows on one segment (slots of segments with fewer rows stay empty)."""
    slot_rows: torch.Tensor | None
    """With R = 1 (every segment continued by one row): ``[B]`` the row in each slot, else None."""
    key_bias: torch.Tensor
    """``[G', 1, 1, P']`` additive mask of the padding of the segments read."""
    subset: torch.Tensor | None
    """The segments this forward reads (None: all of the batch's)."""
    width: int
    """P': the longest of them."""

    @property
    def segments_read(self) -> int:
        return self.key_bias.shape[0]


def _left_pad(states: torch.Tensor, width: int) -> torch.Tensor:
    """``[G, H, W, D]`` -> ``[G, H, width, D]`` with zero columns on the left."""
    return torch.nn.functional.pad(states, (0, 0, width - states.shape[-2], 0))


def attention_with_lse(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
    *,
    flash: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its log-sum-exp: ``([N, H, Q, D] in query's dtype, [N, H, Q] float32)``.

    ``bias``: additive mask broadcastable to ``[N, H, Q, K]`` (0 / -inf); a query that sees no key gets
    zeros. On CPU, ``flash`` (and any half precision) runs SDPA's flash kernel: float32 accumulation,
    keys read once per block of queries, 1.5x faster than the matmuls on 24 queries x 1,024 keys. Not
    by default in float32: its result for a batch entry depends on where the entry's keys sit in memory
    (two identical rows of one batch differed by 1e-7), and identical requests must get identical
    logprobs. Elsewhere plain float32 matmuls.
    """
    if query.device.type == "cpu" and (flash or query.dtype in (torch.bfloat16, torch.float16)):
        if bias is not None:
            bias = bias.to(query.dtype)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, False, attn_mask=bias, scale=scale
        )
        return out, lse
    scores = (query.float() @ key.float().transpose(-1, -2)).mul_(scale)  # [N, H, Q, K]
    if bias is not None:
        scores += bias.float()
    lse = torch.logsumexp(scores, dim=-1)
    # A query that sees no key (padding) gets zeros, not NaN: -inf - -inf would be NaN.
    weights = scores.sub_(lse.clamp(min=torch.finfo(torch.float32).min)[..., None]).exp_()
    return (weights @ value.float()).to(query.dtype), lse


def segment_attention(
    folded: torch.Tensor, plan: SegmentPlan, layer: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's queries over its segment at ``layer``: ``([B, H_kv, Q, D], [B, H_kv, Q] float32 lse)``.

    ``folded [B, H_kv, Q, D]``: a row's queries with grouped-query heads folded in (Q = groups x new
    tokens). The queries of all rows on a segment are stacked into one batch entry of the attention
    call (``[G', H_kv, R * Q, D]``, empty slots zero), so the segment's keys are read once for all.
    """
    rows, kv_heads, queries, dim = folded.shape
    count, per_segment = plan.segments_read, plan.rows_per_segment
    shared_keys, shared_values = plan.batch.plan_states(plan, layer)
    if plan.slot_rows is not None:  # one row per segment (distinct prompts): the rows, reordered
        stacked = folded.index_select(0, plan.slot_rows)
        out, lse = attention_with_lse(stacked, shared_keys, shared_values, plan.key_bias, scale, flash=True)
        return out.index_select(0, plan.slots), lse.index_select(0, plan.slots)
    slots = folded.new_zeros((count * per_segment, kv_heads, queries, dim))
    slots[plan.slots] = folded
    stacked = (
        slots.view(count, per_segment, kv_heads, queries, dim)
        .transpose(1, 2)
        .reshape(count, kv_heads, per_segment * queries, dim)
    )
    # Identical rows share a segment, i.e. one batch entry of this call: the flash kernel is safe here.
    out, lse = attention_with_lse(stacked, shared_keys, shared_values, plan.key_bias, scale, flash=True)
    out = (
        out.view(count, kv_heads, per_segment, queries, dim)
        .transpose(1, 2)
        .reshape(-1, kv_heads, queries, dim)[plan.slots]
    )
    lse = lse.reshape(count, kv_heads, per_segment, queries).transpose(1, 2).reshape(-1, kv_heads, queries)
    return out, lse[plan.slots]


def decode_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    private_bias: torch.Tensor,
    plan: SegmentPlan,
    layer: int,
    scale: float,
) -> torch.Tensor:
    """Shared-prefix attention of one new token per row (a decode step), in few ops: ``[B, H, D]``.

    ``query [B, H, D]`` (rotary applied), ``keys`` / ``values [B, H_kv, W, D]``: each row's own cache
    including the new token, ``private_bias [B, 1, 1, W]`` float32, 0 over real columns and -inf over
    padding. The segment part is ``segment_attention``'s; the segment then joins the softmax over the
    row's own tokens as one more key whose logit is its log-sum-exp and whose value is its attention
    output: the same result as ``shared_prefix_attention``'s log-sum-exp merge, in fewer ops (the
    row's own newest token is never masked, so the largest logit is finite).
    """
    rows, heads, dim = query.shape
    kv_heads = keys.shape[1]
    folded = query.view(rows, kv_heads, heads // kv_heads, dim)  # grouped-query heads as extra queries
    out_shared, lse_shared = segment_attention(folded, plan, layer, scale)
    lse_shared = lse_shared[..., None]  # [B, H_kv, groups, 1]
    scores = (
        (folded.float() @ keys.float().transpose(-1, -2)).mul_(scale).add_(private_bias)
    )  # [B, H_kv, g, W]
    top = torch.maximum(scores.amax(dim=-1, keepdim=True), lse_shared)
    weights = scores.sub_(top).exp_()
    shared_weight = lse_shared.sub(top).exp_()
    total = weights.sum(dim=-1, keepdim=True).add_(shared_weight)
    out = (weights @ values.float()).add_(out_shared.float() * shared_weight).div_(total)
    return out.to(query.dtype).view(rows, heads, dim)


def shared_prefix_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    segments: SegmentPlan | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention over a segment (shared prefix) and the row's own cache; ``[B, n, H, D]`` like any attention.

    ``query [B, H, n, D]`` (n new tokens per row, left-padded), ``key`` / ``value [B, H_kv, W, D]``: the
    private cache including the new tokens, ``attention_mask``: transformers' sdpa mask over it (bool
    ``[B, 1, n, W]``, or None when nothing is masked).
    """
    if segments is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if dropout:
        raise ValueError("shared-prefix attention is for inference: dropout must be 0")
    for name in ("softcap", "s_aux", "sliding_window"):
        if kwargs.get(name) is not None:
            raise ValueError(
                f"shared-prefix attention cannot apply {name}; the engine must not use it for this model"
            )
    rows, heads, new, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else 1 / math.sqrt(dim)
    # Grouped-query heads as extra queries of their key/value head: [B, H_kv, groups * n, D]; index g * n + i.
    folded = query.reshape(rows, kv_heads, groups * new, dim)

    if attention_mask is None:
        private_bias = None
        if new > 1:  # transformers drops the mask when plain causal attention over the new tokens is meant
            causal = torch.ones(new, key.shape[2], dtype=torch.bool, device=query.device).tril_(
                key.shape[2] - new
            )
            private_bias = torch.zeros(causal.shape, dtype=query.dtype, device=query.device)
            private_bias.masked_fill_(~causal, float("-inf"))
            private_bias = private_bias.repeat(groups, 1)[None, None]
    else:
        allowed = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        private_bias = torch.zeros(allowed.shape, dtype=query.dtype, device=query.device)
        private_bias.masked_fill_(~allowed, float("-inf"))
        if allowed.shape[2] > 1:
            private_bias = private_bias.repeat(1, 1, groups, 1)
    out_private, lse_private = attention_with_lse(folded, key, value, private_bias, scale)
    out_shared, lse_shared = segment_attention(folded, segments, module.layer_idx, scale)

    lse = torch.logaddexp(lse_private, lse_shared)
    out = (
        out_private.float() * torch.exp(lse_private - lse)[..., None]
        + out_shared.float() * torch.exp(lse_shared - lse)[..., None]
    )
    # [B, H_kv, groups * n, D] -> [B, n, H, D]
    out = out.to(query.dtype).view(rows, heads, new, dim).transpose(1, 2).contiguous()
    return out, None


AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)
AttentionMaskInterface.register(SHARED_PREFIX_ATTENTION, sdpa_mask)
