"""Token-in/token-out decoding with a KV cache: ``BatchDecoder`` (continuous batching) and its helpers.

Runs synchronously on the engine's compute thread. Identical prompts (the n samples of a group) are
prefilled once and share the result. Rows finish independently (EOS / stop token, stop string,
``max_tokens``, context limit); a finished row leaves the batch and the KV cache at once, and new rows
can join between steps.

With shared-prefix attention (``aloft.inference.shared_prefix``, every plain causal-attention model)
a prompt's keys and values are stored once, as a *segment*, and each row caches only its own tokens;
a request that continues a segment, or a finished row kept in the engine's ``PrefixCache`` (the
previous turn of its trajectory), prefills only its new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicLayer

from aloft.inference.decode_step import DecodeStep, decode_step_supported
from aloft.inference.kv_cache import AppendableLayer
from aloft.inference.prefix_cache import CachedHistory, CachedSegment, PrefixCache, longest_prefix
from aloft.inference.prefix_tree import MIN_SHARED_TOKENS, plan_admission, prefill_over_tree
from aloft.inference.sampling import sample_next_tokens
from aloft.inference.shared_prefix import SHARED_PREFIX_ATTENTION, SegmentBatch
from aloft.inference.stopping import DecodeLimits, stop_window
from aloft.models.compat import cache_kwarg
from aloft.types import Completion, GenerationRequest


@dataclass
class _Row:
    """Decoding state of one request."""

    request: GenerationRequest
    stop_ids: frozenset[int]
    stop_window: int
    """How many trailing tokens to decode when looking for a stop string (0: no stop strings)."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    segment: tuple[int, ...] = ()
    """With shared prefixes: the tokens of the segment the row continues."""
    history: list[int] = field(default_factory=list)
    """With shared prefixes: the tokens in the row's own cache, after its segment."""


@dataclass(frozen=True)
class _Reuse:
    """What an admitted request continues: a segment, and maybe a finished row's cached history."""

    segment: tuple[int, ...]
    history: CachedHistory | None


def _finish_reason(row: _Row, token: int, tokenizer: PreTrainedTokenizerBase, room: int) -> str | None:
    """Why ``row`` ends after appending ``token`` (``None``: it continues). ``room``: tokens left in context."""
    if token in row.stop_ids:
        return "stop"
    if row.stop_window > 0:
        tail = tokenizer.decode(row.token_ids[-row.stop_window :], skip_special_tokens=True)
        if any(stop in tail for stop in row.request.sampling.stop):
            return "stop"
    if len(row.token_ids) >= row.request.sampling.max_tokens or room <= 0:
        return "length"
    return None


def _left_pad(prompts: list[tuple[int, ...]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [U, T], attention_mask [U, T])`` with each prompt right-aligned (left padding)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[i, width - len(prompt) :] = 1
    return input_ids, attention_mask


class BatchDecoder:
    """Rows decoding together over one KV cache; rows join and leave between steps (continuous batching).

    ``admit`` prefills new requests (each distinct prompt once: a group's n samples share it) and merges
    their KV cache into the running one; ``step`` samples one token for every row, returns the rows that
    finished, drops them from every batch-shaped tensor and the cache, and runs the next forward for the
    rest. Shapes: B rows, W cache width. Rows are left-padded to the common width; ``position_ids`` count
    real tokens only, so a row sees the same positions as it would alone. Full-attention caches become
    ``AppendableLayer``s (in-place appends, rows can join); a model with other cache layers (sliding
    windows) decodes one admitted batch at a time: ``can_admit`` says whether rows may join now.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        limits: DecodeLimits,
        *,
        version: int = 0,
        max_rows: int = 0,
        prefix_cache: PrefixCache | None = None,
        min_shared_prefix: int = MIN_SHARED_TOKENS,
    ) -> None:
        """``max_rows``: the most rows the caller will run at once (the cache reserves room for them).

        ``prefix_cache``: where finished rows and segments are kept for requests that continue them
        (used only with shared prefixes; it must hold entries of this decoder's weights only).
        ``min_shared_prefix``: distinct prompts admitted together that share a beginning of this many
        tokens or more prefill it once (``aloft.inference.prefix_tree``; shared prefixes only); 0: never.
        """
        self.model, self.tokenizer, self.limits, self.version = model, tokenizer, limits, version
        self.max_rows = max_rows
        self.device = model.device
        self.forward_kwargs: dict[str, Any] = {"use_cache": True, "logits_to_keep": 1}
        self.cache_name = cache_kwarg(model)
        self.rows: list[_Row] = []
        self.handles: list[Any] = []
        self.generators: list[torch.Generator] = []
        self.cache: DynamicCache | None = None
        # Prompts as shared segments (see aloft.inference.shared_prefix) when the model runs that attention;
        # then ``cache`` holds each row's own tokens only.
        self.shares_prefixes = getattr(model.config, "_attn_implementation", None) == SHARED_PREFIX_ATTENTION
        self.segments: SegmentBatch | None = None
        self.prefix_cache = prefix_cache if self.shares_prefixes else None
        self.min_shared_prefix = min_shared_prefix
        # Decode steps of Llama-family models in few torch ops (aloft.inference.decode_step); prefill
        # and other models run the model's own forward.
        self.decode_step = (
            DecodeStep(model) if self.shares_prefixes and decode_step_supported(model) else None
        )
        self.prefilled_tokens = 0
        """Prompt tokens run through the model (what prefix sharing and the prefix cache saved is not)."""
        self.attention_mask = torch.zeros((0, 0), dtype=torch.long)  # [B, W]
        self.next_positions = torch.zeros((0,), dtype=torch.long)  # [B]
        self.logits = torch.zeros((0, 0))  # [B, V]: next-token logits, not sampled yet
        self.temperature = torch.zeros((0,))
        self.top_k = torch.zeros((0,), dtype=torch.long)
        self.top_p = torch.zeros((0,))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def can_admit(self) -> bool:
        """Whether new rows may join now (always when empty; else only over plain dynamic caches)."""
        return self.cache is None or all(isinstance(layer, AppendableLayer) for layer in self.cache.layers)

    @torch.inference_mode()
    def admit(self, requests: list[GenerationRequest], seeds: list[int], handles: list[Any]) -> None:
        """Prefill ``requests`` and add them as rows (sampled with ``seeds``; ``handles`` come back from ``step``).

        With shared prefixes, a request that continues a segment (a prompt still decoding, or cached)
        or a finished row's cached history (its previous turn) prefills only its new tokens.
        """
        rows = [
            _Row(
                request=request,
                stop_ids=self.limits.eos_ids | frozenset(request.sampling.stop_token_ids),
                stop_window=stop_window(request.sampling.stop) if request.sampling.stop else 0,
            )
            for request in requests
        ]
        if not self.shares_prefixes:
            self._admit_prompts(rows, seeds, handles)
            return
        fresh: list[tuple[_Row, int, Any]] = []
        continuing: list[tuple[_Row, int, Any, _Reuse]] = []
        for row, seed, handle in zip(rows, seeds, handles):
            reuse = self._find_reuse(row.request.prompt_ids)
            if reuse is None:
                fresh.append((row, seed, handle))
            else:
                continuing.append((row, seed, handle, reuse))
        if fresh:
            fresh_rows, fresh_seeds, fresh_handles = zip(*fresh)
            self._admit_prompts(list(fresh_rows), list(fresh_seeds), list(fresh_handles))
        if continuing:
            self._admit_continuations(continuing)

    def _find_reuse(self, prompt: list[int]) -> _Reuse | None:
        """The longest cached history or segment ``prompt`` continues (a live segment counts too)."""
        live = list(self.segments.tokens) if self.segments is not None else []
        cache = self.prefix_cache
        if cache is not None:
            history = cache.take_history(prompt, set(live) | set(cache.segments))
            if history is not None:
                return _Reuse(history.segment, history)
        segment = longest_prefix(prompt, live + (list(cache.segments) if cache is not None else []))
        return None if segment is None else _Reuse(segment, None)

    def _admit_prompts(self, rows: list[_Row], seeds: list[int], handles: list[Any]) -> None:
        """Prefill each distinct prompt once (a group's n samples share it) and add the rows."""
        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(r.request.prompt_ids), len(distinct)) for r in rows]
        row_source = torch.tensor(source, dtype=torch.long)
        if self.shares_prefixes:
            # The prompts become segments (prefilled over what they share); each row's own cache starts empty.
            plan, states = plan_admission(
                list(distinct), self.min_shared_prefix, self.segments, self.prefix_cache
            )
            prompts, logits = prefill_over_tree(
                plan, self._forward_logits, self.limits.pad_id, self.model.dtype, states
            )
            self.prefilled_tokens += plan.prefilled_tokens
            next_positions = prompts.lengths.clone()  # [U]
            places = self._add_segments(prompts)
            self.segments.add_rows([places[u] for u in source])
            for row in rows:
                row.segment = tuple(row.request.prompt_ids)
            cache = self._empty_private_cache(len(rows))
            attention_mask = torch.zeros((len(rows), 0), dtype=torch.long)
        else:
            input_ids, attention_mask = _left_pad(list(distinct), self.limits.pad_id)  # [U, T]
            position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp_(min=0)  # [U, T]: padding does not count
            cache = DynamicCache()
            logits = self._forward_logits(input_ids, attention_mask, position_ids, cache)  # [U, V]
            self.prefilled_tokens += sum(len(prompt) for prompt in distinct)
            next_positions = position_ids[:, -1] + 1  # [U]
        if not self.shares_prefixes and len(distinct) < len(rows):
            cache.batch_select_indices(row_source.to(self.device))
            attention_mask = attention_mask[row_source]
        if len(distinct) < len(rows):
            logits, next_positions = logits[row_source.to(self.device)], next_positions[row_source]
        self._add_rows(rows, seeds, handles, cache, attention_mask, logits, next_positions)

    def _forward_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DynamicCache,
        **extra: Any,
    ) -> torch.Tensor:
        """The model's forward over ``input_ids [N, T]`` filling ``cache``: last logits ``[N, V]``."""
        return self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            position_ids=position_ids.to(self.device),
            **{self.cache_name: cache},
            **self.forward_kwargs,
            **extra,
        ).logits[:, -1, :]

    def _admit_continuations(self, items: list[tuple[_Row, int, Any, _Reuse]]) -> None:
        """Add rows that continue a segment (and maybe a cached history): prefill only their new tokens."""
        for _, _, _, reuse in items:  # every continued segment joins the batch's segments first
            if self.segments is None or self.segments.index(reuse.segment) is None:
                cached = self.prefix_cache.segment(reuse.segment)
                self._add_segments(
                    SegmentBatch.of_one(reuse.segment, cached.keys, cached.values, cached.logits)
                )
        if self.prefix_cache is not None:  # every continuing request reuses a segment, maybe a history too
            self.prefix_cache.hits += len(items)
            self.prefix_cache.reused_tokens += sum(
                len(reuse.segment) + (len(reuse.history.tokens) if reuse.history else 0)
                for *_, reuse in items
            )
        exact = [item for item in items if len(item[0].request.prompt_ids) == len(item[3].segment)]
        extending = [item for item in items if len(item[0].request.prompt_ids) > len(item[3].segment)]
        if exact:  # the prompt is the segment: sample from its logits, nothing to prefill
            rows = [row for row, _, _, _ in exact]
            places = [self.segments.index(reuse.segment) for _, _, _, reuse in exact]
            for row, (_, _, _, reuse) in zip(rows, exact):
                row.segment = reuse.segment
            self.segments.add_rows(places)
            self._add_rows(
                rows,
                [seed for _, seed, _, _ in exact],
                [handle for _, _, handle, _ in exact],
                self._empty_private_cache(len(rows)),
                torch.zeros((len(rows), 0), dtype=torch.long),
                torch.stack([self.segments.logits[g] for g in places]).to(self.device),
                torch.tensor([len(row.request.prompt_ids) for row in rows], dtype=torch.long),
            )
        if extending:
            self._prefill_continuations(extending)

    def _prefill_continuations(self, items: list[tuple[_Row, int, Any, _Reuse]]) -> None:
        """One forward over the new tokens of rows whose segments (and cached histories) are known.

        Row i's own cache is laid out ``[padding, history_i, padding, new_i]`` (``[B, W + N]``): its
        cached history right-aligned in W columns, then its new tokens right-aligned in N columns.
        """
        rows = [row for row, _, _, _ in items]
        pasts = [reuse.history for _, _, _, reuse in items]
        past_tokens = [list(h.tokens) if h is not None else [] for h in pasts]
        news = [
            list(row.request.prompt_ids[len(reuse.segment) + len(past) :])
            for row, past, (_, _, _, reuse) in zip(rows, past_tokens, items)
        ]
        width, new_width = max(len(p) for p in past_tokens), max(len(n) for n in news)
        template_keys, template_values = self.segments.keys, self.segments.values
        keys = [k.new_zeros((len(rows), k.shape[1], width, k.shape[3])) for k in template_keys]
        values = [v.new_zeros((len(rows), v.shape[1], width, v.shape[3])) for v in template_values]
        attention_mask = torch.zeros((len(rows), width + new_width), dtype=torch.long)
        input_ids = torch.full((len(rows), new_width), self.limits.pad_id, dtype=torch.long)
        position_ids = torch.zeros((len(rows), new_width), dtype=torch.long)
        for i, (row, past, new, history) in enumerate(zip(rows, past_tokens, news, pasts)):
            start = len(row.request.prompt_ids) - len(new)  # position of the first new token
            if history is not None:
                for layer, (k, v) in enumerate(zip(history.keys, history.values)):
                    keys[layer][i, :, width - len(past) :] = k
                    values[layer][i, :, width - len(past) :] = v
            attention_mask[i, width - len(past) : width] = 1
            attention_mask[i, width + new_width - len(new) :] = 1
            input_ids[i, new_width - len(new) :] = torch.tensor(new, dtype=torch.long)
            position_ids[i] = torch.arange(start - new_width + len(new), start + len(new)).clamp_(min=start)
            row.segment, row.history = items[i][3].segment, past + new
        cache = DynamicCache()
        cache.layers = [AppendableLayer(k, v, len(rows)) for k, v in zip(keys, values)]
        places = [self.segments.index(reuse.segment) for _, _, _, reuse in items]
        plan = self.segments.plan(self.model.dtype, torch.tensor(places, dtype=torch.long))
        logits = self._forward_logits(
            input_ids, attention_mask, position_ids, cache, segments=plan
        )  # [B', V]
        self.prefilled_tokens += sum(len(new) for new in news)
        self.segments.add_rows(places)
        self._add_rows(
            rows,
            [seed for _, seed, _, _ in items],
            [handle for _, _, handle, _ in items],
            cache,
            attention_mask,
            logits,
            torch.tensor([len(row.request.prompt_ids) for row in rows], dtype=torch.long),
        )

    def _add_segments(self, joining: SegmentBatch) -> list[int]:
        """Make ``joining``'s segments part of the batch; returns their positions there."""
        if self.segments is None:
            self.segments = joining
            return list(range(len(joining)))
        return self.segments.add_segments(joining)

    def _empty_private_cache(self, rows: int) -> DynamicCache:
        """Own caches of width 0 for ``rows`` rows (in the layout of the batch's segments)."""
        cache = DynamicCache()
        cache.layers = [
            AppendableLayer(
                k.new_zeros((rows, k.shape[1], 0, k.shape[3])),
                v.new_zeros((rows, v.shape[1], 0, v.shape[3])),
                rows,
            )
            for k, v in zip(self.segments.keys, self.segments.values)
        ]
        return cache

    def _add_rows(
        self,
        rows: list[_Row],
        seeds: list[int],
        handles: list[Any],
        cache: DynamicCache,
        attention_mask: torch.Tensor,
        logits: torch.Tensor,
        next_positions: torch.Tensor,
    ) -> None:
        """Join prefilled rows (their cache ``[B2, H, W2, D]``, mask ``[B2, W2]``, logits ``[B2, V]``) to the batch."""
        if self.cache is None:
            if all(type(layer) is DynamicLayer for layer in cache.layers):
                cache.layers = [AppendableLayer(c.keys, c.values, self.max_rows) for c in cache.layers]
            self.cache, self.attention_mask = cache, attention_mask
        else:
            for layer, joining in zip(self.cache.layers, cache.layers):
                layer.join(joining.keys, joining.values)
            width = max(self.attention_mask.shape[1], attention_mask.shape[1])
            self.attention_mask = torch.cat(
                [_left_pad_mask(self.attention_mask, width), _left_pad_mask(attention_mask, width)]
            )
        self.next_positions = torch.cat([self.next_positions, next_positions])
        logits = logits.cpu()  # sampling runs on CPU with per-row CPU generators
        self.logits = logits if not len(self.rows) else torch.cat([self.logits, logits.to(self.logits.dtype)])
        self.rows += rows
        self.handles += list(handles)
        self.generators += [torch.Generator().manual_seed(seed) for seed in seeds]
        sampling = [r.request.sampling for r in rows]
        self.temperature = torch.cat([self.temperature, torch.tensor([s.temperature for s in sampling])])
        self.top_k = torch.cat([self.top_k, torch.tensor([s.top_k for s in sampling], dtype=torch.long)])
        self.top_p = torch.cat([self.top_p, torch.tensor([s.top_p for s in sampling])])

    @torch.inference_mode()
    def step(self) -> list[tuple[Any, Completion]]:
        """Sample one token per row; return ``(handle, completion)`` of the rows that finished."""
        tokens, logprobs = sample_next_tokens(
            self.logits, self.temperature, self.top_k, self.top_p, self.generators
        )
        token_list, logprob_list = tokens.tolist(), logprobs.tolist()
        finished = []
        for position, row in enumerate(self.rows):
            row.token_ids.append(token_list[position])
            row.logprobs.append(logprob_list[position])
            room = self.limits.max_positions - len(row.request.prompt_ids) - len(row.token_ids)
            row.finish_reason = _finish_reason(row, token_list[position], self.tokenizer, room)
            if row.finish_reason is not None:
                finished.append(position)
        done = [(self.handles[p], self._completion(self.rows[p])) for p in finished]
        if finished and self.prefix_cache is not None and self.prefix_cache.max_bytes > 0:
            for p in finished:
                session_id = self.rows[p].request.session_id
                if session_id is not None:  # a trajectory that may have a next turn
                    self.prefix_cache.add_history(self._history_of(p), session_id)
        if finished:
            order = _fill_holes(len(self.rows), finished)
            self._keep(order)
            tokens = tokens[torch.tensor(order, dtype=torch.long)]
        if self.rows:
            self._forward(tokens)
        return done

    def _keep(self, order: list[int]) -> None:
        """Keep the rows ``order`` (old positions, in their new order) in all batch-shaped state and the cache."""
        keep = torch.tensor(order, dtype=torch.long)
        self.rows = [self.rows[p] for p in order]
        self.handles = [self.handles[p] for p in order]
        self.generators = [self.generators[p] for p in order]
        self.temperature, self.top_k, self.top_p = self.temperature[keep], self.top_k[keep], self.top_p[keep]
        self.next_positions = self.next_positions[keep]
        if self.segments is not None:
            for tokens, keys, values, logits in self.segments.keep_rows(order):
                if self.prefix_cache is not None and self.prefix_cache.max_bytes > 0:
                    clones = [k.clone() for k in keys], [v.clone() for v in values]
                    self.prefix_cache.add_segment(tokens, CachedSegment(*clones, logits=logits))
        if not order:
            self.cache, self.segments, self.attention_mask = None, None, torch.zeros((0, 0), dtype=torch.long)
            return
        self.attention_mask = self.attention_mask[keep]
        for layer in self.cache.layers:
            if isinstance(layer, AppendableLayer):
                layer.keep_rows(order)
            else:
                layer.batch_select_indices(keep)
        # Columns that are padding for every remaining row (left behind by long rows that left) cost
        # attention time for nothing: cut them.
        used = self.attention_mask.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else self.attention_mask.shape[1]
        if first > 0 and self.can_admit:
            self.attention_mask = self.attention_mask[:, first:]
            for layer in self.cache.layers:
                layer.trim_left(first)

    def _history_of(self, position: int) -> CachedHistory:
        """A copy of row ``position``'s own cache: its real columns, ``[H_kv, len(history), D]`` per layer."""
        row = self.rows[position]
        columns = self.attention_mask[position].nonzero().squeeze(1).to(self.device)
        return CachedHistory(
            segment=row.segment,
            tokens=tuple(row.history),
            keys=[layer.keys[position].index_select(1, columns) for layer in self.cache.layers],
            values=[layer.values[position].index_select(1, columns) for layer in self.cache.layers],
        )

    def _forward(self, tokens: torch.Tensor) -> None:
        for row, token in zip(self.rows, tokens.tolist()):
            row.history.append(token)
        ones = self.attention_mask.new_ones((len(self.rows), 1))
        self.attention_mask = torch.cat([self.attention_mask, ones], dim=1)
        shared = {} if self.segments is None else {"segments": self.segments.plan(self.model.dtype)}
        if self.decode_step is not None:
            self.logits = self.decode_step(
                tokens, self.next_positions, self.cache, self.attention_mask, shared["segments"]
            )
        else:
            self.logits = self._forward_logits(
                tokens[:, None], self.attention_mask, self.next_positions[:, None], self.cache, **shared
            ).cpu()
        self.next_positions = self.next_positions + 1

    def _completion(self, row: _Row) -> Completion:
        return Completion(
            token_ids=row.token_ids,
            logprobs=row.logprobs,
            finish_reason=row.finish_reason or "length",
            text=self.tokenizer.decode(row.token_ids, skip_special_tokens=True),
            policy_version=self.version,
        )


def _fill_holes(rows: int, finished: list[int]) -> list[int]:
    """New order of the rows that continue: each finished row's place goes to one of the last rows.

    So the KV cache moves one row per finished row instead of shifting every row after it.
    """
    gone = set(finished)
    kept = rows - len(finished)
    order = list(range(kept))
    movers = [p for p in range(kept, rows) if p not in gone]
    for hole, mover in zip([p for p in finished if p < kept], movers, strict=True):
        order[hole] = mover
    return order


def _left_pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(mask, (width - mask.shape[1], 0))
