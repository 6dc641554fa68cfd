"""Settings a plugin declares for itself: a pydantic model given as ``params=`` at registration.

Every extension point takes one (``@register_policy_loss``, ``@register_advantage_estimator``,
``@register_plan``, ``@register_env``); the user sets its fields with the dotted keys of the
plugin's config section (``algorithm.params.beta=0.1``, ``trainer.plan_params.lag=2``,
``env.config.max_turns=3``). This module holds what they share: building the settings from the
section's values and checking them before a model loads, as one line that names the key.
Torch-free.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["check_settings", "checked_model", "settings_of", "validated_settings"]


def checked_model(owner: str, params: Any) -> type[BaseModel] | None:
    """``params`` itself when it is a pydantic model class (or None); else a TypeError naming ``owner``."""
    if params is not None and not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise TypeError(f"{owner}: params= must be a pydantic BaseModel class, got {params!r}")
    return params


def settings_of(model: type[BaseModel], values: dict[str, Any] | None) -> BaseModel:
    """``model`` built from the keys of ``values`` it declares (defaults for the rest)."""
    return model(**{k: v for k, v in (values or {}).items() if k in model.model_fields})


def check_settings(
    section: str,
    selected: dict[str, type[BaseModel] | None],
    values: dict[str, Any],
    *,
    undeclared_readers: bool = False,
) -> None:
    """Every key of ``values`` (the config mapping at ``section``, e.g. ``algorithm.params``) is a
    field of the model of one of the ``selected`` plugins (``"policy loss my_loss"`` -> its model, or
    None when it declared none), and each model's fields validate; otherwise a one-line ValueError
    naming the key and the fix.

    ``undeclared_readers``: a selected plugin without a model reads ``section`` as it likes (an env
    reads ``env.config``), so a key no model declares may be its own and is let through.
    """
    owners = {name: model for name, model in selected.items() if model is not None}
    declared = {field for model in owners.values() for field in model.model_fields}
    if not (undeclared_readers and len(owners) < len(selected)):
        for key in values:
            if key not in declared:
                theirs = ", ".join(sorted(declared)) or "none"
                raise ValueError(
                    f"{section}.{key} is not a setting of the {' or the '.join(selected)} "
                    f"(their settings: {theirs}); fix the key or select the plugin that declares it"
                )
    for owner, model in owners.items():
        validated_settings(section, owner, model, values)


def validated_settings(section: str, owner: str, model: type[BaseModel], values: dict[str, Any]) -> BaseModel:
    """``settings_of(model, values)``, or a one-line ValueError naming ``section``'s bad key."""
    try:
        return settings_of(model, values)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(str(part) for part in problem["loc"])
        raise ValueError(
            f"{section}.{key}={values.get(key)!r} is invalid for the {owner}: {problem['msg']}"
        ) from None
