"""Presets, YAML files and dotted command-line overrides -> a validated ``AloftConfig``.

``load_config("quickstart", ["trainer.max_steps=20", "algorithm.advantage=rloo"])`` reads the
preset, applies the overrides (values parsed as YAML, so ``[a, b]`` is a list and ``true`` a bool)
and validates. Every problem surfaces as one ``ConfigError`` line naming the key and the fix.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import typing
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from aloft.atomic_files import write_text_atomically
from aloft.config.schema import AloftConfig
from aloft.registry import ENV_OVERLAYS


class ConfigError(ValueError):
    """A configuration problem, phrased as one line: the key, what is wrong, the fix."""


def presets() -> list[str]:
    """Names of the built-in presets."""
    folder = resources.files("aloft.config") / "presets"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def read_preset_or_file(preset_or_path: str) -> dict[str, Any]:
    """The raw mapping of a built-in preset name or a YAML file path."""
    path = Path(preset_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(
                f"config file {preset_or_path} not found; pass a YAML path or one of {presets()}"
            )
        text = path.read_text()
    else:
        if preset_or_path in env_overlays() and preset_or_path not in presets():
            raise ConfigError(
                f"'{preset_or_path}' is an env, not a preset: run `aloft train quickstart "
                f"env={preset_or_path}` (known presets: {presets()})"
            )
        if preset_or_path not in presets():
            raise ConfigError(
                f"unknown preset '{preset_or_path}'; known presets: {presets()} (or a YAML path)"
            )
        text = (resources.files("aloft.config") / "presets" / f"{preset_or_path}.yaml").read_text()
    return _mapping(text, preset_or_path)


def _read_yaml_resource(relative: str, what: str) -> dict[str, Any]:
    return _mapping((resources.files("aloft.config") / "presets" / relative).read_text(), what)


def _mapping(text: str, what: str) -> dict[str, Any]:
    raw = yaml.safe_load(text) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{what}: the top level must be a mapping of sections")
    return raw


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in the nested mapping ``raw`` (value parsed as YAML)."""
    key, sep, value_text = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override '{override}' is not of the form section.key=value")
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else ""
    except yaml.YAMLError:
        value = value_text
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{override}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def load_config(preset_or_path: str | None = None, overrides: list[str] | None = None) -> AloftConfig:
    """Resolve a preset (or YAML path) plus overrides into a validated config.

    The user modules of ``trainer.imports`` are imported first (a ``ConfigError`` names one that
    cannot be), so that the envs, losses and plans they register are known.

    Choosing an env on the command line (``env=text2sql`` or ``env.name=text2sql``) first merges
    that env's overlay (``env_overlay``: its dataset builder, turn limit, stop strings, token
    budgets) over the preset, so ``aloft train quickstart env=text2sql`` trains on SQL data,
    in its own run directory (``quickstart-text2sql`` unless ``trainer.name`` is given); the other
    overrides still win over the overlay.
    """
    raw = read_preset_or_file(preset_or_path) if preset_or_path else {}
    overrides = list(overrides or [])
    import_plugins(_plugin_modules(raw, overrides))  # they may register the env, loss, plan named
    env_name = _env_override(overrides)
    overlay = env_overlay(env_name) if env_name is not None else None
    if overlay is not None:
        preset_env = raw.get("env", {}).get("name") if isinstance(raw.get("env"), dict) else raw.get("env")
        _deep_merge(raw, copy.deepcopy(overlay))
        named = any(o.partition("=")[0].strip() == "trainer.name" for o in overrides)
        if env_name != preset_env and not named:
            # Another env is another run: `quickstart env=text2sql` must not resume `quickstart`.
            trainer = raw.setdefault("trainer", {})
            trainer["name"] = f"{trainer.get('name', 'run')}-{env_name}"
    if isinstance(raw.get("env"), str):
        raw["env"] = {"name": raw["env"]}
    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() == "env" and not value.strip().startswith("{"):
            override = f"env.name={value}"  # keep the env section's other keys (the overlay's config)
        apply_override(raw, override)
    return validate_config(raw)


def env_overlay(env_name: str) -> dict[str, Any] | None:
    """The config sections a run selecting the env ``env_name`` starts from: a built-in env's
    ``presets/envs/<env>.yaml``, or the ``overlay=`` a user env registered, or None."""
    if env_name in env_overlays():
        return _read_yaml_resource(f"envs/{env_name}.yaml", f"env overlay {env_name}")
    return ENV_OVERLAYS.get(env_name)


def import_plugins(modules: list[str]) -> None:
    """Import the user modules of ``trainer.imports`` (they register envs, estimators, losses, plans),
    or fail as one line naming the module."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(
                f"trainer.imports: cannot import {module!r} ({error}); check the module name and that "
                "it is on PYTHONPATH (run from the directory that holds it)"
            ) from None


def _plugin_modules(raw: dict[str, Any], overrides: list[str]) -> list[str]:
    """``trainer.imports`` as the command line leaves it (its last override, else the preset's)."""
    modules = raw.get("trainer", {}).get("imports", []) if isinstance(raw.get("trainer"), dict) else []
    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() == "trainer.imports":
            trial: dict[str, Any] = {}
            apply_override(trial, override)
            modules = trial["trainer"]["imports"]
    if isinstance(modules, str):
        modules = [modules]
    return [str(m) for m in modules or []]


def env_overlays() -> list[str]:
    """Env ids with a built-in overlay (``presets/envs/<env>.yaml``)."""
    folder = resources.files("aloft.config") / "presets" / "envs"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def _env_override(overrides: list[str]) -> str | None:
    """The env id chosen by the last ``env=X`` / ``env.name=X`` override, if any."""
    chosen = None
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and key.strip() in ("env", "env.name") and not value.strip().startswith("{"):
            chosen = value.strip()
    return chosen


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value


def validate_config(raw: dict[str, Any], *, whole_run: bool = True) -> AloftConfig:
    """``raw`` as an ``AloftConfig``, or a one-line ``ConfigError``. ``whole_run=False`` checks each
    value alone, not the checks across sections a training run needs (``check_consistency``)."""
    try:
        return AloftConfig.model_validate(raw, context={"whole_run": whole_run})
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


def save_config(config: AloftConfig, path: str | Path) -> None:
    """Write ``config`` as YAML atomically (ranks of a data-parallel run may read it meanwhile)."""
    write_text_atomically(path, yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))


def _one_line(exc: ValidationError) -> str:
    """The first validation error as 'key: problem; fix' (further errors counted)."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc)
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if err["type"] == "extra_forbidden":
        known = _field_names_at(loc[:-1])
        close = difflib.get_close_matches(loc[-1], known, n=1)
        hint = f"did you mean '{'.'.join([*loc[:-1], close[0]])}'?" if close else f"known keys here: {known}"
        return f"unknown config key '{key}'; {hint}{more}"
    if not loc:  # a model_validator error: the message already names key and fix
        return str(err["msg"]).removeprefix("Value error, ") + more
    got = err.get("input")
    if err["type"] in _RANGE_ERRORS:
        allowed = _range_at(loc)
        fix = f"set it to a value {allowed}" if allowed else str(err["msg"]).lower()
        return f"config key '{key}'={got} is out of range; {fix}{more}"
    expected = _field_type_at(loc)
    return f"config key '{key}': {err['msg']} (got {got!r}); set it to a value of type {expected}{more}"


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _range_at(loc: list[str]) -> str | None:
    """The allowed range of the field at ``loc`` from its constraints, e.g. ``in (0, 1]`` or ``>= 0``;
    None inside a container (one of ``optim.betas``), where pydantic's message names the bound."""
    model = _model_at(loc[:-1])
    field = model.model_fields.get(loc[-1]) if model is not None else None
    if field is None:
        return None
    if field.annotation is int and [type(m).__name__ for m in field.metadata] == ["Gt"]:
        return f">= {field.metadata[0].gt + 1}"  # PositiveInt: say ">= 1", not "> 0"
    bounds = {
        name: getattr(m, name)
        for m in field.metadata
        for name in ("gt", "ge", "lt", "le")
        if hasattr(m, name)
    }
    low = ("(", bounds["gt"]) if "gt" in bounds else ("[", bounds["ge"]) if "ge" in bounds else None
    high = (")", bounds["lt"]) if "lt" in bounds else ("]", bounds["le"]) if "le" in bounds else None
    if low and high:
        return f"in {low[0]}{low[1]:g}, {high[1]:g}{high[0]}"
    if low:
        return f"{'>' if low[0] == '(' else '>='} {low[1]:g}"
    assert high is not None
    return f"{'<' if high[0] == ')' else '<='} {high[1]:g}"


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = AloftConfig
    for part in loc:
        field = model.model_fields.get(part)
        if field is None or not (
            isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        ):
            return None
        model = field.annotation
    return model


def _field_names_at(loc: list[str]) -> list[str]:
    model = _model_at(loc)
    return sorted(model.model_fields) if model else []


def _field_type_at(loc: list[str]) -> str:
    model = _model_at(loc[:-1])
    field = model.model_fields.get(loc[-1]) if model else None
    return _type_name(field.annotation) if field else "the documented type"


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    return str(annotation).replace("typing.", "")


def describe_fields() -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, doc) for every field, for ``aloft train --help``."""
    rows = []
    for section_name, section_field in AloftConfig.model_fields.items():
        section = section_field.annotation
        assert isinstance(section, type) and issubclass(section, BaseModel)
        rows += [(f"{section_name}.{key}", *rest) for key, *rest in describe_model(section)]
    return rows


def describe_model(model: type[BaseModel]) -> list[tuple[str, str, str, str]]:
    """(key, type, default, doc) for every field of a pydantic model (its attribute docstrings are
    the docs when it sets ``use_attribute_docstrings``; else each field's ``description``)."""
    rows = []
    for name, field in model.model_fields.items():
        doc = " ".join((field.description or "").split())
        default = "required" if field.is_required() else repr(field.default)
        rows.append((name, _type_name(field.annotation), default, doc))
    return rows


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys: ``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (empty dicts stay values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
