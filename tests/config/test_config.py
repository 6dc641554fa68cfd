"""Config: presets, dotted overrides, one-line errors, --help, saved resolved config."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from aloft.cli import main
from aloft.config import AloftConfig, ConfigError, describe_fields, load_config, presets, save_config


def test_quickstart_preset_and_overrides():
    cfg = load_config(
        "quickstart",
        [
            "trainer.max_steps=20",
            "algorithm.advantage=rloo",
            "optim.lr=1e-5",
            "generator.stop=[foo, bar]",
            "env=arithmetic",
        ],
    )
    assert "quickstart" in presets()
    assert cfg.trainer.max_steps == 20 and cfg.algorithm.advantage == "rloo"
    assert cfg.optim.lr == 1e-5 and cfg.generator.stop == ["foo", "bar"] and cfg.env.name == "arithmetic"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["trainer.max_stepz=3"],
            "unknown config key 'trainer.max_stepz'; did you mean 'trainer.max_steps'?",
        ),
        (["optim.lr=fast"], "config key 'optim.lr'"),
        (["algorithm.advantage=gae"], "set critic.enabled=true"),
        (
            ["trainer.prompts_per_step=6", "algorithm.mini_batches=4"],
            "not divisible by algorithm.mini_batches=4",
        ),
        (["generator.n_samples=1"], "set generator.n_samples >= 2"),
        (["generator.max_new_tokens=100", "generator.max_total_tokens=50"], "raise max_total_tokens"),
        (
            ["algorithm.loss_reduction=mean"],
            "'token_mean', 'seq_mean_token_mean', 'seq_mean_token_sum' or 'seq_mean_token_sum_norm'",
        ),
        (["trainer.max_steps=-1"], "trainer.max_steps=-1 must be >= 1"),
        (
            ["trainer.max_steps=0", "trainer.eval_before_training=false"],
            "0 only evaluates the starting model, with trainer.eval_before_training=true",
        ),
        (["nosuchsection.x=1"], "unknown config key 'nosuchsection'"),
        (
            ["placement.backend=ray", "placement.num_engines=2"],
            "raise num_processes or use placement.mode=disaggregated",
        ),
        (
            [
                "placement.backend=ray",
                "trainer.strategy=ulysses",
                "optim.packing=true",
                "trainer.num_processes=3",
            ],
            "set trainer.strategy=fsdp2",
        ),
        (
            ["trainer.strategy=ulysses", "trainer.num_processes=2", "model.gradient_checkpointing=true"],
            "does not recompute checkpointed layers yet: set model.gradient_checkpointing=false",
        ),
        (
            ["placement.backend=ray", "engine.backend=remote", "engine.urls=[http://127.0.0.1:8000]"],
            "use placement.backend=local for remote servers",
        ),
        (["placement.mode=spread"], "'colocated' or 'disaggregated'"),
        # Devices: a GPU-only setting on the CPU, FSDP2's options without FSDP2.
        (
            ["trainer.strategy=fsdp2", "trainer.device=cpu", "trainer.fsdp_cpu_offload=true"],
            "trainer.device=cpu trains in CPU memory already: set trainer.fsdp_cpu_offload=false",
        ),
        (["trainer.fsdp_mixed_precision=true"], "configure FSDP2: set trainer.strategy=fsdp2"),
        (["trainer.device=gpu"], "'trainer.device'"),
        (
            ["engine.sleep_level=2", "model.lora_rank=8"],
            "adapter syncs (placement.lora_sync=adapter) need the base weights kept: set engine.sleep_level=1",
        ),
        # Value ranges: each names the key, the value and the allowed range.
        (["optim.lr=-1e-5"], "config key 'optim.lr'=-1e-5 is out of range; set it to a value >= 0"),
        (
            ["generator.temperature=-0.5"],
            "'generator.temperature'=-0.5 is out of range; set it to a value >= 0",
        ),
        (["generator.top_p=5"], "'generator.top_p'=5 is out of range; set it to a value in (0, 1]"),
        (["algorithm.clip_high=-0.2"], "'algorithm.clip_high'=-0.2 is out of range; set it to a value >= 0"),
        (["algorithm.clip_low=1"], "'algorithm.clip_low'=1 is out of range; set it to a value in [0, 1)"),
        (["algorithm.kl_coef=-0.1"], "'algorithm.kl_coef'=-0.1 is out of range; set it to a value >= 0"),
        (
            ["trainer.keep_checkpoints=-1"],
            "'trainer.keep_checkpoints'=-1 is out of range; set it to a value >= 1",
        ),
        (["model.lora_rank=-3"], "'model.lora_rank'=-3 is out of range; set it to a value >= 0"),
        (["generator.n_samples=0"], "'generator.n_samples'=0 is out of range; set it to a value >= 1"),
        (
            ["trainer.max_error_share=1.5"],
            "'trainer.max_error_share'=1.5 is out of range; set it to a value in [0, 1]",
        ),
        (["optim.betas=[0.9, 1.5]"], "'optim.betas.1'=1.5 is out of range; input should be less than 1"),
        (["algorithm.geo_mask_low=1.5"], "algorithm.geo_mask_low=1.5 is above algorithm.geo_mask_high=1.02"),
    ],
)
def test_bad_config_is_one_clear_line(overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_config("quickstart", overrides)
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_unknown_preset_lists_presets():
    with pytest.raises(ConfigError, match="known presets"):
        load_config("nope")


def test_saved_config_round_trips(tmp_path):
    cfg = load_config("quickstart", ["trainer.max_steps=7"])
    save_config(cfg, tmp_path / "config.yaml")
    assert AloftConfig.model_validate(yaml.safe_load((tmp_path / "config.yaml").read_text())) == cfg
    assert load_config(str(tmp_path / "config.yaml")) == cfg


def test_every_field_is_documented():
    fields = describe_fields()
    assert len(fields) > 60
    undocumented = [key for key, _, _, doc in fields if not doc]
    assert not undocumented


def test_cli_help_version_and_errors(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    for key, *_ in describe_fields():
        assert key in out
    assert main(["train", "quickstart", "trainer.max_stepz=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aloft: config error: unknown config key") and "\n" not in err
    version = subprocess.run([sys.executable, "-m", "aloft.cli", "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("aloft 0.")


def test_engine_gpu_settings_reach_each_backend_under_its_own_names():
    settings = [
        "engine.tensor_parallel_size=2",
        "engine.gpu_memory_fraction=0.4",
        "engine.prefix_caching=false",
        "engine.sleep_level=2",
    ]
    vllm = load_config("quickstart", ["engine.backend=vllm", *settings]).engine_options()
    assert vllm == {
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.4,
        "enable_prefix_caching": False,
        "sleep_level": 2,
    }
    sglang = load_config("quickstart", ["engine.backend=sglang", *settings]).engine_options()
    assert sglang == {"tp_size": 2, "mem_fraction_static": 0.4, "disable_radix_cache": True}
    hf = load_config("quickstart", ["engine.device=cpu"]).engine_options()
    assert hf == {"prefix_cache_gb": 2.0, "min_shared_prefix": 64, "device": "cpu"}
    # Unset, the GPU share is each engine's own default.
    assert "gpu_memory_utilization" not in load_config("quickstart", ["engine.backend=vllm"]).engine_options()
