"""Every `aloft` command turns a mistake a user can make (a missing package, file or model, a bad
value) into one line on stderr and exit code 2; `--debug` shows the traceback behind it, and an
error that is a bug keeps its traceback."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from aloft.cli import DEBUG_ENV, main

COMMANDS = ["train", "eval", "data", "serve", "tinker-serve", "report", "experiment"]


def one_line(capsys: pytest.CaptureFixture[str], code: int, *expected: str) -> str:
    """The single stderr line of a command that exited with ``code``; it contains each of ``expected``."""
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("aloft: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def installed(*modules: str) -> bool:
    """Whether an extra's packages are here: without them the servers stop at the import instead."""
    return all(importlib.util.find_spec(module) is not None for module in modules)


def test_train_with_a_config_file_that_is_not_yaml(tmp_path, capsys):
    config = tmp_path / "mine.yaml"
    config.write_text("trainer: [\n")
    code = main(["train", str(config), "trainer.max_steps=1"])
    one_line(capsys, code, "config error: ", f"{config} is not valid YAML", "line 2", "fix the file")


@pytest.mark.parametrize(
    "words, expected",
    [
        (["env.config={max_turns: ["], ["config key 'env.config'", "valid dictionary"]),
        ([], ["cannot load model", "empty-model"]),  # a directory without a model in it
    ],
)
def test_eval_with_a_bad_input(tmp_path, capsys, words, expected):
    model = tmp_path / "empty-model"
    model.mkdir()
    code = main(["eval", str(model), "data.builder=arithmetic", "data.eval_size=2", *words])
    one_line(capsys, code, *expected)


def test_data_build_sql_without_a_data_package(tmp_path, monkeypatch, capsys):
    """A data package the SQL databases are built from, not installed: ``None`` in ``sys.modules``
    is how Python marks a module that cannot be imported, and what ``find_spec`` reports as absent."""
    from aloft.data.sources.sql.pairs import _template_pairs_cached

    monkeypatch.setitem(sys.modules, "mendeleev", None)
    monkeypatch.setenv("ALOFT_CACHE_DIR", str(tmp_path / "cache"))  # no database built yet
    _template_pairs_cached.cache_clear()  # nor cached in memory by an earlier test
    out = tmp_path / "x.jsonl"
    code = main(
        ["data", "build", "sql", "--split", "train", "--out", str(out), "data.builder_args.db=elements"]
    )
    one_line(capsys, code, "'mendeleev==1.3.0', which is not installed", "pip install --no-deps")
    assert not out.exists()


def test_serve_a_model_that_does_not_exist(capsys):
    code = main(["serve", "/no/such/model"])
    if installed("fastapi", "uvicorn"):
        one_line(capsys, code, "'/no/such/model' is not available", "built-in name")
    else:
        one_line(capsys, code, "pip install 'aloft[serve]'")


def test_tinker_serve_a_model_that_does_not_exist(tmp_path, capsys):
    checkpoints = tmp_path / "checkpoints"
    code = main(["tinker-serve", "/no/such/model", "--checkpoint-dir", str(checkpoints)])
    if installed("tinker", "fastapi", "uvicorn", "peft"):
        one_line(capsys, code, "'/no/such/model' is not available", "built-in name")
    else:
        one_line(capsys, code, "pip install 'aloft[tinker]'")


def test_report_out_that_is_a_directory(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("trainer: {name: run}\n")
    (run / "metrics.jsonl").write_text("")
    out = tmp_path / "pages"
    out.mkdir()
    code = main(["report", str(run), "--out", str(out)])
    one_line(capsys, code, "report error: ", f"--out {out} is a directory", f"{out}/report.html")
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["pages", "run"]


def test_experiment_report_only_without_an_experiment(tmp_path, capsys):
    out = tmp_path / "never-run"
    code = main(["experiment", "skyrl-sql", "--report-only", "--out", str(out)])
    one_line(capsys, code, f"--report-only: no experiment in {out}", "without --report-only")
    assert not out.exists()


def test_saving_an_experiment_state_over_one_with_more_runs_is_refused(tmp_path, capsys):
    """--save-state never drops a run the state directory holds and the output lacks."""
    state, out = tmp_path / "state", tmp_path / "exp"
    (state / "runs" / "multi_turn-seed0").mkdir(parents=True)
    (state / "runs" / "multi_turn-seed0" / "metrics.jsonl").write_text("{}\n")
    (out / "runs").mkdir(parents=True)
    code = main(["experiment", "skyrl-sql", "--out", str(out), "--save-state", str(state)])
    one_line(capsys, code, f"--save-state: {state} holds runs/multi_turn-seed0", "restore it first")
    assert (state / "runs" / "multi_turn-seed0" / "metrics.jsonl").read_text() == "{}\n"


@pytest.mark.parametrize("debug", [False, True])
def test_the_command_line_shows_the_traceback_only_with_debug(tmp_path, debug):
    """Through the real entry point: one line and exit 2; with ``--debug`` the traceback."""
    command = [sys.executable, "-m", "aloft.cli", "data", "build", "arithmetic", "--size", "2"]
    command += ["--out", str(tmp_path / "x.jsonl"), "data.builder_args.nope=1"] + (
        ["--debug"] if debug else []
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if debug:
        assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr
        assert done.stderr.splitlines()[-1].startswith(
            "ValueError: dataset builder 'arithmetic': unknown options ['nope']"
        )
    else:
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
        assert done.stderr.startswith("aloft: dataset builder 'arithmetic': unknown options ['nope']")
    assert not (tmp_path / "x.jsonl").exists()


def test_debug_reaches_the_commands_a_command_starts(tmp_path, monkeypatch):
    """While a command runs with ``--debug``, ALOFT_DEBUG=1 is set for the commands it starts (an
    experiment's ``aloft train`` runs), which then show their tracebacks; after it, the caller's
    environment is as it was."""
    import aloft.cli

    monkeypatch.setenv(DEBUG_ENV, "0")  # off; restored (unset) after the test
    child = [sys.executable, "-m", "aloft.cli", "data", "build", "arithmetic", "--size", "2"]
    child += ["--out", str(tmp_path / "x.jsonl"), "data.builder_args.nope=1"]
    started = []

    def start_a_failing_child(argv):
        started.append(subprocess.run(child, capture_output=True, text=True, timeout=120))
        raise FileNotFoundError("no such file: x.yaml")  # a user's mistake: one line without --debug

    monkeypatch.setattr(aloft.cli, "_dispatch", start_a_failing_child)
    with pytest.raises(FileNotFoundError):
        main(["experiment", "skyrl-sql", "--debug"])
    assert started[0].returncode == 1 and "Traceback (most recent call last)" in started[0].stderr
    assert os.environ[DEBUG_ENV] == "0"
    assert main(["experiment", "skyrl-sql"]) == 2  # without --debug: the one line, the child's too
    assert started[1].returncode == 2 and len(started[1].stderr.splitlines()) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_documents_debug(command, capsys):
    words = {"data": ["data", "build"]}.get(command, [command])
    try:
        main([*words, "--help"])
    except SystemExit as stop:  # argparse exits after printing the help
        assert stop.code == 0
    assert "--debug" in capsys.readouterr().out


def test_a_bug_keeps_its_traceback(monkeypatch, tmp_path):
    """An error no input explains (here a KeyError out of a builder) is not turned into one line."""
    import aloft.data

    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(aloft.data, "build_dataset", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["data", "build", "arithmetic", "--size", "2", "--out", str(tmp_path / "x.jsonl")])


def test_a_value_error_inside_a_training_run_keeps_its_traceback(monkeypatch):
    """train's bad settings are ConfigErrors from its preflight: a bare ValueError is the run's bug."""
    import aloft.trainer

    def failing_run(config):
        raise ValueError("too many values to unpack (expected 2)")

    monkeypatch.setattr(aloft.trainer, "train", failing_run)
    with pytest.raises(ValueError, match="too many values"):
        main(["train", "quickstart", "trainer.max_steps=1"])


def test_a_missing_package_names_the_extra(monkeypatch, tmp_path, capsys):
    """A package an optional command imports, not installed: the line names the extra that brings it."""
    monkeypatch.setitem(sys.modules, "plotly", None)  # report's page inlines Plotly's JavaScript
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    code = main(["report", str(run), "--out", str(tmp_path / "page.html")])
    one_line(capsys, code, "report needs plotly, which is not installed: pip install 'aloft[report]'")


def test_experiment_takes_its_base_model_as_model_path(capsys):
    """`model.path=X` names the model the experiment's runs start from, as in `aloft train`: it is the
    warm start's base, so it leaves the settings every run gets (last there, it would replace the warm
    start's model). `--model X`, its old spelling, works for one release with a one-line note."""
    import argparse

    from aloft.cli_experiment import base_model

    words = ["model.path=tiny-model", "trainer.max_steps=3"]
    assert base_model(argparse.Namespace(overrides=words, model=None)) == (
        "tiny-model",
        ["trainer.max_steps=3"],
    )
    assert capsys.readouterr().err == ""
    assert base_model(argparse.Namespace(overrides=["trainer.max_steps=3"], model="old")) == (
        "old",
        ["trainer.max_steps=3"],
    )
    assert capsys.readouterr().err.strip() == (
        "aloft experiment: --model is deprecated and goes in the next release; use model.path=X"
    )


def test_experiment_refuses_two_base_models(tmp_path, capsys):
    out = tmp_path / "exp"
    code = main(["experiment", "skyrl-sql", "--out", str(out), "--model", "a", "model.path=b"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 2 and "--model is deprecated" in err[0]
    assert err[1] == "aloft: --model a and model.path=b disagree; give model.path= alone"
    assert not out.exists()  # refused before anything ran


@pytest.mark.parametrize(
    ("argv", "note"),
    [
        (["serve", "/no/such/model", "--dtype", "float32"], "--dtype is deprecated"),
        (["serve", "/no/such/model", "--backend", "hf"], "--backend is deprecated"),
        (["tinker-serve", "--model", "/no/such/model"], "--model is deprecated"),
    ],
)
def test_the_servers_old_spellings_still_work_with_a_one_line_note(argv, note, tmp_path, capsys):
    """An old spelling reaches the same place as the new one (here: the missing model), after one
    line naming what replaces it."""
    needs = ("fastapi", "uvicorn") + (("tinker", "peft") if argv[0] == "tinker-serve" else ())
    code = main([*argv, *(["--checkpoint-dir", str(tmp_path)] if argv[0] == "tinker-serve" else [])])
    if not installed(*needs):  # the command stops at its extra's import, before reading its flags
        one_line(capsys, code, "pip install 'aloft[")
        return
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 2, err
    assert note in err[0] and "goes in the next release" in err[0]
    assert err[1].startswith("aloft: ") and "'/no/such/model' is not available" in err[1]
