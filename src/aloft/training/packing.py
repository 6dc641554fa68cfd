"""Sequence packing: a micro-batch's rows laid end to end in one row, with no padding.

A padded micro-batch costs ``B x (P + T)`` token positions (widest prompt plus longest completion), a
packed one only the real tokens. With completion lengths spread over 8..256, half of the padded
positions are padding. Layout of a packed micro-batch (three rows)::

    input_ids:     [a0 a1 a2 a3 | b0 b1 | c0 c1 c2]     shape [1, N], N = real tokens
    position_ids:  [ 0  1  2  3 |  0  1 |  0  1  2]     restart at every row

With ``share_prompts`` (the trainer's default, ``optim.share_prompts``), rows whose prompts are
identical (a group's n samples) share one copy of it: the first row is laid out whole, each later
one only as its completion, positioned after the prompt and attending to the first row's prompt
tokens as a prefix (``PackedRows.prefixes``)::

    input_ids:     [p0 p1 a0 a1 | b0 b1 b2 | q0 c0]     rows a, b share prompt p0 p1
    position_ids:  [ 0  1  2  3 |  2  3  4 |  0  1]
    prefixes:      [ -    -     | (0, 2)   |  -   ]     b also attends to positions 0..1

With ``min_shared_prefix`` > 0 as well, a row whose prompt differs from every earlier one but begins
like one of them (a long system message before each question, a schema before each question on one
database) is laid out from where the two differ, and attends to the earlier sequence's first tokens
as its prefix, when they share that many tokens or more. A prefix is always the first positions of an
earlier sequence *counted with that sequence's own prefix* (its logical positions), so beginnings
nest: a third prompt can share the second's beginning, which shares the first's.

Attention runs sequence by sequence (``packed_attention``, registered with transformers as
``"aloft_packed"`` and switched on for the packed forward only): each sequence attends causally to
itself, so no token sees another row and attention costs the sum of squared lengths, not the square
of the packed length (a dense block-diagonal mask over N = 2000 tokens cost SmolLM2 as much as all
its linear layers). Logits equal the padded ones up to float rounding. Only the positions that
predict completion tokens go through the LM head (``logits_to_keep`` as an index tensor), and they
are scattered back to the ``[B, T]`` layout the losses use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from aloft.distributed.weight_sync import consecutive_chunks
from aloft.models.compat import attention_implementation
from aloft.training.batch import TrainBatch, split_rows


@dataclass(frozen=True)
class PackedRows:
    """One packed micro-batch and where its completion logits go."""

    input_ids: torch.Tensor
    """[1, N] every row's prompt and completion tokens, end to end (a shared prompt once)."""
    position_ids: torch.Tensor
    """[1, N] positions restarting at 0 for every row (after the prompt for a prompt-sharing row)."""
    logit_positions: torch.Tensor
    """[K] positions whose logits predict a completion token (K = real completion tokens)."""
    rows: torch.Tensor
    """[K] the row of each kept logit in the [B, T] layout."""
    columns: torch.Tensor
    """[K] its completion column."""
    boundaries: torch.Tensor
    """[S + 1] where each sequence starts in the packed row, then N."""
    prefixes: torch.Tensor
    """[S, 2] the shared beginning each sequence also attends to: the start of the earlier sequence
    holding it, and that start + the positions shared, counted with the holder's own prefix
    (start == end: none)."""


def pack_rows(batch: TrainBatch, share_prompts: bool = False, min_shared_prefix: int = 0) -> PackedRows:
    """Lay the real tokens of every row of ``batch`` end to end (see the module docstring).

    ``min_shared_prefix``: with ``share_prompts``, the fewest tokens a prompt must share with an
    earlier, different one to attend to its beginning instead of laying it out again (0: only
    identical prompts share)."""
    p = batch.prompt_width
    prompt_mask = batch.attention_mask[:, :p].bool()
    completion_lengths = batch.attention_mask[:, p:].sum(dim=1).tolist()
    ids, positions, logit_positions, rows, columns = [], [], [], [], []
    start, boundaries, prefixes = 0, [0], []
    # A laid-out prompt -> (its sequence's start, start + prompt length, the packed position of
    # its last token): the span its later samples attend to, and where their first token's logits are.
    prompt_spans: dict[tuple[int, ...], tuple[int, int, int]] = {}
    laid_prompts: list[tuple[int, torch.Tensor]] = []  # (sequence start, its whole prompt)
    for row, completion_length in enumerate(completion_lengths):
        prompt = batch.input_ids[row, :p][prompt_mask[row]]
        if not len(prompt):
            raise ValueError(
                f"row {row} has an empty prompt: no position predicts its first token; give it one"
            )
        completion = batch.input_ids[row, p : p + completion_length]
        key = tuple(prompt.tolist())
        known = prompt_spans.get(key) if share_prompts else None
        if known is None:
            holder, shared = (
                _longest_shared_beginning(prompt, laid_prompts, min_shared_prefix)
                if share_prompts and min_shared_prefix > 0
                else (0, 0)
            )
            own_prompt = prompt[shared:]
            sequence, offset = torch.cat([own_prompt, completion]), shared
            prefix = (holder, holder + shared) if shared else (0, 0)
            last = start + len(own_prompt) - 1
            prompt_spans[key] = (start, start + len(prompt), last)
            laid_prompts.append((start, prompt))
            # Completion token t is predicted by the logits at the token before it.
            predicting = last + torch.arange(completion_length)
        elif not completion_length:
            continue  # a sharing row with nothing to lay out
        else:
            holder, end, last = known
            sequence, offset, prefix = completion, len(prompt), (holder, end)
            # Token 0 is predicted by the shared prompt's last position, token t by completion token t - 1.
            predicting = torch.cat([torch.tensor([last]), start + torch.arange(completion_length - 1)])
        ids.append(sequence)
        positions.append(offset + torch.arange(len(sequence)))
        logit_positions.append(predicting)
        rows.append(torch.full((completion_length,), row))
        columns.append(torch.arange(completion_length))
        start += len(sequence)
        boundaries.append(start)
        prefixes.append(prefix)
    return PackedRows(
        input_ids=torch.cat(ids)[None],
        position_ids=torch.cat(positions)[None],
        logit_positions=torch.cat(logit_positions),
        rows=torch.cat(rows),
        columns=torch.cat(columns),
        boundaries=torch.tensor(boundaries),
        prefixes=torch.tensor(prefixes, dtype=torch.long).view(-1, 2),
    )


def _longest_shared_beginning(
    prompt: torch.Tensor, laid: list[tuple[int, torch.Tensor]], least: int
) -> tuple[int, int]:
    """``(start of the laid-out sequence, tokens shared)`` for the earlier prompt that begins most
    like ``prompt`` (``[L]``), when they share ``least`` tokens or more; else ``(0, 0)``. At least
    one token of ``prompt`` stays its own: its last position predicts the completion's first token."""
    best_start, best = 0, 0
    for start, other in laid:
        n = min(len(other), len(prompt) - 1)
        differ = (other[:n] != prompt[:n]).nonzero()
        shared = int(differ[0]) if len(differ) else n
        if shared > best:
            best_start, best = start, shared
    return (best_start, best) if best >= least else (0, 0)


PACKED_ATTENTION = "aloft_packed"


def packed_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    packed_prefixes: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each packed sequence (a transformers attention function).

    ``query [1, H, N, D]``, ``key`` / ``value [1, H_kv, N, D]``; ``cu_seq_lens_q [S + 1]`` holds the
    sequences' start offsets and N; ``packed_prefixes [S, 2]`` (optional) the shared prompt span each
    sequence also attends to (an earlier sequence's start and its start + the logical positions
    shared, see ``pack_rows``). Returns ``[1, N, H, D]`` as transformers expects.
    """
    if cu_seq_lens_q is None:
        raise ValueError("packed attention needs cu_seq_lens_q (the packed sequences' boundaries)")
    bounds = cu_seq_lens_q.tolist()
    lengths = [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    spans = packed_prefixes.tolist() if packed_prefixes is not None else [(0, 0)] * len(lengths)
    longest = max((n + end - start for n, (start, end) in zip(lengths, spans)), default=0)
    _refuse_what_plain_causal_attention_cannot_do(module, longest, **kwargs)
    segment_at = {start: index for index, start in enumerate(bounds[:-1])}
    dropout = dropout if module.training else 0.0
    # One split per tensor, not a slice per sequence: the backward of S slices would build S zero-filled
    # [1, H, N, D] gradients and add them up (O(S N) per layer); split's backward concatenates once.
    queries, keys, values = (t.split(lengths, dim=2) for t in (query, key, value))
    outputs = []
    # The keys and values of each sequence a later one continues, at its logical positions (its
    # prefix's, then its own): a later sequence's prefix is the first of these, so beginnings nest.
    # Only those are kept (a no-grad pass frees every other sequence's after its attention).
    holders = {segment_at[start] for start, end in spans if end > start}
    logical_keys: dict[int, torch.Tensor] = {}
    logical_values: dict[int, torch.Tensor] = {}
    for index, (prefix_start, prefix_end) in enumerate(spans):
        k, v = keys[index], values[index]
        if prefix_end > prefix_start:  # a shared prompt: the first positions of an earlier sequence
            holder = segment_at[prefix_start]
            k = torch.cat([logical_keys[holder][:, :, : prefix_end - prefix_start], k], dim=2)
            v = torch.cat([logical_values[holder][:, :, : prefix_end - prefix_start], v], dim=2)
        if index in holders:
            logical_keys[index], logical_values[index] = k, v
        outputs.append(_causal_attention(queries[index], k, v, dropout, scaling))
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


def _refuse_what_plain_causal_attention_cannot_do(
    module: nn.Module,
    longest: int,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **_: object,
) -> None:
    """Stop (one line, with the fix) where the model's own attention is not plain causal softmax.

    Gemma-2's logit soft-capping and gpt-oss's attention sinks change every attention weight; a
    sliding window changes those of sequences longer than it. Packed attention does none of these,
    so it would train on silently different logits.
    """
    model = type(module).__name__
    if softcap is not None:
        raise ValueError(
            f"optim.packing: {model} soft-caps attention logits, which packing does not; turn it off"
        )
    if s_aux is not None:
        raise ValueError(f"optim.packing: {model} uses attention sinks, which packing does not; turn it off")
    if sliding_window is not None and longest > sliding_window:
        raise ValueError(
            f"optim.packing: a {longest}-token sequence is longer than {model}'s sliding window "
            f"({sliding_window}), which packing does not apply; turn it off or keep sequences within the window"
        )


EAGER_MAX_LENGTH = 160
"""Longest sequence whose CPU bf16 attention runs as plain matmuls: SDPA's flash backward is slower
on short rows (SmolLM2's shapes, 64 tokens: 1.25 ms vs 0.69 ms forward + backward; equal by ~300)."""


def _causal_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout: float, scaling: float | None
) -> torch.Tensor:
    """``[1, H, L, D]`` causal attention of one sequence (``key`` / ``value`` may have fewer heads).

    ``key`` / ``value [1, H_kv, P + L, D]`` may start with P prefix positions (a shared prompt) that
    every query sees; the causal mask is aligned to the last key (query i sees keys ``<= P + i``).
    """
    length, prefix = query.shape[2], key.shape[2] - query.shape[2]
    eager = (
        query.device.type == "cpu"
        and query.dtype == torch.bfloat16
        and length <= EAGER_MAX_LENGTH
        and not dropout
    )
    gqa = query.shape[1] != key.shape[1]
    if not eager and not prefix:
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=gqa
        )
    future = torch.ones(length, prefix + length, dtype=torch.bool, device=query.device).triu_(prefix + 1)
    # Plain matmuls need every head's keys; so does CUDA's SDPA, whose masked GQA is its slow math kernel.
    if gqa and (eager or query.device.type != "cpu"):
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        gqa = False
    if not eager:
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=~future, dropout_p=dropout, scale=scaling, enable_gqa=gqa
        )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = (query @ key.transpose(-1, -2)).float() * scale  # [1, H, L, P + L], softmax in float32
    weights = torch.softmax(scores.masked_fill_(future, float("-inf")), dim=-1).to(value.dtype)
    return weights @ value


def _no_mask(*args, **kwargs) -> None:
    return None  # packed_attention masks by construction


AttentionInterface.register(PACKED_ATTENTION, packed_attention)
AttentionMaskInterface.register(PACKED_ATTENTION, _no_mask)


@contextlib.contextmanager
def _packed_attention_on(model: nn.Module) -> Iterator[None]:
    """Switch ``model`` to ``packed_attention`` for one forward (and backward: autograd keeps the ops, and a
    checkpointed layer's recomputation switches it on again, see ``forward.enable_gradient_checkpointing``)."""
    config = getattr(model, "config", None)
    previous = getattr(config, "_attn_implementation", None)
    if previous is None or not hasattr(model, "set_attn_implementation"):
        raise ValueError(
            f"optim.packing needs a transformers model whose attention can be switched; {type(model).__name__} "
            "has none: turn optim.packing off"
        )
    with attention_implementation(model, PACKED_ATTENTION):
        yield


LOGIT_ROW = 64
"""Completion logits are returned in rows of this many tokens: the loss side upcasts one row at a time.
64 rather than 256: a float32 row over a 49k vocabulary is then 12.6 MB instead of 50 MB, which
glibc serves from its heap instead of fresh ``mmap`` pages that fault on first touch. On SmolLM2's
LM head plus the loss side for 2304 tokens (forward and backward): 0.50 s vs 0.64 s (48 rows:
0.84 s, 128: 0.56 s)."""


@dataclass(frozen=True)
class PackedLogits:
    """The completion logits of a packed forward, in rows of ``LOGIT_ROW`` tokens, and their targets."""

    logits: torch.Tensor
    """[R, LOGIT_ROW, V]: the K real completion tokens' logits in row-major order, then filler rows."""
    targets: torch.Tensor
    """[R, LOGIT_ROW] the completion token each logit predicts (0 on filler)."""
    packed: PackedRows
    shape: tuple[int, int]
    """[B, T] of the batch the values go back to."""

    def to_rows(self, values: torch.Tensor) -> torch.Tensor:
        """Per-token ``values [R, LOGIT_ROW]`` back in the batch layout ``[B, T]`` (0 on padding)."""
        kept = values.flatten()[: self.packed.rows.numel()]
        out = values.new_zeros(self.shape)
        return out.index_put((self.packed.rows.to(out.device), self.packed.columns.to(out.device)), kept)


def packed_completion_logits(
    model: nn.Module,
    batch: TrainBatch,
    share_prompts: bool = False,
    device: torch.device | None = None,
    min_shared_prefix: int = 0,
) -> PackedLogits:
    """The logits predicting each real completion token of ``batch``, from one packed forward on
    ``device`` (default: where the model's parameters are); sharing as ``pack_rows`` shares."""
    packed = pack_rows(batch, share_prompts, min_shared_prefix)
    device = device if device is not None else next(model.parameters()).device
    count = packed.logit_positions.numel()
    filler = -count % LOGIT_ROW
    # Filler slots repeat the last position: the LM head runs on < LOGIT_ROW extra rows, and the
    # logits come out already shaped for the per-row loss code.
    positions = torch.cat([packed.logit_positions, packed.logit_positions[-1:].expand(filler)])
    with _packed_attention_on(model):
        logits = model(
            input_ids=packed.input_ids.to(device),
            position_ids=packed.position_ids.to(device),
            logits_to_keep=positions.to(device),
            cu_seq_lens_q=packed.boundaries.to(device),
            packed_prefixes=packed.prefixes,
            use_cache=False,
        ).logits.squeeze(0)  # [K + filler, V]; a view (``[0]``'s backward would zero-fill a copy)
    targets = torch.zeros(count + filler, dtype=torch.long)
    targets[:count] = batch.completion_ids[packed.rows, packed.columns]
    return PackedLogits(
        logits=logits.view(-1, LOGIT_ROW, logits.shape[-1]),
        targets=targets.view(-1, LOGIT_ROW).to(device),
        packed=packed,
        shape=(batch.num_rows, batch.completion_width),
    )


@dataclass(frozen=True)
class MicroBatching:
    """How a batch's rows are cut into forward/backward chunks: a row count, or a token budget when packed."""

    rows: int = 8
    """Rows per micro-batch (padded)."""
    packing: bool = False
    """Pack each micro-batch into one row (``packed_completion_logits``) and cut by ``tokens`` instead."""
    tokens: int = 4096
    """With packing: most real tokens per micro-batch."""
    min_shared_prefix: int = 0
    """With packing and shared prompts: the fewest tokens a prompt must share with an earlier,
    different one to attend to that beginning instead of laying it out again (``pack_rows``)."""

    def split(self, batch: TrainBatch, rows: list[int] | None = None) -> list[list[int]]:
        """Chunks of ``rows`` (default: all rows of ``batch``), in order."""
        rows = list(range(batch.num_rows)) if rows is None else list(rows)
        if self.packing:
            lengths = batch.attention_mask[rows].sum(dim=1).tolist()
            chunks = consecutive_chunks(lengths, self.tokens)  # a longer row gets a chunk alone
        else:
            chunks = split_rows(len(rows), self.rows)
        return [[rows[i] for i in chunk] for chunk in chunks]
