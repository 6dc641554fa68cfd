"""Run a tinker-cookbook recipe, its code unchanged, against ``aloft tinker-serve`` with no hub access.

    python -m aloft.tinker.cookbook tinker_cookbook.recipes.rl_loop \\
        base_url=http://127.0.0.1:8001 model_name=smollm2-135m-instruct loss_fn=importance_sampling

The recipe module runs as ``__main__`` (its own ``chz`` entry point reads the ``key=value`` arguments);
this runner only answers the three things a recipe would fetch from the Hugging Face hub or look up in
the cookbook's tables of hosted models, and touches nothing else:

- the tokenizer: ``model_name`` is registered with the cookbook (``register_tokenizer``) as aloft's
  tokenizer for that model (a built-in name, a local directory or a cached hub id);
- the model's attributes (``model_info.get_model_attributes``, which knows only Tinker's hosted
  models): a model it does not know gets the ``qwen3_instruct`` renderer when its tokenizer speaks
  ChatML (``<|im_start|>``; SmolLM2 does: the renderer writes SmolLM2's chat format token for
  token, less the default system line), else ``role_colon``;
- the datasets the minimal loops load by hub name (``openai/gsm8k``, ``HuggingFaceH4/no_robots``):
  ``datasets.load_dataset`` reads, for those names only, a local dataset directory in the hub's own
  layout (a README.md that names the configs, parquet files per split), built once from
  reasoning-gym's ``basic_arithmetic`` ("Calculate 4 + 1.") under ``<aloft cache>/datasets/``. These
  are stand-ins with the same columns, not the real sets: the gsm8k one is one-digit sums a 135M
  model can learn, its ``answer`` a worked line ending ``#### N`` as GSM8K's do; the no_robots one is
  two-turn chats whose reply works the sum out and boxes it.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOCAL_API_KEY = "tml-aloft-local"
"""The key the runner gives the SDK when ``TINKER_API_KEY`` is unset (the SDK needs one to start)."""

RL_LOOP_SUFFIX = " Provide a numerical answer without units, written inside \\boxed{}."
"""What tinker-cookbook's ``rl_loop`` appends to every question."""

RL_LOOP_FEW_SHOT = [
    {"role": "user", "content": "How many r's are in strawberry?" + RL_LOOP_SUFFIX},
    {
        "role": "assistant",
        "content": "Let's spell the word out and number all the letters: 1) s 2) t 3) r 4) a 5) w 6) b "
        "7) e 8) r 9) r 10) y. We have r's at positions 3, 8, and 9. \\boxed{3}",
    },
]
"""The example turn ``rl_loop`` puts before every question: benchmarks that pose its task to other
trainers start from the same conversation."""

STANDIN_SIZES = {"train": 2000, "test": 200}
"""Rows per split of each stand-in dataset."""

_SPLIT_SEEDS = {"train": 0, "test": 1}
"""reasoning-gym seeds of the splits (different seeds: the test sums are drawn apart from train's)."""

_README = """---
configs:
- config_name: {config}
  data_files:
{files}
---
An offline stand-in for the hub dataset {name}, written by aloft.tinker.cookbook (see its docstring).
"""


def arithmetic_items(split: str) -> list[dict[str, str]]:
    """reasoning-gym ``basic_arithmetic`` items (two one-digit terms, ``+``): ``question``, ``answer``."""
    import reasoning_gym

    items = reasoning_gym.create_dataset(
        "basic_arithmetic",
        size=STANDIN_SIZES[split],
        seed=_SPLIT_SEEDS[split],
        min_terms=2,
        max_terms=2,
        min_digits=1,
        max_digits=1,
        operators=("+",),
        allow_parentheses=False,
        allow_negation=False,
    )
    return [{"question": item["question"], "answer": str(item["answer"])} for item in items]


def _worked_sum(question: str) -> str:
    """'Calculate 4 + 1.' -> '4 + 1'."""
    return question.removeprefix("Calculate ").rstrip(".")


def gsm8k_rows(split: str) -> list[dict[str, str]]:
    """GSM8K's columns: ``question`` and an ``answer`` whose last line is ``#### N``."""
    return [
        {
            "question": item["question"],
            "answer": f"{_worked_sum(item['question'])} = {item['answer']}\n#### {item['answer']}",
        }
        for item in arithmetic_items(split)
    ]


def no_robots_rows(split: str) -> list[dict[str, Any]]:
    """no_robots' columns: ``prompt``, ``prompt_id``, ``messages`` (user, assistant) and ``category``."""
    rows = []
    for index, item in enumerate(arithmetic_items(split)):
        reply = (
            f"{_worked_sum(item['question'])} = {item['answer']}. The answer is \\boxed{{{item['answer']}}}."
        )
        rows.append(
            {
                "prompt": item["question"],
                "prompt_id": f"{split}-{index}",
                "messages": [
                    {"role": "user", "content": item["question"]},
                    {"role": "assistant", "content": reply},
                ],
                "category": "Math",
            }
        )
    return rows


STANDINS: dict[str, tuple[str, dict[str, str], Callable[[str], list[dict[str, Any]]]]] = {
    "openai/gsm8k": ("main", {"train": "train", "test": "test"}, gsm8k_rows),
    "HuggingFaceH4/no_robots": ("default", {"train": "train", "test": "test"}, no_robots_rows),
}
"""Hub name -> (config name, split -> file stem, rows of a split)."""


def standin_dir(name: str) -> Path:
    """The local dataset directory standing in for hub dataset ``name``, written once (atomically)."""
    from aloft.models import cache_dir
    from aloft.training.checkpoint import write_directory_atomically

    config, splits, rows_of = STANDINS[name]
    final = cache_dir() / "datasets" / "tinker-cookbook" / name
    if (final / "README.md").is_file():
        return final

    def write(directory: Path) -> None:
        import datasets

        (directory / config).mkdir()
        files = []
        for split, stem in splits.items():
            path = f"{config}/{stem}-00000-of-00001.parquet"
            datasets.Dataset.from_list(rows_of(split)).to_parquet(str(directory / path))
            files.append(f"  - split: {split}\n    path: {path}")
        (directory / "README.md").write_text(_README.format(config=config, files="\n".join(files), name=name))

    return write_directory_atomically(final, write)


def install_offline_stand_ins(model_name: str) -> None:
    """Answer the tokenizer, the model attributes and the two hub datasets as the module doc says."""
    import datasets
    from tinker_cookbook import model_info, tokenizer_utils
    from tinker_cookbook.exceptions import ConfigurationError

    from aloft.models import load_tokenizer

    tokenizer = load_tokenizer(model_name)
    tokenizer_utils.register_tokenizer(model_name, lambda: tokenizer)

    known_attributes = model_info.get_model_attributes
    chat_ml = "<|im_start|>" in tokenizer.get_vocab()

    def attributes(name: str) -> model_info.ModelAttributes:
        try:
            return known_attributes(name)
        except (ConfigurationError, KeyError, ValueError):
            if name.split(":", 1)[0] != model_name:
                raise
        return model_info.ModelAttributes(
            organization="local",
            version_str=model_name,
            size_str="?",
            is_chat=True,
            recommended_renderers=("qwen3_instruct",) if chat_ml else ("role_colon",),
        )

    model_info.get_model_attributes = attributes

    load_from_hub = datasets.load_dataset

    def load_dataset(path: str, *args: Any, **kwargs: Any) -> Any:
        if path in STANDINS:
            path = str(standin_dir(path))
        return load_from_hub(path, *args, **kwargs)

    datasets.load_dataset = load_dataset


def _argument(arguments: list[str], key: str) -> str | None:
    for argument in arguments:
        if argument.startswith(f"{key}="):
            return argument.split("=", 1)[1]
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m aloft.tinker.cookbook RECIPE_MODULE key=value ...``: run the recipe as ``__main__``."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or "=" in arguments[0]:
        print(
            "usage: python -m aloft.tinker.cookbook RECIPE_MODULE model_name=MODEL base_url=URL [key=value ...]"
            " (e.g. tinker_cookbook.recipes.rl_loop)",
            file=sys.stderr,
        )
        return 2
    recipe, recipe_arguments = arguments[0], arguments[1:]
    model_name = _argument(recipe_arguments, "model_name")
    if model_name is None or _argument(recipe_arguments, "base_url") is None:
        print(
            "aloft.tinker.cookbook: pass model_name=<the model tinker-serve serves> and "
            "base_url=http://127.0.0.1:<port> (the recipes' defaults name a hosted model and service)",
            file=sys.stderr,
        )
        return 2
    # The SDK refuses to start without a key; a server started without --api-key takes any.
    os.environ.setdefault("TINKER_API_KEY", LOCAL_API_KEY)
    install_offline_stand_ins(model_name)
    sys.argv = [recipe, *recipe_arguments]
    runpy.run_module(recipe, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
