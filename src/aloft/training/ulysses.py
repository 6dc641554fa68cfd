"""Ulysses sequence parallelism: one long packed sequence split across ranks, attention by heads.

Each of the P ranks of a sequence-parallel group holds ``N / P`` consecutive tokens of a packed row
(``aloft.training.packing``) and runs embeddings, norms, MLPs and the LM head on them alone. Around
attention, an all-to-all swaps the split: every rank gets the whole sequence for ``H / P`` heads,
attends (causally, within each packed sequence), and a second all-to-all swaps back. Activations per
rank shrink by P; the two all-to-alls per layer are the price. Both are autograd-aware
(``torch.distributed.nn``), so the backward runs the reverse exchanges.

Shapes (one packed row, so batch 1): ``x_local [1, H, n, D]`` with ``n = N / P`` tokens;
``x_heads [1, H / P, N, D]``. Key/value heads not divisible by P are repeated to the query heads first.
The parameters are replicated on every rank: sum their gradients over the group (``sum_gradients``),
as data parallelism does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from aloft.distributed.group import group_device
from aloft.models.compat import attention_implementation
from aloft.training.batch import TrainBatch
from aloft.training.packing import pack_rows, packed_attention
from aloft.training.strategies import SingleProcess, sum_over_group

ULYSSES_ATTENTION = "aloft_ulysses"
_active_group: list[dist.ProcessGroup | None] = []


def _group() -> dist.ProcessGroup | None:
    if not _active_group:
        raise RuntimeError("Ulysses attention runs only inside ulysses_token_logprobs")
    return _active_group[-1]


def seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """``[1, H, n, D]`` (my tokens, all heads) -> ``[1, H / P, P * n, D]`` (all tokens, my heads)."""
    size = dist.get_world_size(group)
    _, heads, n, dim = x.shape
    send = x.reshape(size, heads // size, n, dim).contiguous()  # chunk j: the heads rank j keeps
    received = dist_fn.all_to_all_single(torch.empty_like(send), send, group=group)  # [P, H/P, n, D]
    return received.permute(1, 0, 2, 3).reshape(1, heads // size, size * n, dim)


def heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """``[1, H / P, P * n, D]`` -> ``[1, H, n, D]``: the inverse of ``seq_to_heads``."""
    size = dist.get_world_size(group)
    _, my_heads, total, dim = x.shape
    n = total // size
    send = x.reshape(my_heads, size, n, dim).permute(1, 0, 2, 3).contiguous()  # chunk j: rank j's tokens
    received = dist_fn.all_to_all_single(torch.empty_like(send), send, group=group)  # [P, H/P, n, D]
    return received.reshape(1, size * my_heads, n, dim)


def ulysses_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """A transformers attention function: all-to-all, per-sequence causal attention, all-to-all back."""
    group = _group()
    size = dist.get_world_size(group)
    if query.shape[1] % size:
        raise ValueError(
            f"sequence parallelism over {size} ranks needs the heads ({query.shape[1]}) divisible by it"
        )
    if key.shape[1] % size:  # e.g. 3 key/value heads on 2 ranks: give every query head its own copy
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    q, k, v = (seq_to_heads(t, group) for t in (query, key, value))
    out, _ = packed_attention(module, q, k, v, None, dropout, scaling, cu_seq_lens_q=cu_seq_lens_q, **kwargs)
    return heads_to_seq(out.transpose(1, 2), group).transpose(1, 2).contiguous(), None  # [1, n, H, D]


AttentionInterface.register(ULYSSES_ATTENTION, ulysses_attention)
AttentionMaskInterface.register(ULYSSES_ATTENTION, lambda *args, **kwargs: None)


@dataclass(frozen=True)
class LocalTokens:
    """This rank's completion-token logprobs and where they sit in the batch's ``[B, T]`` layout."""

    logprobs: torch.Tensor
    """[k] float32, differentiable."""
    rows: torch.Tensor
    columns: torch.Tensor


@contextlib.contextmanager
def _ulysses_on(model: nn.Module, group: dist.ProcessGroup | None) -> Iterator[None]:
    _active_group.append(group)
    try:
        with attention_implementation(model, ULYSSES_ATTENTION):
            yield
    finally:
        _active_group.pop()


def ulysses_token_logprobs(
    model: nn.Module, batch: TrainBatch, group: dist.ProcessGroup | None = None, temperature: float = 1.0
) -> LocalTokens:
    """This rank's completion-token logprobs from a packed forward split over the group's ranks."""
    logits, targets, rows, columns = _local_logits(model, batch, group)
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1).gather(1, targets[:, None])[:, 0]
    # Keep the graph tied to the exchanges even with no token here: every rank must run the backward's
    # all-to-alls.
    return LocalTokens(logprobs=logprobs + 0.0 * logits.sum(), rows=rows, columns=columns)


def _local_logits(
    model: nn.Module, batch: TrainBatch, group: dist.ProcessGroup | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits [k, V], targets [k], rows [k], columns [k])`` of the completion tokens in this rank's span.

    The packed row is padded to a multiple of the group size with a filler sequence; each rank runs
    its ``N / P`` tokens with their global positions, and keeps the logits of the completion tokens
    that fall in its span.
    """
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    packed = pack_rows(batch)
    total = packed.input_ids.shape[1]
    filler = -total % size
    input_ids = torch.cat([packed.input_ids[0], torch.zeros(filler, dtype=torch.long)])
    positions = torch.cat([packed.position_ids[0], torch.arange(filler)])
    boundaries = (
        packed.boundaries if not filler else torch.cat([packed.boundaries, torch.tensor([total + filler])])
    )
    span = (total + filler) // size
    start = rank * span
    mine = (packed.logit_positions >= start) & (packed.logit_positions < start + span)
    device = next(model.parameters()).device
    with _ulysses_on(model, group):
        logits = model(
            input_ids=input_ids[start : start + span][None].to(device),
            position_ids=positions[start : start + span][None].to(device),
            logits_to_keep=(packed.logit_positions[mine] - start).to(device),
            cu_seq_lens_q=boundaries.to(device),
            use_cache=False,
        ).logits[0]  # [k, V]
    rows, columns = packed.rows[mine], packed.columns[mine]
    return logits, batch.completion_ids[rows, columns].to(device), rows, columns


def sum_gradients(model: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Sum the replicated parameters' gradients over the sequence-parallel group."""
    for parameter in model.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad, group=group)


def gather_token_values(
    values: torch.Tensor,
    rows: torch.Tensor,
    columns: torch.Tensor,
    shape: tuple[int, int],
    group: dist.ProcessGroup | None,
) -> torch.Tensor:
    """Every rank's per-token ``values [k]`` assembled into ``[B, T]`` on every rank (autograd-aware:
    the backward sums each rank's gradient into the rank that computed the value)."""
    size = dist.get_world_size(group)
    device = group_device(group)  # NCCL takes GPU tensors only
    counts = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(size)]
    dist.all_gather(counts, torch.tensor([values.numel()], device=device), group=group)
    most = max(int(c) for c in counts)
    pad = most - values.numel()
    padded = torch.cat([values, values.new_zeros(pad)])
    places = torch.stack(
        [torch.cat([rows, rows.new_zeros(pad)]), torch.cat([columns, columns.new_zeros(pad)])]
    ).to(device)
    all_values = dist_fn.all_gather(padded, group=group)
    all_places = [torch.empty_like(places) for _ in range(size)]
    dist.all_gather(all_places, places, group=group)
    out = values.new_zeros(shape)
    for count, piece, (piece_rows, piece_columns) in zip(counts, all_values, all_places):
        n = int(count)
        out = out.index_put((piece_rows[:n], piece_columns[:n]), piece[:n])
    return out


class Ulysses(SingleProcess):
    """A training strategy (``aloft.training.strategies``): every rank of the group holds the whole
    model (weights and optimizer state as in ``SingleProcess``) and runs every micro-batch, each on
    its share of the packed sequence.

    Each rank computes the full loss from the gathered logprobs, scaled by 1 / P: the gather's
    backward sums the P ranks' gradients, and ``before_step`` sums the parameters' gradients over
    the group, so the update equals the single-process one. Needs ``optim.packing``.
    """

    sequence_parallel = True

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("Ulysses needs a torch.distributed process group (see aloft.distributed)")
        self.group = group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)

    def assign(self, micro_batches: list[list[int]], tokens: list[int]) -> list[tuple[list[int], float]]:
        return [(rows, 1.0 / self.world_size) for rows in micro_batches]

    def reduce_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return sum_over_group(totals, self.group)

    def before_step(self, model: nn.Module) -> None:
        sum_gradients(model, self.group)

    def logprobs_and_entropy(
        self, model: nn.Module, batch: TrainBatch, temperature: float, entropy_grad: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, T]`` logprobs and entropy of ``batch``'s completion tokens, the same on every rank."""
        from aloft.algorithms.logits import logprobs_and_entropy_from_logits

        logits, targets, rows, columns = _local_logits(model, batch, self.group)
        logprobs, entropy = logprobs_and_entropy_from_logits(
            logits[None], targets[None], temperature=temperature, entropy_grad=entropy_grad
        )
        logprobs = logprobs[0] + 0.0 * logits.sum()  # every rank runs the backward's all-to-alls
        shape = (batch.num_rows, batch.completion_width)
        return (
            gather_token_values(logprobs, rows, columns, shape, self.group),
            gather_token_values(entropy[0], rows, columns, shape, self.group),
        )
