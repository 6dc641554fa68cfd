"""The README's "Extending" snippets, run as written: each is a module of its own (at most 15 lines
of code), imported through ``trainer.imports``, and a tiny run trains with what it registers; the
loss's own hyperparameter is set with ``algorithm.params`` and reaches the loss."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from aloft.cli import main
from aloft.data import build_dataset
from aloft.gym import check_env
from aloft.tracking import read_metrics

README = Path(__file__).resolve().parents[1] / "README.md"
SHORT_RUN = [
    "trainer.eval_every=0",
    "trainer.checkpoint_every=0",
    "trainer.export_final=false",
    "data.eval_size=4",
]
"""With the ``tiny_overrides`` fixture: a run of a few seconds with nothing but its metrics."""


@pytest.fixture(autouse=True)
def fresh_registries(forget_plugins):
    """Each test registers its snippet's names anew (the README and the guide both define scaled_pg)."""
    forget_plugins += ["readme_env", "readme_loss", "readme_plan", "scaled_pg"]


def snippets() -> list[str]:
    section = README.read_text().split("## Extending", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_shows_an_env_a_loss_and_a_plan_each_at_most_15_lines():
    found = snippets()
    assert len(found) == 3
    assert all(len([line for line in code.splitlines() if line.strip()]) <= 15 for code in found)


@pytest.mark.parametrize(
    ("module", "selects"),
    [
        ("readme_env", ["env=echo"]),
        ("readme_loss", ["algorithm.policy_loss=scaled_pg", "algorithm.params.scale=0.5"]),
        ("readme_plan", ["trainer.plan=plain_sync"]),
    ],
)
def test_a_readme_snippet_trains(module, selects, tmp_path, monkeypatch, tiny_overrides):
    code = snippets()[["readme_env", "readme_loss", "readme_plan"].index(module)]
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = [
        "train",
        "quickstart",
        f"trainer.imports=[{module}]",
        *selects,
        *tiny_overrides,
        *SHORT_RUN,
        "trainer.max_steps=2",
        "data.train_size=32",
        "algorithm.dynamic_sampling=false",
    ]
    assert main(argv) == 0
    records = read_metrics(tmp_path / "runs" / "quickstart" / "metrics.jsonl")
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2]
    if module == "readme_env":  # the echo env passes the gym's conformance checks
        check_env("echo", build_dataset("arithmetic", n=4, seed=0), {})
    elif module == "readme_plan":  # the plan ran the steps, on-policy
        assert [r["async/staleness_max"] for r in records if "reward/mean" in r] == [0.0, 0.0]
        assert "plan: plain_sync" in (tmp_path / "runs" / "quickstart" / "config.yaml").read_text()
    else:  # the loss ran with the command line's scale (its metric, token-weighted over each step)
        scales = [r["policy/scale"] for r in records if "policy/scale" in r]
        assert scales == [pytest.approx(0.5), pytest.approx(0.5)]


GUIDE = README.parent / "docs" / "guide" / "algorithms.md"


def test_the_guides_loss_with_settings_runs_as_written(tmp_path, monkeypatch, capsys, tiny_overrides):
    """docs/guide/algorithms.md: its module, its train command, and the error it shows, verbatim."""
    section = GUIDE.read_text().split("## Your own estimator or loss", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (command,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    (shown,) = re.findall(r"```\n\$ (.*?)\n(.*?)\n```", section, re.S)
    (tmp_path / "scaled_pg.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    tiny = [*tiny_overrides, *SHORT_RUN, "trainer.max_steps=1", "data.train_size=16"]
    assert main([*shlex.split(command)[1:], *tiny]) == 0
    records = read_metrics(tmp_path / "runs" / "quickstart" / "metrics.jsonl")
    assert [r["policy/scale"] for r in records if "policy/scale" in r] == [pytest.approx(0.5)]
    assert main(shlex.split(shown[0])[1:]) == 2
    assert capsys.readouterr().err.strip() == shown[1]
