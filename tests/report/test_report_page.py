"""`aloft report` pages opened in headless Chromium: the charts hold the runs' real numbers, the
trajectory browser shows what the trainer trains on, filters work, runs overlay, bad input is one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from aloft.cli import main
from aloft.report import build_report
from aloft.tracking import read_metrics
from tests.report.conftest import ARTIFACTS, SQL_REPLIES


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


def chart(page, key: str) -> list[dict]:
    """The traces Plotly drew for ``key``: [{"name", "x", "y"}] (waiting for a section opened just now)."""
    page.wait_for_function("key => document.getElementById('chart:' + key).data", arg=key, timeout=10_000)
    return page.evaluate(
        "key => document.getElementById('chart:' + key).data.map(t => ({name: t.name, x: t.x, y: t.y}))", key
    )


def test_the_curves_and_the_eval_table_hold_the_runs_numbers(digits_run, open_page, tmp_path, capsys):
    assert main(["report", str(digits_run), "--out", str(tmp_path / "r.html")]) == 0
    assert "wrote" in capsys.readouterr().out
    rows = read_metrics(digits_run / "metrics.jsonl")
    steps = [r for r in rows if "policy/loss" in r]
    evals = [r for r in rows if "eval/reward/mean" in r]
    page = open_page(tmp_path / "r.html")
    shot(page, "digits_curves")
    (reward,) = chart(page, "reward/mean")
    assert reward["x"] == [r["step"] for r in steps] == [1, 2, 3, 4]
    assert reward["y"] == [r["reward/mean"] for r in steps]
    assert reward["name"] == "digits"
    # A closed section draws when opened, with its numbers.
    page.click("details.section[data-title^='Policy'] > summary")
    (loss,) = chart(page, "policy/loss")
    assert loss["y"] == [r["policy/loss"] for r in steps]
    # Wall-clock: minutes since the first step.
    page.select_option("#x-axis", "minutes")
    (by_time,) = chart(page, "reward/mean")
    assert by_time["x"] == pytest.approx([(r["time"] - steps[0]["time"]) / 60 for r in steps], abs=1e-3)
    # The eval table: one row per eval with reward and pass@k.
    cells = page.eval_on_selector_all(
        "#eval-table-grid tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert [int(c[1]) for c in cells] == [r["step"] for r in evals] == [0, 2, 4]
    header = page.eval_on_selector_all("#eval-table-grid th", "cells => cells.map(c => c.textContent)")
    column = header.index("reward/mean")
    assert [float(c[column]) for c in cells] == pytest.approx(
        [r["eval/reward/mean"] for r in evals], rel=1e-3
    )
    assert "pass@1" in header


def test_the_browser_shows_a_multi_turn_text2sql_episode_trained_on_exactly_the_policys_replies(
    sql_run, open_page, tmp_path
):
    run, records = sql_run
    build_report([run], tmp_path / "sql.html")
    page = open_page(tmp_path / "sql.html")
    page.locator("#browser").scroll_into_view_if_needed()
    first = records[0]
    assert first["info"]["turns"] == 3 and len(first["info"]["observation_spans"]) == 2
    page.click("#traj-list li[data-index='0']")
    shot(page, "sql_trajectory")
    turns = page.eval_on_selector_all(
        "#traj-view .turn",
        "turns => turns.map(t => ({kind: t.classList.contains('policy') ? 'policy' : 'env', "
        "text: [...t.querySelectorAll('.tok')].map(s => s.textContent).join(''), "
        "trained: [...t.querySelectorAll('.tok')].every(s => s.classList.contains('trained'))}))",
    )
    assert [t["kind"] for t in turns] == ["policy", "env", "policy", "env", "policy"]
    policy = [t for t in turns if t["kind"] == "policy"]
    assert all(t["trained"] for t in policy) and not any(t["trained"] for t in turns if t["kind"] == "env")
    for turn, reply in zip(policy, SQL_REPLIES, strict=True):
        assert turn["text"].startswith(reply)  # the reply, then its end-of-turn token
    # The trained tokens are exactly the record's loss-mask-1 tokens, in order.
    trained_ids = page.eval_on_selector_all(
        "#traj-view .tok.trained", "spans => spans.map(s => +s.title.split(' ')[1])"
    )
    assert trained_ids == [i for i, m in zip(first["completion_ids"], first["loss_mask"], strict=True) if m]
    assert "no such column" in turns[3]["text"]  # the failing probe's error, as the env showed it
    # The probes are marked as tool calls: their tokens, and the turn's heading.
    calls = page.eval_on_selector_all(
        "#traj-view .turn.policy",
        "ts => ts.map(t => [...t.querySelectorAll('.tok.call')].map(s => s.textContent).join(''))",
    )
    assert calls[0].startswith("<sql>SELECT name FROM sqlite_master") and calls[0].endswith("</sql>")
    assert calls[2] == ""  # the answer is not a tool call
    first_heading = page.inner_text("#traj-view .turn.policy h4")
    assert first_heading.endswith("tool call: sql")
    tip = page.get_attribute("#traj-view .tok.trained", "title")
    assert tip == f"token {first['completion_ids'][0]} · sampler logprob 0 · trainer logprob not recorded"
    # Each policy turn's reward is the sum of its tokens' rewards (the env's reward lands on its last token).
    headings = page.eval_on_selector_all("#traj-view .turn.policy h4", "hs => hs.map(h => h.textContent)")
    spans = [(0, first["info"]["observation_spans"][0][0])]
    assert headings[0].startswith("policy turn 1 · reward ") and headings[2].startswith(
        "policy turn 3 · reward "
    )
    turn_rewards = [float(h.split(" · ")[1].removeprefix("reward ")) for h in headings]
    assert turn_rewards[0] == sum(first["rewards"][spans[0][0] : spans[0][1]])
    assert sum(turn_rewards) == pytest.approx(first["reward"])


def test_the_filters_narrow_the_list(sql_run, open_page, tmp_path):
    run, records = sql_run
    build_report([run], tmp_path / "sql.html")
    page = open_page(tmp_path / "sql.html")

    def shown() -> list[int]:
        return page.eval_on_selector_all("#traj-list li", "items => items.map(li => +li.dataset.index)")

    assert shown() == list(range(len(records)))
    page.fill("#f-text", "no_such_column")
    assert shown() == [i for i, r in enumerate(records) if "no_such_column" in r["completion"]] != []
    page.fill("#f-text", "")
    page.fill("#f-min", "0.5")
    assert shown() == [i for i, r in enumerate(records) if r["reward"] >= 0.5]
    page.fill("#f-min", str(min(r["reward"] for r in records)))
    assert shown() == list(range(len(records)))
    page.fill("#f-min", "")
    page.select_option("#f-status", "stop")
    assert shown() == [i for i, r in enumerate(records) if r["status"] == "stop"]
    assert page.inner_text("#f-count") == f"{len(shown())} of {len(records)} shown"
    page.select_option("#f-env", "text2sql")
    assert len(shown()) == sum(r["status"] == "stop" for r in records)


def test_two_runs_overlay_with_a_config_diff(digits_run, sql_run, open_page, tmp_path):
    run, _ = sql_run
    build_report([digits_run, run], tmp_path / "both.html")
    page = open_page(tmp_path / "both.html")
    shot(page, "two_runs")
    traces = chart(page, "reward/mean")
    assert [t["name"] for t in traces] == ["digits", "sql"]
    sql_rows = [r for r in read_metrics(run / "metrics.jsonl") if "policy/loss" in r]
    assert traces[1]["y"] == [r["reward/mean"] for r in sql_rows]
    diff = page.eval_on_selector_all(
        "#config-diff-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    by_key = {row[0]: row[1:] for row in diff}
    assert by_key["env.name"] == ['"arithmetic"', '"text2sql"']
    assert by_key["trainer.name"] == ['"digits"', '"sql"']
    assert "model.path" not in by_key  # the same in both


def test_a_run_still_being_written_reports_what_exists(digits_run, open_page, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.yaml").write_text((digits_run / "config.yaml").read_text())
    lines = (digits_run / "metrics.jsonl").read_text().splitlines()
    complete = [json.loads(line) for line in lines[:3]]
    (partial / "metrics.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2])
    build_report([partial], tmp_path / "partial.html")
    page = open_page(tmp_path / "partial.html")
    assert "metrics.jsonl: the last line is still being written; left out" in page.inner_text("#notes")
    steps = [r for r in complete if "policy/loss" in r]
    (reward,) = chart(page, "reward/mean")
    assert reward["x"] == [r["step"] for r in steps]
    # A run with a config and no finished step yet.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text((digits_run / "config.yaml").read_text())
    build_report([fresh], tmp_path / "fresh.html")
    page = open_page(tmp_path / "fresh.html")
    assert "no step has finished yet" in page.inner_text("#notes")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: tmp / "nowhere", "no such run directory; pass a run's directory"),
        (
            lambda tmp: (tmp / "empty").mkdir() or tmp / "empty",
            "not an aloft run (no config.yaml or metrics.jsonl)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(make, expected, tmp_path, capsys):
    start = time.perf_counter()
    assert main(["report", str(make(tmp_path)), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aloft: report error: ") and expected in err and "\n" not in err
    assert not Path(tmp_path / "x.html").exists() and time.perf_counter() - start < 5


def test_a_damaged_metrics_line_names_the_file_and_line(digits_run, tmp_path, capsys):
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    lines = (digits_run / "metrics.jsonl").read_text().splitlines()
    (damaged / "metrics.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    assert main(["report", str(damaged)]) == 2
    assert f"{damaged / 'metrics.jsonl'}:2: not a JSON line" in capsys.readouterr().err


def test_the_browser_shows_the_advantage_and_the_trainers_logprob_of_a_trained_run(
    digits_run, open_page, tmp_path
):
    build_report([digits_run], tmp_path / "r.html")
    page = open_page(tmp_path / "r.html")
    page.select_option("#f-step", "1")
    first = json.loads((digits_run / "rollouts" / "step_1.jsonl").read_text().splitlines()[0])
    page.click("#traj-list li[data-index='0']")
    assert f"advantage {first['advantage']:.4g}" in page.inner_text("#traj-view .meta")
    i = first["loss_mask"].index(1)
    tip = page.get_attribute(f"#traj-view .tok[data-i='{i}']", "title")
    assert tip.endswith(f"trainer logprob {first['trainer_logprobs'][i]:.4g}"), tip


def test_png_export_writes_the_main_curves(digits_run, sql_run, tmp_path, capsys):
    from PIL import Image

    run, _ = sql_run
    out = tmp_path / "png"
    assert (
        main(["report", str(digits_run), str(run), "--out", str(tmp_path / "r.html"), "--png", str(out)]) == 0
    )
    assert "PNG images" in capsys.readouterr().out
    names = sorted(p.name for p in out.iterdir())
    assert {"reward_mean.png", "eval_reward_mean.png", "policy_entropy.png", "curves.png"} <= set(names)
    with Image.open(out / "curves.png") as image:
        assert image.width > 1000 and image.height > 400
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    # Both runs' lines are drawn, in the page's colours (#1f77b4 and #d62728).
    present = {colour for _, colour in colours}
    assert (0x1F, 0x77, 0xB4) in present and (0xD6, 0x27, 0x28) in present
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "curves.png").write_bytes((out / "curves.png").read_bytes())


def test_the_served_page_redraws_as_the_run_writes(digits_run, browser, tmp_path):
    """`aloft report RUN --serve`: 127.0.0.1 only; a new metrics row appears without a reload, and the
    server answers 304 while nothing changed."""
    import shutil
    import threading
    import urllib.error
    import urllib.request

    from aloft.report.serve import make_report_server

    run = tmp_path / "live"
    shutil.copytree(digits_run, run)
    server = make_report_server([str(run)], port=0, refresh_s=0.5)
    assert server.server_address[0] == "127.0.0.1"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/"
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]")
        page.wait_for_function("document.body.dataset.refreshes >= 1", timeout=10_000)
        assert len(chart(page, "reward/mean")[0]["x"]) == 4
        etag = urllib.request.urlopen(url + "data").headers["ETag"]
        request = urllib.request.Request(url + "data", headers={"If-None-Match": etag})
        with pytest.raises(urllib.error.HTTPError) as unchanged:
            urllib.request.urlopen(request)
        assert unchanged.value.code == 304
        rows = read_metrics(run / "metrics.jsonl")
        last = [r for r in rows if "policy/loss" in r][-1]
        with (run / "metrics.jsonl").open("a") as f:  # the trainer writes step 5
            f.write(json.dumps({**last, "step": 5, "reward/mean": 0.75, "time": last["time"] + 10}) + "\n")
        page.wait_for_function(
            "document.getElementById('chart:reward/mean').data[0].x.length === 5", timeout=10_000
        )
        assert chart(page, "reward/mean")[0]["y"][-1] == 0.75
        page.close()
    finally:
        server.shutdown()
        server.server_close()


def test_failed_trajectories_are_in_the_browser_with_their_error(long_tiny_model, open_page, tmp_path):
    """A run whose env raises on some steps: its env_error trajectories (written last in the
    rollouts file) reach the browser even when the page keeps only the first 2 samples a step, and
    the status filter finds them with their error."""
    from aloft.config import load_config
    from aloft.trainer import Trainer
    from tests.report.conftest import off_the_browser_loop
    from tests.trainer.test_every_env import env_training_overrides

    overrides = env_training_overrides("arithmetic", long_tiny_model, tmp_path, steps=1, max_new_tokens=6)
    overrides += [
        "trainer.name=flaky",
        "env=test_sometimes_failing",
        "data.builder=arithmetic",
        "trainer.imports=[tests.trainer.envs]",
        "trainer.max_error_share=0.9",
        "generator.n_samples=4",
        "trainer.prompts_per_step=4",
    ]
    off_the_browser_loop(Trainer(load_config(None, overrides)).fit)
    run = tmp_path / "flaky"
    records = [json.loads(line) for line in (run / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    failed = [r for r in records if r["status"] == "env_error"]
    assert failed and records[-len(failed) :] == failed  # written last
    build_report([run], tmp_path / "flaky.html", samples_per_step=2)
    page = open_page(tmp_path / "flaky.html")
    page.select_option("#f-status", "env_error")
    items = page.eval_on_selector_all("#traj-list li", "items => items.map(li => li.textContent)")
    assert len(items) == len(failed) and all("env_error" in item for item in items)
    assert "tool crashed" in page.inner_text("#traj-view .error")
