"""The official ``tinker`` SDK (PyPI, 0.38) against ``aloft tinker-serve`` on loopback: a real client
no one here wrote, a real server process started by the CLI."""

from __future__ import annotations

import time

import httpx
import pytest

tinker = pytest.importorskip(
    "tinker", reason="the tinker extra is not installed: pip install 'aloft[tinker]'"
)
from tests.tinker.serving import API_KEY, start_server, stop  # noqa: E402
from tinker import types  # noqa: E402


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """``aloft tinker-serve`` on the tiny model; yields its base URL."""
    process, url = start_server(
        tiny_model_dir,
        "--max-length",
        "64",
        "--checkpoint-dir",
        str(tmp_path_factory.mktemp("tinker-checkpoints")),
    )
    yield url
    stop(process)


@pytest.fixture(scope="module")
def service(server):
    with tinker.ServiceClient(base_url=server, api_key=API_KEY) as client:
        yield client


def sft_datum(tokens: list[int], weights: list[float] | None = None) -> types.Datum:
    """Predict ``tokens[1:]`` from ``tokens[:-1]`` (Tinker's alignment), every target weighted 1."""
    targets = tokens[1:]
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": targets, "weights": weights or [1.0] * len(targets)},
    )


def test_forward_backward_and_optim_step_lower_the_loss_of_a_fixed_batch(service, tiny_model_dir):
    training = service.create_lora_training_client(base_model=tiny_model_dir, rank=8).result()
    batch = [sft_datum([5, 9, 14, 3, 27, 8, 11, 40]), sft_datum([6, 6, 21, 33, 2])]
    losses = []
    for _ in range(6):
        result = training.forward_backward(batch, "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=2e-2)).result()
        losses.append(result.metrics["loss:sum"])
        # cross_entropy is the sum of -logprob over the weighted targets of every datum.
        logprobs = [output["logprobs"].tolist() for output in result.loss_fn_outputs]
        assert [len(x) for x in logprobs] == [7, 4]
        assert result.metrics["loss:sum"] == pytest.approx(-sum(map(sum, logprobs)), rel=1e-5)
    assert losses[-1] < 0.7 * losses[0], losses


def test_forward_only_leaves_the_weights_alone(service, tiny_model_dir):
    training = service.create_lora_training_client(base_model=tiny_model_dir, rank=4).result()
    batch = [sft_datum([1, 2, 3, 4, 5, 6])]
    first = training.forward(batch, "cross_entropy").result().metrics["loss:sum"]
    second = training.forward(batch, "cross_entropy").result().metrics["loss:sum"]
    assert first == second


def test_clients_on_one_server_keep_their_own_adapters(service, tiny_model_dir):
    """Training one client does not move another's loss: each is its own adapter and optimizer."""
    trained = service.create_lora_training_client(base_model=tiny_model_dir, rank=4).result()
    untouched = service.create_lora_training_client(base_model=tiny_model_dir, rank=4).result()
    batch = [sft_datum([7, 8, 9, 10, 11, 12, 13])]
    before = untouched.forward(batch, "cross_entropy").result().metrics["loss:sum"]
    losses = []
    for _ in range(4):
        losses.append(trained.forward_backward(batch, "cross_entropy").result().metrics["loss:sum"])
        trained.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert losses[0] == pytest.approx(before, abs=1e-5)  # both start from the base model (B = 0)
    assert trained.forward(batch, "cross_entropy").result().metrics["loss:sum"] < before, losses
    assert untouched.forward(batch, "cross_entropy").result().metrics["loss:sum"] == pytest.approx(
        before, abs=1e-6
    )


def test_bad_requests_get_the_sdk_s_errors(service, server, tiny_model_dir):
    with pytest.raises(tinker.BadRequestError, match="is not served here"):
        service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result()
    training = service.create_lora_training_client(base_model=tiny_model_dir, rank=4).result()
    with pytest.raises(tinker.BadRequestError, match="loss_fn 'dpo' is not served by aloft"):
        training.forward_backward([sft_datum([1, 2, 3])], "dpo").result()
    # stable_reinforce is refused on purpose, with why and what to use, and so is its sampler flag.
    with pytest.raises(
        tinker.BadRequestError, match="'stable_reinforce' is not served by aloft: its objective"
    ):
        training.forward_backward([sft_datum([1, 2, 3])], "stable_reinforce").result()
    recording = training.save_weights_and_get_sampling_client(record_stability_info=True).result()
    with pytest.raises(tinker.BadRequestError, match="record_stability_info is not served by aloft"):
        recording.sample(types.ModelInput.from_ints([1, 2]), 1, types.SamplingParams(max_tokens=2)).result()
    with pytest.raises(tinker.BadRequestError, match="over this server's limit of 64"):
        training.forward_backward([sft_datum(list(range(3, 80)))], "cross_entropy").result()
    with pytest.raises(tinker.BadRequestError, match="needs loss_fn_inputs\\['advantages'\\]; datum 0 has"):
        datum = types.Datum(
            model_input=types.ModelInput.from_ints([1, 2]),
            loss_fn_inputs={"target_tokens": [2, 3], "logprobs": [0.0, 0.0]},
        )
        training.forward_backward([datum], "importance_sampling").result()
    # A client that made no mistake still trains after all that.
    assert training.forward(batch := [sft_datum([4, 5, 6])], "cross_entropy").result().metrics["loss:sum"] > 0
    del batch
    # A wrong key on a server that requires one, and an unknown session, as raw HTTP.
    unknown = httpx.post(
        f"{server}/api/v1/session_heartbeat", json={"session_id": "nope", "type": "session_heartbeat"}
    )
    assert unknown.status_code == 404 and "no session 'nope'" in unknown.json()["detail"]


def test_a_server_started_with_an_api_key_refuses_another(tiny_model_dir):
    process, url = start_server(tiny_model_dir, "--api-key", API_KEY)
    try:
        with pytest.raises(tinker.AuthenticationError, match="wrong or missing API key"):
            tinker.ServiceClient(base_url=url, api_key="tml-someone-else").create_lora_training_client(
                base_model=tiny_model_dir, rank=4
            ).result()
        with tinker.ServiceClient(base_url=url, api_key=API_KEY) as client:
            training = client.create_lora_training_client(base_model=tiny_model_dir, rank=4).result()
            assert training.forward([sft_datum([3, 4, 5])], "cross_entropy").result().metrics["loss:sum"] > 0
    finally:
        stop(process)


def test_sample_returns_tokens_and_logprobs_that_compute_logprobs_repeats(service, tiny_model_dir):
    training = service.create_lora_training_client(base_model=tiny_model_dir, rank=8).result()
    batch = [sft_datum([5, 9, 14, 3, 27, 8, 11, 40])]
    for _ in range(2):  # adapters that are not zero, so the sampler's weights differ from the base
        training.forward_backward(batch, "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints([5, 9, 14])
    result = sampler.sample(
        prompt, num_samples=3, sampling_params=types.SamplingParams(max_tokens=6, seed=7)
    ).result()
    assert len(result.sequences) == 3
    assert len({tuple(sequence.tokens) for sequence in result.sequences}) > 1  # one seed, three samples
    for sequence in result.sequences:
        assert 1 <= len(sequence.tokens) <= 6 and len(sequence.logprobs) == len(sequence.tokens)
        assert sequence.stop_reason in ("stop", "length")
        scored = sampler.compute_logprobs(types.ModelInput.from_ints([5, 9, 14, *sequence.tokens])).result()
        assert scored[0] is None
        assert scored[3:] == pytest.approx(sequence.logprobs, abs=1e-4)
    # The sampler holds the training client's weights: its prompt logprobs are the client's forward logprobs.
    tokens = [5, 9, 14, 3, 27, 8, 11, 40]
    forward = (
        training.forward([sft_datum(tokens)], "cross_entropy")
        .result()
        .loss_fn_outputs[0]["logprobs"]
        .tolist()
    )
    assert sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[1:] == pytest.approx(
        forward, abs=1e-4
    )


def test_save_weights_for_sampler_changes_what_the_sampler_generates(service, tiny_model_dir):
    """Greedy decoding from the base model, then from weights trained towards one continuation."""
    training = service.create_lora_training_client(base_model=tiny_model_dir, rank=8).result()
    prompt = [11, 12, 13]
    target = [50, 51, 52, 53]
    greedy = types.SamplingParams(max_tokens=4, temperature=0.0)
    base = service.create_sampling_client(base_model=tiny_model_dir)
    base = base.result() if hasattr(base, "result") else base
    before = base.sample(types.ModelInput.from_ints(prompt), 1, greedy).result().sequences[0].tokens
    losses = []
    for _ in range(10):
        losses.append(
            training.forward_backward([sft_datum(prompt + target)], "cross_entropy")
            .result()
            .metrics["loss:sum"]
        )
        training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert losses[-1] < 0.01 * losses[0], losses
    path = training.save_weights_for_sampler("taught").result().path
    assert path.startswith("tinker://") and path.endswith("/sampler_weights/taught")
    taught = service.create_sampling_client(model_path=path)
    taught = taught.result() if hasattr(taught, "result") else taught
    after = taught.sample(types.ModelInput.from_ints(prompt), 1, greedy).result().sequences[0].tokens
    assert after == target != before
    # The base sampler is still the base model after the engine switched weights.
    assert base.sample(types.ModelInput.from_ints(prompt), 1, greedy).result().sequences[0].tokens == before


def test_save_state_then_load_state_into_a_new_client_continues_bit_identically(service, tiny_model_dir):
    """Two more steps after a save, by the saving client and by a client made from the saved state
    with its optimizer: the same losses to the last bit, and the same weights."""
    batch = [sft_datum([5, 9, 14, 3, 27, 8, 11, 40]), sft_datum([6, 6, 21, 33, 2])]
    adam = types.AdamParams(learning_rate=1e-2)

    def steps(client, n):
        losses = []
        for _ in range(n):
            losses.append(client.forward_backward(batch, "cross_entropy").result().metrics["loss:sum"])
            client.optim_step(adam).result()
        return losses

    original = service.create_lora_training_client(base_model=tiny_model_dir, rank=8, seed=3).result()
    steps(original, 2)
    saved = original.save_state("two-steps").result().path
    assert saved.startswith("tinker://") and saved.endswith("/weights/two-steps")
    resumed = service.create_training_client_from_state_with_optimizer(saved).result()
    assert steps(resumed, 2) == steps(original, 2)
    final = [
        output["logprobs"].tolist()
        for output in original.forward(batch, "cross_entropy").result().loss_fn_outputs
    ]
    again = [
        output["logprobs"].tolist()
        for output in resumed.forward(batch, "cross_entropy").result().loss_fn_outputs
    ]
    assert final == again
    # Without the optimizer state the same steps differ (Adam's moments start over).
    fresh = service.create_training_client_from_state(saved).result()
    assert steps(fresh, 2) != steps(
        service.create_training_client_from_state_with_optimizer(saved).result(), 2
    )
    # Into an existing client of the same settings: its weights become the saved ones.
    other = service.create_lora_training_client(base_model=tiny_model_dir, rank=8, seed=3).result()
    other.load_state(saved).result()
    assert other.forward(batch, "cross_entropy").result().metrics["loss:sum"] == pytest.approx(
        service.create_training_client_from_state(saved)
        .result()
        .forward(batch, "cross_entropy")
        .result()
        .metrics["loss:sum"],
        abs=0,
    )


def test_save_state_refuses_while_gradients_wait_for_optim_step(service, tiny_model_dir):
    """A checkpoint holds weights and AdamW state, not gradients: save_state between forward_backward
    and optim_step is a user error naming the fix, writes nothing, and leaves the gradients to the
    optim_step that follows (the same step as a twin client that never tried to save)."""
    batch = [sft_datum([5, 9, 14, 3, 27, 8, 11, 40])]
    adam = types.AdamParams(learning_rate=1e-2)
    saving = service.create_lora_training_client(base_model=tiny_model_dir, rank=4, seed=5).result()
    twin = service.create_lora_training_client(base_model=tiny_model_dir, rank=4, seed=5).result()
    for client in (saving, twin):
        client.forward_backward(batch, "cross_entropy").result()
    with pytest.raises(tinker.RequestFailedError) as refused:
        saving.save_state("mid-step").result()
    assert refused.value.category == types.RequestErrorCategory.User
    assert "gradients from 1 forward_backward call waiting for optim_step" in str(refused.value)
    assert "call optim_step first" in str(refused.value)
    with pytest.raises(tinker.NotFoundError, match="no checkpoint at"):
        service.create_training_client_from_state(f"tinker://{saving.model_id}/weights/mid-step").result()
    for client in (saving, twin):
        client.optim_step(adam).result()

    def logprobs(client):
        return client.forward(batch, "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()

    assert logprobs(saving) == logprobs(twin)
    saved = saving.save_state("after-step").result().path  # nothing pending once the step ran
    # The other way out: loading a saved state discards the pending gradients.
    saving.forward_backward(batch, "cross_entropy").result()
    saving.load_state_with_optimizer(saved).result()
    saving.save_state("after-load").result()
    assert logprobs(saving) == logprobs(twin)


def test_checkpoint_paths_that_name_nothing_or_clash_are_refused(service, tiny_model_dir):
    training = service.create_lora_training_client(base_model=tiny_model_dir, rank=4).result()
    training.save_state("once").result()
    with pytest.raises(
        tinker.BadRequestError, match="exists; save under another name or pass overwrite=True"
    ):
        training.save_state("once").result()
    with pytest.raises(tinker.NotFoundError, match="no checkpoint at"):
        service.create_training_client_from_state("tinker://session-1:train:0/weights/never-saved").result()
    with pytest.raises(
        tinker.BadRequestError, match="not a tinker://<model_id>/<weights|sampler_weights>/<name> path"
    ):
        training.load_state("tinker://only-two/parts").result()
    rank_two = service.create_lora_training_client(base_model=tiny_model_dir, rank=2).result()
    path = training.save_state("rank-four").result().path
    with pytest.raises(tinker.RequestFailedError, match="differ from client"):
        rank_two.load_state(path).result()


def test_a_dead_client_s_lease_ends_and_a_live_one_keeps_its_state(tiny_model_dir, tmp_path):
    """A session that stops talking (a client killed without closing) has its training clients freed
    after --session-timeout; a live SDK client on the same server keeps training throughout."""
    process, url = start_server(tiny_model_dir, "--session-timeout", "4", "--checkpoint-dir", str(tmp_path))
    try:
        headers = {"X-API-Key": API_KEY}
        dead = httpx.post(
            f"{url}/api/v1/create_session", json={"tags": [], "type": "create_session"}, headers=headers
        )
        dead_session = dead.json()["session_id"]
        created = httpx.post(
            f"{url}/api/v1/create_model",
            json={
                "session_id": dead_session,
                "model_seq_id": 0,
                "base_model": tiny_model_dir,
                "lora_config": {"rank": 4},
            },
            headers=headers,
        ).json()
        dead_model = created["model_id"]
        with tinker.ServiceClient(base_url=url, api_key=API_KEY) as live_service:
            live = live_service.create_lora_training_client(base_model=tiny_model_dir, rank=4).result()
            batch = [sft_datum([5, 6, 7, 8, 9])]
            losses = []
            deadline = time.monotonic() + 6  # past the dead session's timeout, with requests every step
            while time.monotonic() < deadline:
                losses.append(live.forward_backward(batch, "cross_entropy").result().metrics["loss:sum"])
                live.optim_step(types.AdamParams(learning_rate=1e-2)).result()
            assert losses[-1] < losses[0]
            info = httpx.post(f"{url}/api/v1/get_info", json={"model_id": dead_model}, headers=headers)
            assert info.status_code == 404 and "no request or heartbeat for 4 s" in info.json()["detail"]
            beat = httpx.post(
                f"{url}/api/v1/session_heartbeat", json={"session_id": dead_session}, headers=headers
            )
            assert beat.status_code == 410  # the SDK stops heartbeating an ended session
            assert live.forward(batch, "cross_entropy").result().metrics["loss:sum"] < losses[0]
    finally:
        stop(process)


def test_forward_backward_custom_runs_a_client_side_loss_through_the_server(service, tiny_model_dir):
    """The SDK's custom loss: a forward for the logprobs, the user's loss on them, then a weighted
    cross_entropy backward. With the loss -sum(logprobs) it must train exactly like cross_entropy."""
    import torch

    batch = [sft_datum([5, 9, 14, 3, 27, 8]), sft_datum([6, 6, 21, 33])]

    def negative_log_likelihood(data, logprobs):
        loss = -sum(lp.sum() for lp in logprobs)
        return loss, {"nll:sum": float(loss.detach())}

    custom = service.create_lora_training_client(base_model=tiny_model_dir, rank=4, seed=11).result()
    builtin = service.create_lora_training_client(base_model=tiny_model_dir, rank=4, seed=11).result()
    adam = types.AdamParams(learning_rate=1e-2)
    for _ in range(2):
        result = custom.forward_backward_custom(batch, negative_log_likelihood).result()
        custom.optim_step(adam).result()
        reference = builtin.forward_backward(batch, "cross_entropy").result()
        builtin.optim_step(adam).result()
        assert result.metrics["loss:sum"] == pytest.approx(reference.metrics["loss:sum"], rel=1e-5)
    after = [
        torch.tensor(o["logprobs"].tolist())
        for o in custom.forward(batch, "cross_entropy").result().loss_fn_outputs
    ]
    expected = [
        torch.tensor(o["logprobs"].tolist())
        for o in builtin.forward(batch, "cross_entropy").result().loss_fn_outputs
    ]
    for got, want in zip(after, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_concurrent_clients_get_their_own_errors_and_lose_no_state(server, tiny_model_dir):
    """Two SDK clients train at once on one server, one of them also sending bad requests: the bad
    ones get the SDK's errors, and the good client's losses equal a run on a quiet server's client."""
    from concurrent.futures import ThreadPoolExecutor

    batch = [sft_datum([5, 9, 14, 3, 27, 8, 11, 40])]
    adam = types.AdamParams(learning_rate=1e-2)

    def train(seed: int, misbehave: bool) -> tuple[list[float], list[str]]:
        with tinker.ServiceClient(base_url=server, api_key=API_KEY) as client:
            training = client.create_lora_training_client(
                base_model=tiny_model_dir, rank=4, seed=seed
            ).result()
            losses, errors = [], []
            for _ in range(4):
                if misbehave:  # a datum over --max-length, then a loss the server does not serve
                    for data, loss in (([sft_datum(list(range(3, 90)))], "cross_entropy"), (batch, "dpo")):
                        try:
                            training.forward_backward(data, loss).result()
                        except tinker.BadRequestError as error:
                            errors.append(str(error))
                losses.append(training.forward_backward(batch, "cross_entropy").result().metrics["loss:sum"])
                training.optim_step(adam).result()
            return losses, errors

    with ThreadPoolExecutor(2) as pool:
        good, bad = pool.submit(train, 21, False), pool.submit(train, 22, True)
        good_losses, _ = good.result()
        _, errors = bad.result()
    assert len(errors) == 8 and all("limit of 64" in e or "'dpo' is not served" in e for e in errors)
    quiet_losses, _ = train(21, False)
    assert good_losses == quiet_losses


def test_smollm2_trains_and_samples_through_the_sdk(tmp_path):
    """The same calls on a real model (SmolLM2-135M-Instruct): the tokenizer comes from get_info, a
    fixed sentence's loss falls, and sampled logprobs equal compute_logprobs."""
    process, url = start_server("smollm2-135m-instruct", "--checkpoint-dir", str(tmp_path))
    try:
        with tinker.ServiceClient(base_url=url, api_key=API_KEY) as client:
            training = client.create_lora_training_client(base_model="smollm2-135m-instruct", rank=8).result()
            tokenizer = training.get_tokenizer()
            tokens = tokenizer.encode("The capital of France is Paris, and the capital of Italy is Rome.")
            losses = []
            for _ in range(4):
                losses.append(
                    training.forward_backward([sft_datum(tokens)], "cross_entropy")
                    .result()
                    .metrics["loss:sum"]
                )
                training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
            assert losses[-1] < 0.7 * losses[0], losses
            sampler = training.save_weights_and_get_sampling_client().result()
            prompt = tokens[:6]
            sampled = sampler.sample(
                types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=8, seed=1)
            ).result()
            for sequence in sampled.sequences:
                scored = sampler.compute_logprobs(
                    types.ModelInput.from_ints(prompt + sequence.tokens)
                ).result()
                assert scored[len(prompt) :] == pytest.approx(sequence.logprobs, abs=1e-4)
    finally:
        stop(process)


def test_malformed_requests_are_400s_not_server_errors(server, service):
    """Raw HTTP, as a broken or foreign client would send it: 400 with the reason (a 5xx would make
    the SDK retry for minutes), and 404 for a future that does not exist."""
    headers = {"X-API-Key": API_KEY}
    session = httpx.post(
        f"{server}/api/v1/create_session", json={"type": "create_session"}, headers=headers
    ).json()
    cases = [
        (
            "create_model",
            {"session_id": session["session_id"], "model_seq_id": 0, "lora_config": {"rank": "eight"}},
        ),
        ("create_model", {"session_id": session["session_id"], "model_seq_id": "zero"}),
        ("optim_step", {"model_id": "nobody:train:0", "adam_params": {"learning_rate": 1e-3}}),
    ]
    for route, body in cases:
        response = httpx.post(f"{server}/api/v1/{route}", json=body, headers=headers)
        assert response.status_code in (400, 404), (route, response.status_code, response.text)
        assert response.json()["detail"]
    garbage = httpx.post(
        f"{server}/api/v1/forward_backward", content=bytes([0xFF, 0xFF, 0xFF, 0xFF]) + b" not protobuf",
        headers={**headers, "content-type": "application/x-protobuf"},
    )  # fmt: skip
    assert garbage.status_code == 400 and "not a ForwardBackwardRequest protobuf" in garbage.json()["detail"]
    not_json = httpx.post(
        f"{server}/api/v1/optim_step", content=b"{", headers={**headers, "content-type": "application/json"}
    )
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["detail"]
    unknown = httpx.post(
        f"{server}/api/v1/retrieve_future", json={"request_id": "req-999999"}, headers=headers
    )
    assert unknown.status_code == 404
