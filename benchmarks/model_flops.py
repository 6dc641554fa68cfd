"""Model FLOPs of a training update, for the benchmarks that report achieved FLOP/s against a measured
matmul peak (``grpo_step_vs_trl.py``, ``limits.py``).

A share of a measured peak is only honest if its FLOPs are ones the update computed. The trainer's
packed update lays a group's shared prompt out once per micro-batch (``aloft.training.packing``), so
counting every row's prompt tokens counts work that never ran: on a GRPO batch of 4 samples a
prompt, that put SmolLM2's "% matmul peak" above 100%. ``packed_update_flops`` counts from the very
layout the trainer runs (``pack_rows``), and gives the per-row count next to it, labelled as what it
is: useful work as if every row ran its own prompt, not a share of anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass
class ModelShape:
    body_params: int
    """Parameters outside the embedding and LM head."""
    head_params: int
    """V * d."""
    layers: int
    heads: int
    head_dim: int
    kv_heads: int

    @classmethod
    def of(cls, model: Any) -> ModelShape:
        config = model.config
        embedding = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        matrices = {id(embedding): embedding.numel(), id(head): head.numel()}  # tied: counted once
        total = sum(p.numel() for p in model.parameters())
        heads = config.num_attention_heads
        return cls(
            body_params=total - sum(matrices.values()),
            head_params=head.numel(),
            layers=config.num_hidden_layers,
            heads=heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        )

    def attention_flops_per_key(self) -> int:
        """Forward FLOPs of one query attending to one key, all layers (scores and weighted sum)."""
        return 4 * self.layers * self.heads * self.head_dim

    def kv_bytes_per_position(self, bytes_per_value: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value

    def train_flops(self, positions: int, head_rows: int, keys: int) -> float:
        """Forward + backward (3 x forward) FLOPs of ``positions`` token positions through the body,
        ``head_rows`` of them through the LM head, and ``keys`` (query, key) pairs of attention."""
        return float(
            6 * self.body_params * positions
            + 6 * self.head_params * head_rows
            + 3 * self.attention_flops_per_key() * keys
        )


@dataclasses.dataclass(frozen=True)
class UpdateFlops:
    """One update's FLOPs, computed and as if unshared (see ``packed_update_flops``)."""

    computed: float
    """FLOPs the packed update runs: each distinct prompt once per micro-batch, every completion."""
    unshared: float
    """FLOPs of the same rows as if each ran its own copy of its prompt: useful work per row, more than
    was computed wherever a prompt is shared. Not a share of any peak."""
    positions: int
    """Token positions the packed forwards run (what ``computed`` counts through the body)."""
    row_tokens: int
    """Prompt + completion tokens summed over the rows (what ``unshared`` counts)."""


def packed_update_flops(
    shape: ModelShape,
    batch: Any,
    micro_batches: Sequence[Sequence[int]],
    share_prompts: bool = True,
    min_shared_prefix: int = 0,
) -> UpdateFlops:
    """FLOPs of one packed forward + backward over ``batch`` (a ``TrainBatch``, rows ``[B, P + T]``)
    cut into ``micro_batches`` (row indices, as ``MicroBatching.split`` gives them), sharing prompts
    as the trainer did (``share_prompts``, ``min_shared_prefix``: ``pack_rows``'s).

    Each micro-batch is laid out by ``aloft.training.packing.pack_rows``, the trainer's own packing,
    so the count is what runs: a sequence of L tokens that continues a shared prompt of P tokens
    (``PackedRows.prefixes``) costs L positions and ``L P + L (L + 1) / 2`` attended keys, every
    other sequence (a prompt and its completion) ``L (L + 1) / 2`` keys. Then::

        computed = 6 N_body positions + 6 V d completion tokens + 12 L H h_d keys

    (``ModelShape.train_flops``: backward = 2 x forward, so 3 x the forward's 2 N_body per token,
    2 V d per LM-head row, 4 L H h_d per key). ``unshared`` counts every row as its own sequence, so
    ``unshared - computed`` is, over the rows whose prompt was shared, exactly that prompt's FLOPs,
    ``6 N_body p + 12 L H h_d p (p + 1) / 2``. A group split over two micro-batches has its prompt
    laid out in each, and counted in each.

    Not counted, so that a share of a peak errs low: the embedding lookup, the LM head's filler rows
    (fewer than ``LOGIT_ROW`` per micro-batch, run to keep the logits' shape), masked-out attention
    a kernel may compute anyway, norms, softmax and other elementwise work, and the optimizer.
    """
    from aloft.training.packing import pack_rows

    computed, positions = 0.0, 0
    for rows in micro_batches:
        packed = pack_rows(batch.select(list(rows)), share_prompts, min_shared_prefix)
        lengths = packed.boundaries.diff()  # [S]
        prefixes = packed.prefixes[:, 1] - packed.prefixes[:, 0]  # [S]
        keys = int((lengths * prefixes + lengths * (lengths + 1) // 2).sum())
        count = packed.input_ids.shape[1]
        computed += shape.train_flops(count, packed.logit_positions.numel(), keys)
        positions += count
    p = batch.prompt_width
    prompts = batch.attention_mask[:, :p].sum(dim=1)  # [B]
    completions = batch.attention_mask[:, p:].sum(dim=1)  # [B]
    tokens = prompts + completions
    keys = int((tokens * (tokens + 1) // 2).sum())
    unshared = shape.train_flops(int(tokens.sum()), int(completions.sum()), keys)
    return UpdateFlops(
        computed=computed, unshared=unshared, positions=positions, row_tokens=int(tokens.sum())
    )


def peak_share(flops_per_s: float, peak_flops_per_s: float, digits: int = 1) -> str:
    """``flops_per_s`` as a share of a measured peak. A rate above the peak is no share of anything:
    the FLOPs are ones that ran, so the probe that measured the "peak" ran slower than the update's
    own matmuls and bounds nothing. Then the cell says so (``n/a: probe below the update``) rather
    than print a share over 100% (see the table's note)."""
    share = flops_per_s / peak_flops_per_s
    return f"{share:.{digits}%}" if share <= 1 else "n/a: probe below the update"
