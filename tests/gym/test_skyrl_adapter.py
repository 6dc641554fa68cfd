"""skyrl-gym's own envs run unchanged through aloft's Env contract (aloft.gym.adapters.skyrl).

Real skyrl-gym envs: gsm8k (single turn), gsm8k_multi_turn (turn-level rewards and feedback),
text2sql (multi-turn SQL probes on a copy of aloft's Chinook database) and search (aloft's retrieval
server). skyrl-gym is a dev dependency: without it this module fails to import, loudly.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as error:  # fail loudly: the adapter's tests need the real package
    raise ImportError(
        f"tests/gym/test_skyrl_adapter.py needs skyrl-gym (pip install skyrl-gym): {error}"
    ) from error

import aloft
import aloft.gym.core as gym_core
from aloft.data.rows import validate_row
from aloft.data.sources.sql import database_path, pairs
from aloft.gym import check_env, make, register
from aloft.gym.adapters import (
    SKYRL_BUILTIN_ENV_IDS,
    SkyRLEnv,
    SkyRLEnvError,
    register_skyrl_envs,
    skyrl_env,
)
from aloft.gym.tools.search import LocalIndex
from aloft.gym.tools.search_server import SearchServer

SRC = str(Path(aloft.__file__).resolve().parents[1])
PROMPT = [
    {"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in all?"}
]


@pytest.fixture(autouse=True)
def skyrl_registered():
    """Register the skyrl-gym envs for one test, then restore aloft's registry."""
    saved = dict(gym_core._REGISTRY)
    register_skyrl_envs()
    yield
    gym_core._REGISTRY.clear()
    gym_core._REGISTRY.update(saved)


def gsm8k_row(answer: str = "72", env_class: str = "skyrl/gsm8k", **columns: Any) -> dict[str, Any]:
    """A row in SkyRL's gsm8k format (the one its gsm8k_dataset.py writes), validated by aloft."""
    return {
        "data_source": "openai/gsm8k",
        "prompt": PROMPT,
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": answer},
        "extra_info": {"split": "train", "index": 0},
        **columns,
    }


# ---- registration ------------------------------------------------------------------------------
def test_every_skyrl_gym_env_is_registered_as_skyrl_slash_id() -> None:
    assert set(SKYRL_BUILTIN_ENV_IDS) <= set(skyrl_gym.registry)
    ids = register_skyrl_envs()  # again: a no-op for the ids it registered
    assert ids == [f"skyrl/{env_id}" for env_id in sorted(skyrl_gym.registry)]
    assert set(ids) <= set(aloft.gym.registered())
    register("skyrl_mine/gsm8k", "aloft.gym.envs.arithmetic:ArithmeticEnv")
    with pytest.raises(ValueError, match="already registered"):
        register_skyrl_envs(["gsm8k"], prefix="skyrl_mine/")
    assert register_skyrl_envs(["gsm8k"], prefix="") == ["gsm8k"]  # SkyRL's own env_class values
    assert isinstance(make("gsm8k", extras=validate_row(gsm8k_row(), 0, "t").extras), SkyRLEnv)


def test_registering_skyrl_envs_imports_neither_skyrl_gym_nor_torch() -> None:
    code = (
        "import sys, aloft.gym; from aloft.gym.adapters import register_skyrl_envs, SKYRL_BUILTIN_ENV_IDS; "
        "ids = register_skyrl_envs(SKYRL_BUILTIN_ENV_IDS); "
        "print('skyrl_gym' in sys.modules, 'torch' in sys.modules, "
        "all(i in aloft.gym.registered() for i in ids), len(ids))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "True", str(len(SKYRL_BUILTIN_ENV_IDS))]


def test_bad_ids_and_bad_rows_fail_at_make_with_the_reason() -> None:
    with pytest.raises(ValueError, match="skyrl_env_id"):
        SkyRLEnv(config={}, extras={})
    with pytest.raises(SkyRLEnvError, match=r"unknown skyrl-gym env id 'nope'.*'gsm8k'"):
        skyrl_env("nope")(config={}, extras={})
    with pytest.raises(SkyRLEnvError, match="could not be built.*reward_spec field is required"):
        make("skyrl/gsm8k", extras={"extra_info": {}})


# ---- gsm8k: single turn ------------------------------------------------------------------------
def test_gsm8k_rewards_right_wrong_and_unformatted_answers() -> None:
    env = make("skyrl/gsm8k", extras=validate_row(gsm8k_row(), 0, "gsm8k.jsonl").extras)
    prompt = [dict(message) for message in PROMPT]
    for completion, reward in [
        ("48 + 24 = 72 clips.\n#### 72", 1.0),
        ("48 + 48 = 96 clips.\n#### 96", 0.0),
        ("The answer is 72.", 0.0),  # skyrl's strict gsm8k format needs '#### 72'
    ]:
        messages, info = env.reset(prompt)
        assert messages == PROMPT and info == {}
        out = env.step(completion)
        assert (out.observations, out.reward, out.done) == ([], reward, True)
        assert isinstance(out.reward, float)
    assert prompt == PROMPT
    env.close()
    env.close()


def test_gsm8k_passes_check_env() -> None:
    rows = [gsm8k_row("72"), gsm8k_row("5", extra_info={"index": 1})]
    check_env("skyrl/gsm8k", rows)
    check_env("skyrl/gsm8k", [validate_row(row, i, "gsm8k.jsonl") for i, row in enumerate(rows)])


def test_an_unregistered_skyrl_env_runs_by_entry_point() -> None:
    env = skyrl_env("skyrl_gym.envs.gsm8k.env:GSM8kEnv")(extras={"reward_spec": {"ground_truth": "3"}})
    env.reset(PROMPT)
    assert env.step("#### 3").reward == 1.0


# ---- gsm8k_multi_turn: turn-level rewards, feedback, turn limit from config ---------------------
def test_gsm8k_multi_turn_episode_with_feedback_and_turn_limit_from_config() -> None:
    extras = validate_row(gsm8k_row(env_class="skyrl/gsm8k_multi_turn"), 0, "t").extras
    env = make("skyrl/gsm8k_multi_turn", config={"max_turns": 3}, extras=extras)
    env.reset(PROMPT)
    first = env.step("Let me think.")
    assert first.reward == 0.0 and not first.done
    assert len(first.observations) == 1 and "#### ANSWER" in first.observations[0]["content"]
    second = env.step("Maybe #### 70")  # well formatted but wrong: format credit 0.2 / max_turns
    assert second.reward == pytest.approx(0.2 / 3) and not second.done
    assert "final numeric answer" in second.observations[0]["content"]  # last turn's reminder
    third = env.step("#### 72")
    assert (third.observations, third.reward, third.done) == ([], 1.0, True)
    assert env.metrics() == {"steps": 3.0}

    env.reset(PROMPT)  # a fresh skyrl env: the turn counter starts over
    assert [env.step("no").done for _ in range(3)] == [False, False, True]  # the limit is 3
    assert env.metrics() == {"steps": 3.0}
    env.close()
    check_env("skyrl/gsm8k_multi_turn", [gsm8k_row()], config={"max_turns": 3})


# ---- text2sql: multi-turn SQL on Chinook -------------------------------------------------------
@pytest.fixture(scope="module")
def sql_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """skyrl's layout, <db_path>/spider/database/<db_id>/<db_id>.sqlite, holding a copy of Chinook:
    skyrl-gym opens the file read-write (its writes are rolled back), so never aloft's own file."""
    root = tmp_path_factory.mktemp("skyrl-sql")
    target = root / "spider" / "database" / "chinook" / "chinook.sqlite"
    target.parent.mkdir(parents=True)
    shutil.copyfile(database_path("chinook"), target)
    return root


def sql_row(pair: dict[str, Any]) -> dict[str, Any]:
    """A row in SkyRL-SQL's format (db_id, data, reward_spec.ground_truth = gold SQL)."""
    return {
        "data_source": "synsql",
        "prompt": [{"role": "user", "content": pair["question"]}],
        "env_class": "skyrl/text2sql",
        "reward_spec": {"method": "rule", "ground_truth": pair["sql"]},
        "extra_info": {"pair_id": pair["id"]},
        "db_id": "chinook",
        "data": "spider",
    }


def test_text2sql_probe_then_solve_on_chinook(sql_root: Path) -> None:
    pair = next(item for item in pairs("chinook") if item["id"] == "chinook-001")  # AC/DC tracks
    gold = pair["sql"]
    row = validate_row(sql_row(pair), 0, "sql.jsonl")
    db_file = sql_root / "spider" / "database" / "chinook" / "chinook.sqlite"
    checksum = hashlib.sha256(db_file.read_bytes()).hexdigest()
    env = make("skyrl/text2sql", config={"db_path": str(sql_root), "max_turns": 3}, extras=row.extras)

    env.reset(row.prompt)
    probe = env.step(f"<think>Which tracks are by AC/DC?</think>\n<sql>{gold}</sql>")
    assert probe.reward == 0.0 and not probe.done
    (observation,) = probe.observations
    assert observation["role"] == "user"
    assert "<observation>" in observation["content"] and "Let There Be Rock" in observation["content"]
    assert "You have 2 turns left" in observation["content"]
    json.dumps(probe.info)  # the skyrl metadata (a tuple tool_input) came back JSON-safe
    assert probe.info["tool_name"] == "sql" and probe.info["tool_input"][1] == gold
    final = env.step(f"<think>That is the list.</think>\n<solution>{gold}</solution>")
    assert (final.observations, final.reward, final.done) == ([], 1.0, True)

    env.reset(row.prompt)
    wrong = env.step("<think>guess</think>\n<solution>SELECT Name FROM Track LIMIT 3</solution>")
    assert (wrong.reward, wrong.done) == (0.0, True)
    env.reset(row.prompt)
    unformatted = env.step(f"<solution>{gold}</solution>")  # no <think>: SkyRL-SQL's format reward
    assert (unformatted.reward, unformatted.done) == (-1.0, True)

    env.reset(row.prompt)
    write = env.step("<think>try</think>\n<sql>DELETE FROM Track</sql>")
    assert not write.done
    assert env.step("<think>again</think>\n<sql>SELECT 1</sql>").done is False
    last = env.step("<think>out of turns</think>")  # third turn of 3 ends the episode
    assert (last.reward, last.done) == (-1.0, True)
    env.close()
    assert hashlib.sha256(db_file.read_bytes()).hexdigest() == checksum


def test_text2sql_passes_check_env(sql_root: Path) -> None:
    rows = [sql_row(pair) for pair in pairs("chinook")[:2]]
    check_env("skyrl/text2sql", rows, config={"db_path": str(sql_root)})


def test_env_config_defaults_come_from_the_env_config_dataclass(sql_root: Path) -> None:
    extras = validate_row(sql_row(pairs("chinook")[0]), 0, "t").extras
    with pytest.raises(SkyRLEnvError, match="/home/ray/default/sql_data"):  # Text2SQLEnvConfig's default
        make("skyrl/text2sql", extras=extras)
    search = make("skyrl/search", extras={"reward_spec": {"ground_truth": {"target": ["6"]}}})
    assert search._inner.tool_group.search_url == "http://127.0.0.1:8000/retrieve"  # SearchEnvConfig's
    assert search._inner.tool_group.topk == 3
    search = make(
        "skyrl/search", config={"topk": 1}, extras={"reward_spec": {"ground_truth": {"target": ["6"]}}}
    )
    assert search._inner.tool_group.topk == 1


# ---- search: aloft's retrieval server ----------------------------------------------------------
ELEMENTS = [
    {"id": "c", "title": "carbon", "text": "Carbon is a chemical element with atomic number 6."},
    {"id": "n", "title": "neon", "text": "Neon is a noble gas with atomic number 10."},
    {"id": "o", "title": "oxygen", "text": "Oxygen is a chemical element with atomic number 8."},
]
CARBON_ROW = {
    "prompt": [{"role": "user", "content": "What is the atomic number of carbon?"}],
    "env_class": "skyrl/search",
    "reward_spec": {"method": "rule", "ground_truth": {"target": ["6"]}},
    "extra_info": {},
}


def test_code_running_skyrl_envs_are_refused_without_a_sandbox() -> None:
    for env_id in ("skyrl/lcb", "skyrl/searchcode"):
        with pytest.raises(SkyRLEnvError, match="runs model-written code without a sandbox"):
            make(env_id, extras={})


def test_search_episode_against_aloft_search_server() -> None:
    with SearchServer(LocalIndex(ELEMENTS)) as server:
        config = {"search_url": server.url, "topk": 2, "timeout": 5, "max_turns": 3}
        env = make("skyrl/search", config=config, extras=validate_row(CARBON_ROW, 0, "t").extras)
        env.reset(CARBON_ROW["prompt"])
        search = env.step("<search>carbon atomic number</search>")
        assert search.reward == 0.0 and not search.done
        assert "<information>" in search.observations[0]["content"]
        assert "atomic number 6" in search.observations[0]["content"]
        assert env.step("<answer>6</answer>").reward == 1.0
        env.reset(CARBON_ROW["prompt"])
        assert env.step("<answer>8</answer>").reward == 0.0
        env.close()
        check_env("skyrl/search", [CARBON_ROW], config=config)


# ---- the adapter's conversions, on a skyrl env written for the test -----------------------------
class OddEnv(BaseTextEnv):
    """Returns what the skyrl-gym contract allows but aloft's does not take as is."""

    seen_extras: list[dict[str, Any]] = []

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        OddEnv.seen_extras.append(extras)
        self.env_config = env_config
        self.max_turns = int(extras["max_turns"])

    def init(self, prompt):
        return [{"role": "system", "content": "be brief"}, *prompt], {"tools": ("a", "b")}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        done = self.turns >= self.max_turns
        if self.turns == 1:
            return BaseTextEnvStepOutput(observations=None, reward=None, done=False, metadata=None)
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": None}],
            reward=[0.5, 0.25],
            done=done,
            metadata={"ids": {3, 1}, "blob": b"x", "obj": object.__name__},
            postprocessed_action=action.strip(),
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "solved": True, "note": "not a number", "nan": float("nan")}


def test_conversions_and_extras_as_skyrl_train_passes_them() -> None:
    skyrl_gym.register(id="aloft_test_odd", entry_point=OddEnv)
    try:
        OddEnv.seen_extras.clear()
        register("test_odd", skyrl_env("aloft_test_odd"), setting="x")
        row = validate_row(gsm8k_row(env_class="test_odd", question="q?"), 0, "t")
        env = make("test_odd", config={"max_turns": 3}, extras=row.extras)
        assert OddEnv.seen_extras[-1] == {
            "data_source": "openai/gsm8k",
            "question": "q?",
            "reward_spec": {"method": "rule", "ground_truth": "72"},
            "extra_info": {"split": "train", "index": 0},
            "max_turns": 3,  # what skyrl-train's generator adds
        }
        assert OddEnv.seen_extras[-1] is not row.extras and row.extras.get("max_turns") is None
        assert env._inner.env_config.setting == "x"  # an OmegaConf DictConfig, as in skyrl-train

        messages, info = env.reset(row.prompt)
        assert messages[0] == {"role": "system", "content": "be brief"} and messages[1:] == row.prompt
        assert info == {"tools": ["a", "b"]}
        first = env.step("hi")
        assert (first.observations, first.reward, first.done, first.info) == ([], 0.0, False, {})
        second = env.step(" ok ")
        assert second.observations == [{"role": "user", "content": ""}]
        assert second.reward == 0.75 and second.info["reward_components"] == [0.5, 0.25]
        assert second.info["ids"] == [1, 3] and second.info["blob"] == "x"
        assert second.info["postprocessed_action"] == "ok"
        assert env.step("bye").done is True
        assert env.metrics() == {"turns": 3.0, "solved": 1.0}
        check_env("test_odd", [row], config={"max_turns": 3})
        env.close()
    finally:
        skyrl_gym.envs.registration.deregister("aloft_test_odd")


# ---- through aloft's real Generator ------------------------------------------------------------
def test_a_skyrl_env_runs_in_aloft_generator_token_in_token_out(tiny_model_dir: str) -> None:
    from aloft.inference import make_engine
    from aloft.models import load_tokenizer
    from aloft.rollout import EpisodeLimits, Generator
    from aloft.types import RolloutStatus, SamplingParams

    tokenizer = load_tokenizer(tiny_model_dir)
    replies = ["Let me think.", "Maybe #### 70", "#### 72"]
    generator = Generator(
        make_engine("scripted", tokenizer=tokenizer, replies=replies),
        tokenizer,
        limits=EpisodeLimits(max_turns=5, max_total_tokens=100_000),
        env_configs={"skyrl/gsm8k_multi_turn": {"max_turns": 5}},
    )
    row = validate_row(gsm8k_row(env_class="skyrl/gsm8k_multi_turn"), 0, "gsm8k.jsonl")
    (group,) = generator.generate_sync([row], n=1, sampling=SamplingParams(max_tokens=64), seed=0)
    (trajectory,) = group.trajectories
    assert trajectory.status is RolloutStatus.STOP, trajectory.info
    assert trajectory.info["turns"] == 3 and len(trajectory.info["observation_spans"]) == 2
    assert sum(trajectory.rewards) == pytest.approx(1.0 + 0.2 / 5)  # format credit, then the answer
    assert trajectory.metrics == {"steps": 3.0}
    policy_ids = [i for i, m in zip(trajectory.completion_ids, trajectory.loss_mask, strict=True) if m]
    assert policy_ids == [token for reply in replies for token in generator.engine.tokenize(reply)]
    text = tokenizer.decode(trajectory.completion_ids)
    for start, end in trajectory.info["observation_spans"]:
        assert all(mask == 0 for mask in trajectory.loss_mask[start:end])
    assert text.count("#### ANSWER") == 2  # each of the env's two feedback messages, once
