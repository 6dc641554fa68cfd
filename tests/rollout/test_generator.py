"""The Generator with the real hf engine and real envs: token-in/token-out, masks, concurrency."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from aloft.data import build_dataset, validate_row
from aloft.gym import Env, StepOutput, register, registered
from aloft.inference import kv_cache, make_engine
from aloft.models import load_tokenizer
from aloft.rollout import ChatFormatter, EpisodeLimits, Generator
from aloft.types import RolloutStatus, SamplingParams


class SlowToolEnv(Env):
    """Two turns; each step blocks 0.2 s like a slow tool (a real sleep, in the env's thread)."""

    in_flight = 0
    most_in_flight = 0
    lock = threading.Lock()

    def step(self, action: str) -> StepOutput:
        cls = SlowToolEnv
        with cls.lock:
            cls.in_flight += 1
            cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        time.sleep(0.2)
        with cls.lock:
            cls.in_flight -= 1
        self.turn = getattr(self, "turn", 0) + 1
        return StepOutput(
            observations=[{"role": "user", "content": "tool says 42"}],
            reward=0.5,
            done=self.turn >= 2,
            info={},
        )


if "test_slow_tool" not in registered():
    register("test_slow_tool", SlowToolEnv)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tokenizer):
    return make_engine("hf", model_or_path=tiny_model_dir, tokenizer=tokenizer, dtype="float32")


def rows(n: int, env: str | None = None):
    raw = build_dataset("arithmetic", n=n, seed=3)
    return (
        [validate_row(r, i, "test", default_env=None) for i, r in enumerate(raw)]
        if env is None
        else [validate_row({**r, "env_class": env}, i, "test") for i, r in enumerate(raw)]
    )


def test_chat_formatter_matches_the_template(tokenizer):
    chat = ChatFormatter(tokenizer)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Add 1 and 2."}]
    assert tokenizer.decode(chat.prompt_ids(messages)) == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    obs = [{"role": "user", "content": "try again"}]
    after_eos = tokenizer.decode(chat.observation_ids(obs, [5, eos]))
    assert after_eos == "\n<|im_start|>user\ntry again<|im_end|>\n<|im_start|>assistant\n"
    # A turn cut by the length limit gets its end-of-turn token from the observation (loss_mask 0).
    assert tokenizer.decode(chat.observation_ids(obs, [5, 6])) == "<|im_end|>" + after_eos


def test_multi_turn_token_in_token_out(engine, tokenizer):
    """Decoded trajectories equal the chat rendering of the conversation; each observation appears
    exactly once and all of its tokens have loss_mask 0."""
    gen = Generator(
        engine,
        tokenizer,
        limits=EpisodeLimits(max_turns=3, max_total_tokens=200),
        env_configs={"arithmetic": {"max_turns": 3}},
    )
    groups = gen.generate_sync(rows(4), n=2, sampling=SamplingParams(max_tokens=12, temperature=1.0), seed=1)
    trajs = [t for g in groups for t in g.trajectories]
    assert len(groups) == 4 and all(len(g.trajectories) == 2 for g in groups)
    multi = [t for t in trajs if t.info["turns"] > 1]
    assert multi, "the random tiny model should fail arithmetic and get retries"
    for t in trajs:
        spans = t.info["observation_spans"]
        assert len(spans) == t.info["turns"] - 1 or t.status is RolloutStatus.LENGTH
        for start, end in spans:
            assert all(m == 0 for m in t.loss_mask[start:end])
            assert all(lp == 0.0 for lp in t.sampler_logprobs[start:end])
            text = tokenizer.decode(t.completion_ids[start:end])
            assert text.count("<|im_start|>user\n") == 1
        policy_positions = [i for i, m in enumerate(t.loss_mask) if m]
        in_spans = {i for s, e in spans for i in range(s, e)}
        assert not in_spans & set(policy_positions)
        assert len(policy_positions) + len(in_spans) == len(t.completion_ids)
        # rewards sit on policy tokens only
        assert all(t.loss_mask[i] == 1 for i, r in enumerate(t.rewards) if r != 0)


def test_envs_run_concurrently_off_the_event_loop(engine, tokenizer):
    """16 two-turn trajectories whose env steps each block 0.2 s: the steps overlap in threads."""
    SlowToolEnv.most_in_flight = 0
    gen = Generator(engine, tokenizer, limits=EpisodeLimits(max_turns=2, max_total_tokens=100))
    t0 = time.perf_counter()
    groups = gen.generate_sync(rows(8, "test_slow_tool"), n=2, sampling=SamplingParams(max_tokens=4), seed=0)
    elapsed = time.perf_counter() - t0
    trajs = [t for g in groups for t in g.trajectories]
    assert all(t.status is RolloutStatus.STOP or t.status is RolloutStatus.LENGTH for t in trajs)
    assert all(abs(t.reward - 1.0) < 1e-9 for t in trajs)  # 0.5 per turn, each on its turn's last token
    assert all(sum(1 for r in t.rewards if r) == 2 for t in trajs)
    assert SlowToolEnv.most_in_flight >= 4, "env calls are not overlapping"
    assert elapsed < 6.4, f"{elapsed:.2f}s: no faster than 32 sequential 0.2 s env steps"


def test_seeded_generation_is_reproducible(engine, tokenizer):
    gen = Generator(engine, tokenizer, limits=EpisodeLimits(max_turns=1, max_total_tokens=16))
    sampling = SamplingParams(max_tokens=8, temperature=1.0)
    a = gen.generate_sync(rows(3), n=2, sampling=sampling, seed=7)
    b = gen.generate_sync(rows(3)[:1], n=2, sampling=sampling, seed=7)  # a different batch around row 0
    assert [t.completion_ids for t in a[0].trajectories] == [t.completion_ids for t in b[0].trajectories]


def test_missing_env_fails_the_trajectory_not_the_run(engine, tokenizer):
    gen = Generator(engine, tokenizer, limits=EpisodeLimits())
    groups = asyncio.run(
        gen.generate(rows(2, "no_such_env"), n=1, sampling=SamplingParams(max_tokens=4), seed=0)
    )
    assert [t.status for g in groups for t in g.trajectories] == [RolloutStatus.ENV_ERROR] * 2
    assert "no_such_env" in groups[0].trajectories[0].info["error"]


class HangingEnv(Env):
    """Hangs in ``reset`` (env config ``hang=reset``) or ``step`` (``hang=step``) until released:
    a user env's network call without a timeout. Records which instances were closed."""

    release = threading.Event()
    closed: list[str] = []

    def reset(self, prompt):
        if self.config.get("hang") == "reset":
            HangingEnv.release.wait()
        return super().reset(prompt)

    def step(self, action: str) -> StepOutput:
        if self.config.get("hang") == "step":
            HangingEnv.release.wait()
        return StepOutput(observations=[], reward=1.0, done=True)

    def close(self) -> None:
        HangingEnv.closed.append(str(self.config.get("hang")))
        super().close()


if "test_hanging" not in registered():
    register("test_hanging", HangingEnv)


def test_env_calls_past_their_deadline_fail_only_their_trajectories(tokenizer):
    """Rows whose env hangs in reset or in step become env_error after ``env_timeout_s`` while the
    others finish; the hung envs are closed (which may free what they wait on), and the generator's
    next call is not held up by the calls still hanging on their threads."""
    HangingEnv.release.clear()
    HangingEnv.closed.clear()
    engine = make_engine("scripted", tokenizer=tokenizer, replies=["42"])
    configs = {"test_hanging": {}}
    gen = Generator(
        engine, tokenizer, limits=EpisodeLimits(), env_configs=configs, env_timeout_s=0.5, env_threads=4
    )
    sampling = SamplingParams(max_tokens=8)
    try:
        for hang in ("step", "reset"):
            configs["test_hanging"] = {"hang": hang}
            t0 = time.perf_counter()
            hung = gen.generate_sync(rows(3, "test_hanging"), n=2, sampling=sampling, seed=0)
            assert time.perf_counter() - t0 < 5  # 6 calls of 0.5 s on 4 slots: abandoned calls free theirs
            for t in (t for g in hung for t in g.trajectories):
                assert t.status is RolloutStatus.ENV_ERROR and t.info["error_source"] == "env"
                assert (
                    f"EnvCallTimeout('env {hang} did not return within generator.env_timeout_s=0.5 s"
                    in t.info["error"]
                )
                assert t.reward == 0.0
            configs["test_hanging"] = {}
            fine = gen.generate_sync(rows(3, "test_hanging"), n=2, sampling=sampling, seed=0)
            assert [t.status for g in fine for t in g.trajectories] == [RolloutStatus.STOP] * 6
            assert [t.reward for g in fine for t in g.trajectories] == [1.0] * 6
        time.sleep(0.2)  # hung envs are closed on a thread of their own
        assert sorted(HangingEnv.closed).count("step") == 6 and HangingEnv.closed.count("reset") == 6
        assert gen.env_threads.abandoned == 12
    finally:
        HangingEnv.release.set()


def test_an_envs_own_timeout_error_is_its_error_not_the_deadline(tokenizer):
    """A TimeoutError the env raises itself (a socket's) is reported as such, before any deadline."""

    class SocketTimeoutEnv(Env):
        def step(self, action: str) -> StepOutput:
            raise TimeoutError("read timed out")

    engine = make_engine("scripted", tokenizer=tokenizer, replies=["42"])
    gen = Generator(
        engine, tokenizer, limits=EpisodeLimits(), env_factory=lambda *_: SocketTimeoutEnv(), env_timeout_s=30
    )
    (group,) = gen.generate_sync(rows(1, "any"), n=1, sampling=SamplingParams(max_tokens=8), seed=0)
    assert group.trajectories[0].info["error"] == "env: TimeoutError('read timed out')"


class JitteryEnv(Env):
    """Two turns whose steps take a random time: without lockstep, requests reach the engine in any order."""

    def step(self, action: str) -> StepOutput:
        time.sleep(random.random() * 0.02)
        self.turn = getattr(self, "turn", 0) + 1
        return StepOutput(
            observations=[{"role": "user", "content": "again"}], reward=0.0, done=self.turn >= 2
        )


if "test_jittery" not in registered():
    register("test_jittery", JitteryEnv)


class RecordingEngine:
    """The scripted engine, recording the seeds of each generate call (one call = one batch)."""

    def __init__(self, tokenizer):
        self.inner = make_engine("scripted", tokenizer=tokenizer, replies=["a", "b"])
        self.version = 0
        self.calls: list[list[int]] = []

    async def generate(self, requests):
        self.calls.append([r.sampling.seed for r in requests])
        return await self.inner.generate(requests)


def test_lockstep_gives_the_engine_the_same_batches_every_run(tokenizer):
    runs = []
    for _ in range(2):
        engine = RecordingEngine(tokenizer)
        gen = Generator(
            engine, tokenizer, limits=EpisodeLimits(max_turns=2, max_total_tokens=100), lockstep=True
        )
        groups = gen.generate_sync(
            rows(4, "test_jittery"), n=2, sampling=SamplingParams(max_tokens=4), seed=0
        )
        assert all(t.info["turns"] == 2 for g in groups for t in g.trajectories)
        runs.append(engine.calls)
    assert runs[0] == runs[1]
    assert [len(call) for call in runs[0]] == [8, 8]  # every live episode's turn in one call


def test_a_weight_update_between_turns_starts_a_new_segment(tiny_model_dir, tokenizer):
    """In-flight updates (fully_async): turn 1 samples with version 0, the weights change while
    the slow tool runs, turn 2 samples with version 1; the trajectory records both segments."""
    engine = make_engine("hf", model_or_path=tiny_model_dir, tokenizer=tokenizer, dtype="float32")
    gen = Generator(engine, tokenizer, limits=EpisodeLimits(max_turns=2, max_total_tokens=64))
    weights = [(name, tensor.clone()) for name, tensor in engine.model.state_dict().items()]

    async def run():
        async def update_during_the_tool_call():
            await asyncio.sleep(0.1)  # turn 1 is sampled; every episode is inside its 0.2 s tool call
            await engine.pause()
            await engine.update_weights(weights, version=1)
            await engine.resume()

        updating = asyncio.create_task(update_during_the_tool_call())
        groups = await gen.generate(
            rows(3, "test_slow_tool"), n=2, sampling=SamplingParams(max_tokens=4), seed=0
        )
        await updating
        return groups

    try:
        groups = asyncio.run(run())
    finally:
        engine.close()
    for trajectory in (t for g in groups for t in g.trajectories):
        assert trajectory.info["segment_versions"] == [0, 1]
        assert trajectory.policy_version == 0  # a trajectory is as old as its oldest segment
        (a, b), (c, d) = trajectory.info["segments"]
        assert b <= c and all(trajectory.loss_mask[a:b]) and all(trajectory.loss_mask[c:d])
        assert sum(trajectory.loss_mask) == (b - a) + (d - c)


def _two_samples_a_row(
    model_dir, tokenizer, prefix_cache_gb, prompt_rows, *, limits, sampling, seed, **generator_kwargs
):
    """Two samples of each row on the hf engine: (trajectories, the engine's stats)."""
    engine = make_engine(
        "hf", model_or_path=model_dir, tokenizer=tokenizer, dtype="float32", prefix_cache_gb=prefix_cache_gb
    )
    try:
        gen = Generator(engine, tokenizer, limits=limits, **generator_kwargs)
        groups = gen.generate_sync(prompt_rows, n=2, sampling=sampling, seed=seed)
        return [t for g in groups for t in g.trajectories], engine.stats
    finally:
        engine.close()


def test_ended_episodes_leave_nothing_in_the_prefix_cache(tiny_model_dir, tokenizer):
    """Multi-turn episodes reuse their histories turn to turn, and once every episode has ended the
    engine holds none of their KV (before, each episode's last turn stayed until LRU eviction)."""
    engine = make_engine("hf", model_or_path=tiny_model_dir, tokenizer=tokenizer, dtype="float32")
    try:
        gen = Generator(
            engine,
            tokenizer,
            limits=EpisodeLimits(max_turns=3, max_total_tokens=200),
            env_configs={"arithmetic": {"max_turns": 3}},
        )
        groups = gen.generate_sync(
            rows(4), n=2, sampling=SamplingParams(max_tokens=12, temperature=1.0), seed=4
        )
        assert sum(t.info["turns"] - 1 for g in groups for t in g.trajectories) > 0  # later turns ran
        assert engine.prefix_cache.hits > 0  # and continued their histories
        assert len(engine.prefix_cache) == 0 and engine.prefix_cache.nbytes == 0
    finally:
        engine.close()


def test_multi_turn_episodes_prefill_each_history_once_and_equal_runs_without_the_cache(
    tiny_model_dir, tokenizer
):
    """The hf engine's prefix cache: a trajectory's next turn prefills only the tokens after its previous
    one (the generator re-sends prompt + completion + observation), and trajectories are unchanged."""

    def run(prefix_cache_gb):
        return _two_samples_a_row(
            tiny_model_dir,
            tokenizer,
            prefix_cache_gb,
            rows(3),
            limits=EpisodeLimits(max_turns=3, max_total_tokens=200),
            sampling=SamplingParams(max_tokens=12, temperature=1.0),
            seed=4,
            env_configs={"arithmetic": {"max_turns": 3}},
        )

    cached, cached_stats = run(2.0)
    plain, plain_stats = run(0.0)
    assert [t.completion_ids for t in cached] == [t.completion_ids for t in plain]
    for a, b in zip(cached, plain):
        assert a.sampler_logprobs == pytest.approx(b.sampler_logprobs, abs=1e-4)
    later_turns = sum(t.info["turns"] - 1 for t in cached)
    assert later_turns > 0, "the random tiny model should fail arithmetic and get retries"
    # Each later turn prefills its previous turn's last token and the observation, nothing before them.
    new_tokens = sum(1 + end - start for t in cached for start, end in t.info["observation_spans"])
    prompts_once = sum(len(t.prompt_ids) for t in cached[::2])  # a group's two samples share the prompt
    assert cached_stats.prefilled_tokens == prompts_once + new_tokens
    assert plain_stats.prefilled_tokens > cached_stats.prefilled_tokens + later_turns * min(
        len(t.prompt_ids) for t in cached
    )


class LongObservationEnv(Env):
    """Three turns; each observation is a table longer than the KV cache's spare columns (like a
    50-row SQL result), so a continuation appends hundreds of tokens to a cached history at once."""

    def __init__(self, config=None, extras=None):
        super().__init__(config, extras)
        self.turns = 0

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        if self.turns == 3:
            return StepOutput(observations=[], reward=1.0, done=True)
        table = "\n".join(f"| {row:>3} | value {row * 7:>5} |" for row in range(7))
        return StepOutput(observations=[{"role": "user", "content": table}], reward=0.0, done=False)


if "test_long_observation" not in registered():
    register("test_long_observation", LongObservationEnv)


def test_long_observations_extend_cached_histories(tiny_model_dir, tokenizer):
    """Regression: a turn whose new tokens outnumber the cache's spare columns used to fail inside
    the engine (and the generator then reported it as an env error)."""

    def run(prefix_cache_gb):
        return _two_samples_a_row(
            tiny_model_dir,
            tokenizer,
            prefix_cache_gb,
            rows(2, "test_long_observation"),
            limits=EpisodeLimits(max_turns=3, max_total_tokens=2000),
            sampling=SamplingParams(max_tokens=6, temperature=1.0),
            seed=1,
        )

    cached, stats = run(2.0)
    plain, _ = run(0.0)
    for trajectory in cached:
        assert trajectory.status.value != "env_error", trajectory.info.get("error")
        assert trajectory.info["turns"] == 3 and trajectory.reward == 1.0
        assert all(
            end - start > kv_cache.SPARE_COLUMNS for start, end in trajectory.info["observation_spans"]
        )
    assert [t.completion_ids for t in cached] == [t.completion_ids for t in plain]
    assert stats.prefilled_tokens < sum(len(t.prompt_ids) + len(t.completion_ids) for t in cached)
