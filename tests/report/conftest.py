"""Runs to report on, and a headless Chromium (Debian's `chromium`, driven by Playwright) to open
the pages in. `.ci/run` installs Chromium (scripts/install_chromium.sh)."""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import pytest

from aloft.config import load_config
from aloft.trainer import Trainer
from tests.trainer.test_every_env import env_rows, env_training_overrides

ARTIFACTS = Path(os.environ.get("ALOFT_TEST_ARTIFACTS", "test-artifacts")) / "report"
"""Where the browser tests save their screenshots (git-ignored)."""

SQL_REPLIES = [
    "<think>which tables are there?</think><sql>SELECT name FROM sqlite_master WHERE type = 'table'</sql>",
    "<think>try a column that is not there</think><sql>SELECT no_such_column FROM sqlite_master</sql>",
    "<think>enough</think><solution>SELECT COUNT(*) FROM sqlite_master</solution>",
]


def off_the_browser_loop(function, *args):
    """Run ``function`` in a thread of its own: Playwright's sync API keeps an event loop running on
    this thread once a browser is open, and training and generation start loops of their own."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise RuntimeError(
            "the report tests need Chromium: bash scripts/install_chromium.sh (apt-get install chromium)"
        )
    return path


@pytest.fixture(scope="module")
def browser():
    """Module-scoped: Playwright's sync API runs an event loop on this thread until it stops, and the
    tests after this package call asyncio.run (which refuses to start inside a running loop)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield instance
        instance.close()


@pytest.fixture
def open_page(browser):
    """``open_page(html_path)`` -> a Playwright page with the report drawn; fails on any script error."""
    pages = []

    def open_(path: Path, width: int = 1400):
        page = browser.new_page(viewport={"width": width, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.goto(Path(path).resolve().as_uri())
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        page.errors = errors
        pages.append(page)
        return page

    yield open_
    for page in pages:
        assert not page.errors, page.errors  # the page ran without a script error
        page.close()


@pytest.fixture(scope="session")
def digits_run(long_tiny_model, tmp_path_factory) -> Path:
    """A real 4-step run of the tiny model (evals at steps 0, 2 and 4; rollouts every step)."""
    root = tmp_path_factory.mktemp("report-runs")
    overrides = env_training_overrides("arithmetic", long_tiny_model, root, steps=4, max_new_tokens=8)
    overrides += [
        "trainer.name=digits",
        "trainer.eval_every=2",
        "trainer.eval_before_training=true",
        "data.eval_size=4",
        "generator.n_samples=4",
        "generator.temperature=1.0",
    ]
    off_the_browser_loop(Trainer(load_config(None, overrides)).fit)
    return root / "digits"


@pytest.fixture(scope="session")
def sql_run(long_tiny_model, tmp_path_factory) -> tuple[Path, list[dict]]:
    """A real 1-step text2sql run of the tiny model whose step-1 rollouts are then rewritten with
    multi-turn episodes of a scripted policy (the tiny model never writes a valid probe): the real
    Generator and text2sql env, written with the trainer's own ``rollout_record``. Returns the run
    and the episodes' records."""
    from aloft.inference import make_engine
    from aloft.models import load_tokenizer
    from aloft.rollout import EpisodeLimits, Generator
    from aloft.trainer.trainer import rollout_record
    from aloft.types import SamplingParams

    root = tmp_path_factory.mktemp("report-sql")
    overrides = env_training_overrides("text2sql", long_tiny_model, root, steps=1, max_new_tokens=8)
    off_the_browser_loop(Trainer(load_config(None, [*overrides, "trainer.name=sql"])).fit)
    run = root / "sql"
    cfg, rows = env_rows("text2sql", 2)
    tokenizer = load_tokenizer(long_tiny_model)
    records = []
    for replies in (SQL_REPLIES, SQL_REPLIES[2:]):  # three turns with a failing probe; one turn
        generator = Generator(
            make_engine("scripted", tokenizer=tokenizer, replies=replies),
            tokenizer,
            limits=EpisodeLimits(max_turns=len(replies), max_total_tokens=100_000),
            default_env_config={**cfg.env.config, "max_turns": len(replies)},
        )
        groups = off_the_browser_loop(
            functools.partial(
                generator.generate_sync,
                rows,
                n=2,
                sampling=SamplingParams(max_tokens=512),
                seed=0,
                group_prefix=f"t{len(replies)}g",
            )
        )
        records += [rollout_record(t, tokenizer.decode) for g in groups for t in g.trajectories]
    (run / "rollouts" / "step_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run, records
