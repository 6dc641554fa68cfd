"""The device story (aloft.models.device): what `trainer.device` resolves to, and what follows it:
autocast's device, the process-group backend, the RNG states a checkpoint keeps, the workers'
batches and offloading. This machine has no GPU: CUDA's presence is simulated only where the
question is which device aloft picks, never for anything that computes."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.training.test_training_forward import trajectories

from aloft.config import AloftConfig
from aloft.models.device import autocast, process_group_backend, resolve_device, rng_states, set_rng_states
from aloft.training import collate


def make_batch():
    return collate(trajectories(), pad_token_id=0, group_index={f"g{k}": k for k in range(3)})


@pytest.fixture
def two_gpus(monkeypatch):
    """torch answers as on a machine with two GPUs (only the device-choosing calls)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_auto_is_the_cpu_here_and_cpu_is_always_the_cpu():
    assert not torch.cuda.is_available()
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_on_a_gpu_machine_is_one_gpu_per_local_rank(two_gpus, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("auto") == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "1")  # as torchrun and aloft's spawned ranks set it
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cuda", local_rank=0) == torch.device("cuda", 0)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)  # named: taken as given
    assert resolve_device("cpu") == torch.device("cpu")


def test_a_gpu_that_is_not_there_is_refused_with_the_fix(two_gpus, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ValueError, match=r"trainer.device=auto resolves to cuda:2 but torch sees 2 GPU\(s\)"):
        resolve_device("auto")
    with pytest.raises(ValueError, match=r"engine.device=cuda:5 resolves to cuda:5 .*engine.device=cuda:0"):
        resolve_device("cuda:5", key="engine.device")


def test_cuda_without_cuda_and_unknown_devices_are_refused():
    with pytest.raises(ValueError, match="torch sees no CUDA GPU .* use trainer.device=auto or cpu"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="'gpu' is not a device: use auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")


def test_the_config_takes_devices_by_their_torch_names():
    AloftConfig.model_validate(
        {"trainer": {"device": "cuda:1"}, "engine": {"device": "cpu"}, "data": {"builder": "x"}}
    )
    with pytest.raises(ValueError, match="trainer.device"):
        AloftConfig.model_validate({"trainer": {"device": "gpu0"}, "data": {"builder": "x"}})


def test_nccl_for_gpus_gloo_for_cpus():
    assert process_group_backend("cuda:1") == "nccl"
    assert process_group_backend(torch.device("cpu")) == "gloo"
    # FSDP2's CPU offload reduces CPU-held gradients too: gloo beside NCCL.
    assert process_group_backend("cuda:0", cpu_collectives=True) == "cpu:gloo,cuda:nccl"
    assert process_group_backend("cpu", cpu_collectives=True) == "gloo"


def test_the_ray_driver_leaves_devices_to_its_actors():
    """A GPU-less head node drives GPU actors: trainer.device=cuda is theirs to resolve."""
    from aloft.config import ConfigError
    from aloft.trainer.preflight import check_devices

    gpu = {"trainer": {"device": "cuda"}, "data": {"builder": "x"}}
    with pytest.raises(ConfigError, match="trainer.device=cuda but torch sees no CUDA GPU"):
        check_devices(AloftConfig.model_validate(gpu))
    check_devices(AloftConfig.model_validate({**gpu, "placement": {"backend": "ray"}}))


def test_autocast_runs_on_the_device_it_is_given():
    with autocast("cpu", True):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert not torch.is_autocast_enabled("cuda")
    with autocast("cpu", False):
        assert not torch.is_autocast_enabled("cpu")
    with pytest.warns(UserWarning, match="CUDA is not available"):  # torch's, on this GPU-less machine
        context = autocast(torch.device("cuda", 0), True)
    assert isinstance(context, torch.autocast) and context.device == "cuda"


def test_the_policy_forward_autocasts_on_the_workers_device(tiny_model_dir):
    from aloft.training import PolicyWorker
    from aloft.training.optim import OptimSettings

    policy = PolicyWorker(tiny_model_dir, OptimSettings(lr=1e-3, bf16_autocast=True), device="cpu")
    seen = []
    policy.model.register_forward_pre_hook(
        lambda *_: seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
    )
    logprobs = policy.compute_logprobs(make_batch())
    assert seen and all(entry == (True, torch.bfloat16) for entry in seen)
    assert logprobs.device == torch.device("cpu") and logprobs.dtype == torch.float32


def test_rng_states_round_trip_and_keep_gpu_states_only_where_cuda_is_in_use():
    state = rng_states()
    assert set(state) == {"python", "numpy", "torch", "cuda"} and state["cuda"] is None  # no GPU here
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    set_rng_states(state)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected
    # A checkpoint written before GPU states were kept, and one written on a GPU machine, resume here.
    old = {k: v for k, v in state.items() if k != "cuda"}
    set_rng_states(old)
    set_rng_states({**state, "cuda": [torch.ByteTensor(16)]})
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected


def test_gpu_rng_states_are_saved_and_restored_for_every_gpu(monkeypatch):
    saved = [torch.arange(4, dtype=torch.uint8), torch.arange(4, 8, dtype=torch.uint8)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: saved)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.extend)
    state = rng_states()
    assert state["cuda"] is saved
    set_rng_states(state)
    assert restored == saved
    with pytest.raises(
        ValueError, match="RNG states of 3 GPU.* sees 2: resume with the same CUDA_VISIBLE_DEVICES"
    ):
        set_rng_states({**state, "cuda": saved + saved[:1]})


def test_a_run_checkpoints_every_generator_it_draws_from(tiny_overrides):
    from tests.trainer.test_trainer import BASE

    from aloft.config import load_config
    from aloft.trainer import train

    cfg = load_config(None, [*BASE, *tiny_overrides, "trainer.max_steps=1", "trainer.checkpoint_every=1"])
    train(cfg)
    (checkpoint,) = (Path(cfg.trainer.run_root) / cfg.trainer.name / "checkpoints").glob("step_*")
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
    assert set(state["rng"]) == {"python", "numpy", "torch", "cuda"}


def test_offloading_moves_every_weight_gradient_and_optimizer_tensor(tiny_model_dir):
    """``move_to`` reaches all of the learner's state (to the meta device here: nothing may stay
    behind in CPU memory), and a round trip leaves it equal."""
    from aloft.training import PolicyWorker
    from aloft.training.optim import OptimSettings

    policy = PolicyWorker(tiny_model_dir, OptimSettings(lr=1e-2, micro_batch_size=2))
    for parameter in policy.model.parameters():  # one step, so that AdamW holds moments
        parameter.grad = torch.full_like(parameter, 1e-3)
    policy.optimizer.step()
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    moments = {k: v.clone() for state in policy.optimizer.state.values() for k, v in state.items()}
    policy.move_to("cpu")
    policy.move_to(policy.device)
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    after = {k: v for state in policy.optimizer.state.values() for k, v in state.items()}
    assert all(torch.equal(moments[k], after[k]) for k in moments)

    policy.move_to("meta")
    tensors = [*policy.model.parameters()] + [
        v for state in policy.optimizer.state.values() for v in state.values() if v.dim() > 0
    ]
    assert tensors and all(t.device.type == "meta" for t in tensors)
