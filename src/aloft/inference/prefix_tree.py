"""Prefill over shared beginnings: distinct prompts that begin alike run what they share once.

Prompts admitted together often begin alike: every SkyRL-SQL prompt starts with the same system
message (a few hundred tokens) and every question on one database with that database's schema (a
few hundred more), so of the prompt tokens of 64 held-out questions on two databases about one in
twenty differs (``benchmarks/shared_prefill.py``). A plain prefill runs every one of them through
the model.

Here the admission plans a tree of the beginnings that two or more prompts share (``plan_prefill``:
a shared beginning becomes a node when it adds at least ``min_shared`` tokens to the node it
extends), prefills each node's own tokens once, over its parent's keys and values through
shared-prefix attention (``aloft.inference.shared_prefix``), and gives every prompt its whole keys
and values and its last logits, as a plain prefill would (``prefill_over_tree``). A beginning shared
with a segment whose states exist already (a prompt still decoding, as rows join a running batch,
or one in the engine's prefix cache: ``known_segments``) is taken from it, not prefilled.

The result equals a plain prefill up to float rounding (the matmuls have other shapes, so their
sums run in another order; tested within 1e-5 in float32), not bit for bit: a prompt's logprobs can
differ in their last bits with what is admitted, decoding or cached beside it. ``min_shared=0``
turns this off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from aloft.inference.kv_cache import AppendableLayer
from aloft.inference.prefix_cache import PrefixCache
from aloft.inference.shared_prefix import SegmentBatch

MIN_SHARED_TOKENS = 64
"""Tokens a shared beginning must add to its parent to be prefilled once (each node costs a forward)."""

Forward = Callable[..., torch.Tensor]
"""``forward(input_ids [N, T], attention_mask, position_ids, cache, **extra) -> last logits [N, V]``."""


@dataclass(frozen=True)
class PrefillNode:
    tokens: tuple[int, ...]
    """The node's whole beginning, from the prompt's first token."""
    parent: int | None
    """The node (earlier in the plan) whose tokens begin this one's; None: prefilled from nothing."""
    known: int | None = None
    """The known segment (``plan_prefill``'s ``known``) whose first states are this node's: nothing
    to prefill (then ``parent`` is None)."""


@dataclass(frozen=True)
class PrefillPlan:
    nodes: list[PrefillNode]
    """Parents before their children; every prompt is a node (a leaf)."""
    prompt_nodes: list[int]
    """For each prompt, in the order given, its node."""

    @property
    def shares(self) -> bool:
        """Whether any prompt is prefilled over a shared beginning."""
        return any(node.parent is not None for node in self.nodes)

    @property
    def prefilled_tokens(self) -> int:
        """Tokens run through the model: each node's own (none for a known segment's beginning)."""
        return sum(len(node.tokens) - self._parent_length(node) for node in self.nodes if node.known is None)

    def _parent_length(self, node: PrefillNode) -> int:
        return 0 if node.parent is None else len(self.nodes[node.parent].tokens)

    def depths(self) -> list[int]:
        depths: list[int] = []
        for node in self.nodes:
            depths.append(0 if node.parent is None else depths[node.parent] + 1)
        return depths


def plan_prefill(
    prompts: list[tuple[int, ...]],
    min_shared: int = MIN_SHARED_TOKENS,
    known: list[tuple[int, ...]] | None = None,
) -> PrefillPlan:
    """The tree of shared beginnings of distinct ``prompts`` (see the module doc).

    ``known``: the tokens of segments whose states exist already (prompts decoding, or cached): a
    beginning a prompt shares with one of them is taken from it instead of prefilled.

    Sorted, prompts that share a beginning are neighbours, and the longest beginning a run of
    neighbours all share is the least common length of adjacent pairs in the run. Each run is split
    where that least length is reached, recursively; a run's shared beginning becomes a node when it
    adds ``min_shared`` tokens or more to the run's parent node (and, with no known segment in the
    run, two prompts or more share it). Every prompt keeps at least one token of its own (a prompt
    that begins another is a leaf with its last token over the shared node). With nothing shared,
    the plan is the prompts in the order given, each a root.
    """
    known = known or []
    if min_shared <= 0 or len(prompts) + len(known) < 2:
        return PrefillPlan([PrefillNode(p, None) for p in prompts], list(range(len(prompts))))
    entries = list(prompts) + list(known)  # prompts first: entry e < len(prompts) is a prompt
    order = sorted(range(len(entries)), key=entries.__getitem__)
    common = [_common_length(entries[a], entries[b]) for a, b in zip(order, order[1:])]
    nodes: list[PrefillNode] = []
    prompt_nodes = [0] * len(prompts)

    def add(tokens: tuple[int, ...], parent: int | None, source: int | None = None) -> int:
        nodes.append(PrefillNode(tokens, parent, source))
        return len(nodes) - 1

    def build(lo: int, hi: int, parent: int | None, base: int) -> None:
        """Plan the sorted entries ``order[lo:hi]``, which all begin with node ``parent`` (``base`` tokens)."""
        asked = [e for e in order[lo:hi] if e < len(prompts)]
        if not asked:
            return
        if hi - lo == 1:
            prompt_nodes[asked[0]] = add(prompts[asked[0]], parent)
            return
        least = min(common[lo : hi - 1])
        shared = min(least, min(len(prompts[e]) for e in asked) - 1)
        sources = [e - len(prompts) for e in order[lo:hi] if e >= len(prompts)]
        if shared - base >= min_shared and (sources or len(asked) > 1):
            beginning = prompts[asked[0]][:shared]
            parent = add(beginning, None, sources[0]) if sources else add(beginning, parent)
            base = shared
        start = lo
        for j in range(lo, hi - 1):
            if common[j] == least:
                build(start, j + 1, parent, base)
                start = j + 1
        build(start, hi, parent, base)

    build(0, len(entries), None, 0)
    if all(node.parent is None for node in nodes):  # nothing shared: the prompts as given, in order
        return PrefillPlan([PrefillNode(p, None) for p in prompts], list(range(len(prompts))))
    return PrefillPlan(nodes, prompt_nodes)


def _common_length(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def prefill_over_tree(
    plan: PrefillPlan,
    forward: Forward,
    pad_id: int,
    dtype: torch.dtype,
    known: list[tuple[list[torch.Tensor], list[torch.Tensor]]] | None = None,
) -> tuple[SegmentBatch, torch.Tensor]:
    """Run ``plan``: the prompts as a ``SegmentBatch`` with no rows (per layer ``[U, H_kv, T, D]``,
    right-aligned, in the plan's prompt order) and their next-token logits ``[U, V]``.

    One forward per depth of the tree: the nodes with no parent from nothing, then each deeper level
    over its parents as segments. ``forward`` passes ``segments`` on to the model's attention;
    ``dtype``: the model's (the segments' key mask); ``known``: the states (keys, values per layer
    ``[H_kv, L, D]``) of the plan's known segments, in the order ``plan_prefill`` was given them.
    """
    depths = plan.depths()
    # node -> its own states: per layer [H_kv, own tokens, D] for keys and values (views into its
    # level's cache, or into a known segment's states); a node's whole states are its ancestors'
    # own parts then its own, assembled only into the stacked segments below (no per-node copy).
    own: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    logits: dict[int, torch.Tensor] = {}
    for depth in range(max(depths) + 1):
        level = [i for i, d in enumerate(depths) if d == depth]
        for node in [i for i in level if plan.nodes[i].known is not None]:  # taken, not prefilled
            length, (known_keys, known_values) = len(plan.nodes[node].tokens), known[plan.nodes[node].known]
            own[node] = ([k[:, :length] for k in known_keys], [v[:, :length] for v in known_values])
        level = [i for i in level if plan.nodes[i].known is None]
        if not level:
            continue
        parents = [plan.nodes[i].parent for i in level]
        over, row_segment = None, None
        if depth > 0:
            distinct = sorted(set(parents))
            over = _segments(plan, distinct, own)
            row_segment = [distinct.index(p) for p in parents]
        starts = [0 if p is None else len(plan.nodes[p].tokens) for p in parents]
        news = [plan.nodes[i].tokens[start:] for i, start in zip(level, starts)]
        cache, level_logits = _prefill(news, starts, forward, pad_id, dtype, over, row_segment)
        if not plan.shares and plan.prompt_nodes == level:  # one plain prefill: its cache as it is
            return _as_segments([plan.nodes[i].tokens for i in level], cache, level_logits), level_logits
        width = cache.layers[0].keys.shape[2]
        for slot, node in enumerate(level):
            mine = slice(width - len(news[slot]), width)
            own[node] = (
                [layer.keys[slot, :, mine] for layer in cache.layers],
                [layer.values[slot, :, mine] for layer in cache.layers],
            )
            logits[node] = level_logits[slot]
    batch = _segments(plan, plan.prompt_nodes, own)
    prompt_logits = torch.stack([logits[i] for i in plan.prompt_nodes])  # [U, V]
    batch.logits = list(prompt_logits.cpu())
    return batch, prompt_logits


def _prefill(
    news: list[tuple[int, ...]],
    starts: list[int],
    forward: Forward,
    pad_id: int,
    dtype: torch.dtype,
    over: SegmentBatch | None,
    row_segment: list[int] | None,
) -> tuple[DynamicCache, torch.Tensor]:
    """One forward of the tokens ``news`` (row i's first at position ``starts[i]``), left-padded, each
    over its segment of ``over`` (``row_segment[i]``) when given. Returns the rows' own cache (per
    layer ``[N, H_kv, W, D]``, row i's tokens in its last ``len(news[i])`` columns) and their last
    logits ``[N, V]``."""
    rows, width = len(news), max(len(new) for new in news)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    position_ids = torch.zeros((rows, width), dtype=torch.long)
    for i, (new, start) in enumerate(zip(news, starts)):
        input_ids[i, width - len(new) :] = torch.tensor(new, dtype=torch.long)
        attention_mask[i, width - len(new) :] = 1
        # Padding takes the first real position (as the plain prefill's cumsum gives it).
        position_ids[i] = torch.arange(start - width + len(new), start + len(new)).clamp_(min=start)
    cache, extra = DynamicCache(), {}
    if over is not None:  # the rows' own caches start empty; their beginnings are the segments
        cache.layers = [
            AppendableLayer(
                k.new_zeros((rows, k.shape[1], 0, k.shape[3])),
                v.new_zeros((rows, v.shape[1], 0, v.shape[3])),
                rows,
            )
            for k, v in zip(over.keys, over.values)
        ]
        extra["segments"] = over.plan(dtype, torch.tensor(row_segment, dtype=torch.long))
    return cache, forward(input_ids, attention_mask, position_ids, cache, **extra)


def _as_segments(tokens: list[tuple[int, ...]], cache: DynamicCache, logits: torch.Tensor) -> SegmentBatch:
    """A plain prefill's prompts (its cache, left-padded) as a ``SegmentBatch`` of no rows."""
    return SegmentBatch(
        keys=[layer.keys for layer in cache.layers],
        values=[layer.values for layer in cache.layers],
        lengths=torch.tensor([len(t) for t in tokens], dtype=torch.long),
        tokens=list(tokens),
        logits=list(logits.cpu()),
        row_segment=torch.zeros((0,), dtype=torch.long),
    )


def _segments(
    plan: PrefillPlan, nodes: list[int], own: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]]
) -> SegmentBatch:
    """The ``nodes``' whole states as a ``SegmentBatch`` of no rows: per layer ``[len(nodes), H_kv,
    W, D]``, each right-aligned, written from its ancestors' own parts (``own``) in one pass."""
    tokens = [plan.nodes[i].tokens for i in nodes]
    width = max(len(t) for t in tokens)
    first_keys, first_values = own[nodes[0]]
    keys = [k.new_zeros((len(nodes), k.shape[0], width, k.shape[2])) for k in first_keys]
    values = [v.new_zeros((len(nodes), v.shape[0], width, v.shape[2])) for v in first_values]
    for slot, node in enumerate(nodes):
        left = width - len(tokens[slot])
        part: int | None = node
        while part is not None:  # the node's own tokens, then each ancestor's, to the root
            parent = plan.nodes[part].parent
            begin = left + (0 if parent is None else len(plan.nodes[parent].tokens))
            end = left + len(plan.nodes[part].tokens)
            for stacked, state in zip(keys, own[part][0]):
                stacked[slot, :, begin:end] = state
            for stacked, state in zip(values, own[part][1]):
                stacked[slot, :, begin:end] = state
            part = parent
    return SegmentBatch(
        keys=keys,
        values=values,
        lengths=torch.tensor([len(t) for t in tokens], dtype=torch.long),
        tokens=list(tokens),
        logits=[],
        row_segment=torch.zeros((0,), dtype=torch.long),
    )


def known_segments(
    segments: SegmentBatch | None, cache: PrefixCache | None
) -> tuple[list[tuple[int, ...]], list[tuple[list[torch.Tensor], list[torch.Tensor]]]]:
    """The segments whose states exist: the batch's (prompts decoding) and the prefix cache's, as
    ``plan_prefill``'s ``known`` tokens and ``prefill_over_tree``'s ``known`` states."""
    tokens, states = [], []
    for g, segment in enumerate(segments.tokens if segments is not None else []):
        tokens.append(segment)
        states.append(segments.layer_states(g))
    live = set(tokens)
    for segment, cached in cache.segment_items() if cache is not None else []:
        if segment not in live:
            tokens.append(segment)
            states.append((cached.keys, cached.values))
    return tokens, states


def note_reuse(plan: PrefillPlan, known: list[tuple[int, ...]], cache: PrefixCache | None) -> None:
    """Count each prompt whose beginning came from a known segment as a hit of ``cache`` (its tokens
    as reused), and mark the cached segments it came from as just used (least recently used goes
    first: a system message every admission takes from must stay)."""
    if cache is None:
        return
    for leaf in plan.prompt_nodes:
        root = plan.nodes[leaf]
        while root.parent is not None:
            root = plan.nodes[root.parent]
        if root.known is not None:
            cache.segment(known[root.known])  # refreshes a cached one; a live one is not in the cache
            cache.hits += 1
            cache.reused_tokens += len(root.tokens)


def plan_admission(
    prompts: list[tuple[int, ...]], min_shared: int, segments: SegmentBatch | None, cache: PrefixCache | None
) -> tuple[PrefillPlan, list[tuple[list[torch.Tensor], list[torch.Tensor]]]]:
    """The plan of an admission's distinct ``prompts`` over the segments that exist (the batch's and
    the cache's, ``known_segments``), with its reuse counted (``note_reuse``), and those segments'
    states for ``prefill_over_tree``."""
    known, states = known_segments(segments, cache)
    plan = plan_prefill(prompts, min_shared, known)
    note_reuse(plan, known, cache)
    return plan, states
