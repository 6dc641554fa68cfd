"""env=agent through the real Generator: external programs play episodes against a capturing endpoint
on the generator's engine; their sessions become trajectories with the reward the harness reports.
The programs here speak HTTP with the standard library (fast to start); the official-SDK agent runs in
test_the_calculator_agent_trains and tests/inference/test_capture.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time

import pytest

from aloft.config import load_config
from aloft.data import build_dataset, validate_row
from aloft.inference import make_engine
from aloft.models import load_tokenizer
from aloft.rollout import EpisodeLimits, Generator
from aloft.trainer import Trainer
from aloft.types import RolloutStatus, SamplingParams

# A harness that knows nothing of token ids: it posts chat requests to OPENAI_BASE_URL and keeps its
# history as text. MODE picks how it ends (the reward source, or a failure).
HARNESS = textwrap.dedent(
    """
    import json, os, sys, time, urllib.request

    def post(url, body):
        request = urllib.request.Request(url, json.dumps(body).encode(), {
            "Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
        with urllib.request.urlopen(request) as response:
            return json.load(response)

    modes = os.environ.get("MODE", "plain").split(",")
    question = sys.stdin.read()
    task = json.load(open(os.environ["ALOFT_TASK_FILE"]))
    assert task["prompt"][-1]["content"] == question and "answer" in task["extras"]
    if "silent" in modes:
        sys.exit(0)
    if "sleep" in modes:
        time.sleep(60)
    if "orphan" in modes:  # a child that outlives the program, holding its stdout
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if "probe" in modes:  # what else the key opens: nothing but this session
        import urllib.error
        codes = []
        for url in (os.environ["ALOFT_BASE_URL"] + "/chat/completions",
                    os.environ["OPENAI_BASE_URL"].replace(os.environ["ALOFT_SESSION_ID"], "other") + "/chat/completions",
                    os.environ["ALOFT_BASE_URL"].replace("/v1", "/control/pause")):
            try:
                post(url, {"messages": [{"role": "user", "content": "hi"}]})
                codes.append(200)
            except urllib.error.HTTPError as error:
                codes.append(error.code)
        print(codes, file=sys.stderr)
        open(os.environ["ALOFT_REWARD_FILE"], "w").write("1" if codes == [403, 403, 404] else "0")
    messages = [{"role": "user", "content": question}]
    if "relay" in modes:  # the task's own messages, one turn: what the in-process episode sends
        messages, os.environ["TURNS"] = task["prompt"], "1"
    for turn in range(int(os.environ.get("TURNS", "2"))):
        reply = post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                     {"model": os.environ["OPENAI_MODEL"], "messages": messages})["choices"][0]["message"]
        if "rewrite" in modes:
            reply = {"role": "assistant", "content": "(summary of a reply)"}
        messages += [reply, {"role": "user", "content": "Check it again."}]
    print(reply["content"])
    if "file" in modes:
        open(os.environ["ALOFT_REWARD_FILE"], "w").write("0.25")
    if "http" in modes:
        post(os.environ["ALOFT_REWARD_URL"], {"reward": 0.75})
    if "crash" in modes:
        print("Traceback: harness broke", file=sys.stderr)
        sys.exit(3)
    """
)
REPLIES = ["Let me think.", "The answer is 5."]


@pytest.fixture()
def harness(tmp_path):
    path = tmp_path / "harness.py"
    path.write_text(HARNESS)
    return str(path)


def rows(n: int):
    raw = build_dataset("arithmetic", n=n, seed=0)
    return [validate_row({**r, "env_class": "agent"}, i, "agent") for i, r in enumerate(raw)]


def generate(tiny_model_dir, harness, *, n=2, max_turns=4, lockstep=False, **config):
    tokenizer = load_tokenizer(tiny_model_dir)
    engine = make_engine("scripted", tokenizer=tokenizer, replies=REPLIES)
    env_config = {"command": [sys.executable, harness], "reward": "file", **config}
    generator = Generator(
        engine,
        tokenizer,
        limits=EpisodeLimits(max_turns=max_turns, max_total_tokens=4096),
        default_env_config=env_config,
        lockstep=lockstep,
    )
    groups = generator.generate_sync(rows(2), n=n, sampling=SamplingParams(max_tokens=64), seed=0)
    return engine, tokenizer, groups


def test_each_session_is_one_trajectory_of_exactly_the_sampled_tokens(tiny_model_dir, harness):
    engine, tokenizer, groups = generate(tiny_model_dir, harness, env={"MODE": "file"})
    assert [len(g.trajectories) for g in groups] == [2, 2]
    for group in groups:
        for t in group.trajectories:
            assert t.status is RolloutStatus.STOP, t.info.get("error")
            assert t.reward == 0.25 and t.info["turns"] == 2 and t.info["forks"] == 0
            policy = [i for i, m in zip(t.completion_ids, t.loss_mask, strict=True) if m]
            assert policy == engine.tokenize(REPLIES[0]) + engine.tokenize(REPLIES[1])
            (span,) = t.info["observation_spans"]
            assert "Check it again." in tokenizer.decode(t.completion_ids[span[0] : span[1]])
            assert t.info["exit_code"] == 0 and t.info["env_class"] == "agent"
    sessions = {t.info["session"] for g in groups for t in g.trajectories}
    assert len(sessions) == 4


@pytest.mark.parametrize(
    ("config", "reward"),
    [
        ({"reward": "http", "env": {"MODE": "http"}}, 0.75),
        ({"reward": "exit", "env": {"MODE": "crash"}}, 0.0),
        ({"reward": "exit", "env": {"MODE": "plain"}}, 1.0),
        # The arithmetic env judges the last reply: "The answer is 5." is the format (0.5), and right
        # only where a + b = 5.
        ({"reward": "verifier", "verifier": "arithmetic", "env": {"MODE": "plain"}}, None),
    ],
)
def test_the_reward_comes_from_the_harness_or_a_verifier(tiny_model_dir, harness, config, reward):
    _, _, groups = generate(tiny_model_dir, harness, n=1, **config)
    for row, group in zip(rows(2), groups, strict=True):
        (t,) = group.trajectories
        assert not t.failed, t.info.get("error")
        expected = reward if reward is not None else 0.5 + 0.5 * (row.extras["answer"] == "5")
        assert t.reward == expected
        if config["reward"] == "verifier":
            assert t.metrics["format_ok"] == 1.0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"env": {"MODE": "crash"}}, "exited with status 3: Traceback: harness broke"),
        ({"env": {"MODE": "silent"}}, "made no request"),
        ({"env": {"MODE": "plain"}}, "wrote no ALOFT_REWARD_FILE"),
        ({"reward": "http", "env": {"MODE": "plain"}}, "posted no reward"),
        ({"timeout_s": 1, "env": {"MODE": "sleep"}}, "timeout_s=1s"),
        ({"command": ["/nonexistent/agent"]}, "could not start"),
    ],
)
def test_a_failing_harness_fails_its_episode_loudly_never_as_a_zero_reward(
    tiny_model_dir, harness, config, message
):
    _, _, groups = generate(tiny_model_dir, harness, n=1, **config)
    for group in groups:
        (t,) = group.trajectories
        assert t.failed and t.status is RolloutStatus.ENV_ERROR
        assert message in t.info["error"], t.info["error"]
        assert t.info["error_source"] == "env" and t.prompt_ids


def test_a_relaying_program_samples_exactly_what_the_in_process_episode_samples(tiny_model_dir, harness):
    """The same prompt through the program and the endpoint, or through the generator's own loop:
    the same prompt ids, tokens, logprobs and reward. Greedy: at temperature 1 the programs' requests,
    which reach the engine at other moments and so in other batches, can part from the in-process
    ones where the sampler draws a near-tie between two very unlikely tokens (2-3 of 64 SmolLM2
    episodes in benchmarks/agent_episodes.py); the per-turn seeds are checked in test_capture.py."""
    tokenizer = load_tokenizer(tiny_model_dir)
    engine = make_engine("hf", model_or_path=tiny_model_dir, tokenizer=tokenizer, dtype="float32")
    sampling = SamplingParams(max_tokens=10, temperature=0.0)
    agent = {"command": [sys.executable, harness], "reward": "verifier", "verifier": "arithmetic"}
    results = {}
    for env_id, config in (("arithmetic", {}), ("agent", {**agent, "env": {"MODE": "relay"}})):
        rows_ = [
            validate_row({**r, "env_class": env_id}, i, env_id)
            for i, r in enumerate(build_dataset("arithmetic", n=2, seed=0))
        ]
        generator = Generator(
            engine,
            tokenizer,
            limits=EpisodeLimits(max_turns=1, max_total_tokens=64),
            default_env_config=config,
        )
        results[env_id] = [
            t for g in generator.generate_sync(rows_, n=2, sampling=sampling, seed=7) for t in g.trajectories
        ]
    engine.close()
    for inside, outside in zip(results["arithmetic"], results["agent"], strict=True):
        assert not outside.failed, outside.info.get("error")
        assert outside.prompt_ids == inside.prompt_ids and outside.completion_ids == inside.completion_ids
        assert max(abs(a - b) for a, b in zip(outside.sampler_logprobs, inside.sampler_logprobs)) < 1e-4
        assert outside.reward == inside.reward


def test_the_programs_key_opens_its_own_session_only(tiny_model_dir, harness):
    """No session, another session, the engine's /control routes: 403, 403, 404."""
    _, _, groups = generate(tiny_model_dir, harness, n=1, env={"MODE": "probe"})
    assert [t.reward for g in groups for t in g.trajectories] == [1.0, 1.0]


def test_a_child_left_behind_neither_holds_the_episode_nor_survives_it(tiny_model_dir, harness):
    started = time.monotonic()
    _, _, groups = generate(tiny_model_dir, harness, n=1, env={"MODE": "orphan,file"})
    assert time.monotonic() - started < 30
    assert all(t.reward == 0.25 for g in groups for t in g.trajectories)
    alive = subprocess.run(["pgrep", "-f", "import time; time.sleep\\(60\\)"], capture_output=True, text=True)
    assert alive.stdout.strip() == ""


def test_a_cancelled_generate_ends_its_programs(tiny_model_dir, harness):
    """A run stopped mid-step (the generate call cancelled) leaves no agent program running."""
    import asyncio

    tokenizer = load_tokenizer(tiny_model_dir)
    engine = make_engine("scripted", tokenizer=tokenizer, replies=REPLIES)
    config = {
        "command": [sys.executable, harness],
        "reward": "file",
        "timeout_s": 120,
        "env": {"MODE": "sleep"},
    }
    generator = Generator(engine, tokenizer, limits=EpisodeLimits(), default_env_config=config)

    async def stopped_mid_step() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(generator.generate(rows(2), n=2, sampling=SamplingParams(), seed=0), 3)

    asyncio.run(stopped_mid_step())
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", harness], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "an agent program outlived its cancelled episode"
        time.sleep(0.1)


def test_a_rewritten_history_forks_the_session_into_two_trajectories(tiny_model_dir, harness):
    engine, _, groups = generate(tiny_model_dir, harness, n=2, env={"MODE": "rewrite,file"})
    for group in groups:
        assert len(group.trajectories) == 4  # 2 sessions x 2 pieces
        for t in group.trajectories:
            policy = [i for i, m in zip(t.completion_ids, t.loss_mask, strict=True) if m]
            assert policy == engine.tokenize(REPLIES[t.info["fork"]])
            assert t.reward == 0.25 and t.info["forks"] == 1 and t.metrics["forks"] == 1.0


def test_the_runs_turn_budget_truncates_the_session(tiny_model_dir, harness):
    """The harness wants 3 turns, the run allows 2: its third request is refused, it exits non-zero,
    and the episode is the policy's (status length) with the reward the harness left."""
    _, _, groups = generate(tiny_model_dir, harness, n=1, max_turns=2, env={"MODE": "file", "TURNS": "3"})
    for group in groups:
        (t,) = group.trajectories
        assert t.status is RolloutStatus.LENGTH, t.info.get("error")
        assert t.info["turns"] == 2 and t.reward == 0.0 and t.info["exit_code"] != 0


def test_agent_episodes_refuse_lockstep(tiny_model_dir, harness):
    _, _, groups = generate(tiny_model_dir, harness, n=1, lockstep=True, env={"MODE": "file"})
    assert all("lockstep" in t.info["error"] for g in groups for t in g.trajectories)
    with pytest.raises(ValueError, match="env=agent cannot run with trainer.deterministic=true"):
        load_config(None, ["env=agent", "trainer.deterministic=true"])


def test_env_agent_trains_with_the_calculator_agent(long_tiny_model, tmp_path):
    """`env=agent` end to end: the official-SDK calculator agent plays every episode of a step."""
    from tests.trainer.test_every_env import env_training_overrides

    overrides = env_training_overrides("agent", long_tiny_model, tmp_path, steps=1, max_new_tokens=12)
    final = Trainer(load_config(None, overrides)).fit()
    for key in ("reward/mean", "policy/loss", "timing/step_s"):
        assert math.isfinite(final[key]), key
    assert final["rollout/error_share"] == 0.0


@pytest.mark.slow  # ~9 min on 2 cores: SmolLM2 and 4 x 64 runs of the calculator agent
def test_env_agent_raises_the_reward_on_smollm2(tmp_path):
    """The README's example, shortened: the unmodified calculator agent plays every episode of
    `aloft train quickstart env=agent`, and the reward of every sample drawn rises."""
    overrides = [
        "env=agent",
        f"trainer.run_root={tmp_path}",
        "trainer.max_steps=4",
        "trainer.eval_every=0",
        "trainer.checkpoint_every=0",
        "trainer.export_final=false",
        "trainer.eval_before_training=false",
        "trainer.progress_bar=false",
        "trainer.loggers=[jsonl]",
        "algorithm.dynamic_sampling=false",  # reward/mean is then over every sample drawn
        "data.eval_size=0",
    ]
    Trainer(load_config("quickstart", overrides)).fit()
    (metrics,) = tmp_path.glob("*/metrics.jsonl")
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [row for row in rows if "reward/mean" in row]  # not the final eval's row
    rewards = [step["reward/mean"] for step in steps]
    assert all(step["rollout/error_share"] == 0.0 for step in steps)
    assert rewards[-1] > rewards[0] + 0.15, rewards
