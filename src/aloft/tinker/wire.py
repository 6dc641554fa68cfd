"""The protobuf half of the Tinker wire protocol (SDK 0.38): ``forward_backward`` requests in, and
``forward_backward`` / ``sample`` results out.

The schema is the SDK's own (``tinker.proto.tinker_public_pb2``), so the server and the client
cannot drift apart. Token ids travel as little-endian int32 bytes; tensors as raw bytes in their
dtype (float32 or int64, dense or CSR); per-datum outputs as one ``ArrayRecord`` whose fields are
``BatchedTensor`` s (all datums' bytes concatenated, with ``num_datums + 1`` byte offsets).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tinker.proto import tinker_public_pb2 as pb

from aloft.tinker.errors import TinkerUserError

_NUMPY_DTYPES = {
    pb.DTYPE_FLOAT32: np.dtype(np.float32),
    pb.DTYPE_INT64: np.dtype(np.int64),
    pb.DTYPE_INT32: np.dtype(np.int32),
}


@dataclass(kw_only=True)
class Datum:
    """One training example: ``tokens`` ``[N]`` (the model input) and ``inputs`` (the loss inputs,
    each an array whose first dimension is aligned with ``tokens``: position i predicts target i)."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(kw_only=True)
class ForwardBackwardCall:
    """A decoded ``ForwardBackwardRequest`` (``forward_only`` for ``TrainingClient.forward``)."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: list[Datum]


def _tensor(message: pb.Tensor, name: str) -> np.ndarray:
    dtype = _NUMPY_DTYPES.get(message.dtype)
    if dtype is None:
        raise TinkerUserError(
            f"loss input {name!r} has an unsupported dtype ({message.dtype}); send float32 or int64"
        )
    shape = [int(size) for size in message.shape]
    if message.HasField("sparse_csr"):
        csr = message.sparse_csr
        if len(shape) != 2:
            raise TinkerUserError(f"sparse loss input {name!r} needs a 2-D shape, got {shape}")
        values = np.frombuffer(csr.values, dtype=dtype)
        rows = np.frombuffer(csr.crow_indices, dtype=np.int64)
        columns = np.frombuffer(csr.col_indices, dtype=np.int64)
        dense = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            start, end = int(rows[row]), int(rows[row + 1])
            dense[row, columns[start:end]] = values[start:end]
        return dense
    values = np.frombuffer(message.dense, dtype=dtype).copy()
    return values.reshape(shape) if shape else values


def _tokens(datum: pb.Datum, index: int) -> list[int]:
    tokens: list[int] = []
    for chunk in datum.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise TinkerUserError(
                f"datum {index} has a {kind} chunk; aloft tinker-serve trains text models only "
                "(send encoded_text chunks)"
            )
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
    return tokens


def _config(request: pb.ForwardBackwardRequest) -> dict[str, float | str]:
    config: dict[str, float | str] = dict(request.loss_fn_config)
    for key, value in request.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    return config


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    """Parse a ``forward_backward`` request body (``application/x-protobuf``)."""
    request = pb.ForwardBackwardRequest()
    try:
        request.ParseFromString(body)
    except Exception as error:  # protobuf's DecodeError and friends
        raise TinkerUserError(
            f"forward_backward body is not a ForwardBackwardRequest protobuf: {error}"
        ) from None
    data = [
        Datum(
            tokens=_tokens(datum, index),
            inputs={name: _tensor(tensor, name) for name, tensor in datum.loss_fn_inputs.items()},
        )
        for index, datum in enumerate(request.data)
    ]
    return ForwardBackwardCall(
        model_id=request.model_id,
        seq_id=request.seq_id,
        loss_fn=request.loss_fn,
        loss_fn_config=_config(request),
        forward_only=request.forward_only,
        data=data,
    )


def _batched(arrays: list[np.ndarray]) -> pb.BatchedTensor:
    """Per-datum 1-D arrays (one dtype) as one ``BatchedTensor`` with byte offsets."""
    dtype = arrays[0].dtype
    wire_dtype = pb.DTYPE_INT64 if np.issubdtype(dtype, np.integer) else pb.DTYPE_FLOAT32
    cast = [
        np.ascontiguousarray(a, dtype=np.int64 if wire_dtype == pb.DTYPE_INT64 else np.float32)
        for a in arrays
    ]
    offsets = np.cumsum([0] + [a.nbytes for a in cast], dtype=np.int64)
    return pb.BatchedTensor(
        data=b"".join(a.tobytes() for a in cast), offsets=offsets.tobytes(), dtype=wire_dtype
    )


def encode_forward_backward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A ``ForwardBackwardOutput``: one output dict per datum (same field names in each), and
    metrics named ``name:reduction`` (the SDK combines chunks by the reduction)."""
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(outputs))
    for name in outputs[0] if outputs else ():
        record.fields[name].CopyFrom(_batched([output[name] for output in outputs]))
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", metrics=metrics)
    message.loss_fn_outputs.append(record)
    return message.SerializeToString()


@dataclass(kw_only=True)
class SampledSequence:
    tokens: list[int]
    logprobs: list[float]
    stopped: bool
    """True for a stop (EOS, stop token or string), False when ``max_tokens`` ended it."""


def encode_sample_response(
    sequences: list[SampledSequence], prompt_logprobs: list[float | None] | None
) -> bytes:
    """A ``SampleResponse``; ``prompt_logprobs`` has one entry per prompt token (None = not computed,
    NaN on the wire)."""
    message = pb.SampleResponse()
    for sequence in sequences:
        message.sequences.append(
            pb.SampledSequence(
                stop_reason=pb.STOP_REASON_STOP if sequence.stopped else pb.STOP_REASON_LENGTH,
                tokens=np.asarray(sequence.tokens, dtype=np.int32).tobytes(),
                logprobs=np.asarray(sequence.logprobs, dtype=np.float32).tobytes(),
            )
        )
    if prompt_logprobs is not None:
        values = [np.nan if value is None else value for value in prompt_logprobs]
        message.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return message.SerializeToString()
