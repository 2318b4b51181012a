"""Float values in 16 bits on the wire (Client(wire_dtype=...)), as the C++
client and the servers encode them (util/wire_dtype.h): bfloat16 is the top
16 bits of a float32 rounded to nearest even (NaN stays NaN); float16 is
IEEE half, round to nearest even, with finite magnitudes beyond 65504
clamped to it. The servers keep float32 parameters whatever travels."""
import numpy as np

from ._proto import ps_pb2

NAMES = {"fp32": ps_pb2.FLOAT32, "bf16": ps_pb2.BFLOAT16, "fp16": ps_pb2.FLOAT16}
FLOAT16_LARGEST = np.float32(65504.0)


def parse(name):
    """The WireDtype for "fp32", "bf16" or "fp16"; ValueError otherwise."""
    if name not in NAMES:
        raise ValueError(f"wire_dtype {name!r}: expected one of {', '.join(NAMES)}")
    return NAMES[name]


def encode(dtype, values):
    """float32 `values` as the wire carries them in `dtype` (an array whose
    bytes are the payload)."""
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    if dtype == ps_pb2.FLOAT32:
        return values
    if dtype == ps_pb2.BFLOAT16:
        bits = values.view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
        nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        return np.where(nan, (bits >> 16) | np.uint32(0x40), rounded).astype("<u2")
    finite = np.isfinite(values)
    clamped = np.where(finite, np.clip(values, -FLOAT16_LARGEST, FLOAT16_LARGEST), values)
    return clamped.astype("<f2").view("<u2")


def decode(dtype, payload):
    """The float32 values of a payload (bytes) of `dtype`."""
    if dtype == ps_pb2.FLOAT32:
        return np.frombuffer(payload, dtype="<f4")
    if len(payload) % 2:
        raise ValueError(f"a {ps_pb2.WireDtype.Name(dtype)} payload of {len(payload)} bytes")
    wire = np.frombuffer(payload, dtype="<u2")
    if dtype == ps_pb2.BFLOAT16:
        return (wire.astype(np.uint32) << 16).view(np.float32)
    if dtype == ps_pb2.FLOAT16:
        return wire.view("<f2").astype(np.float32)
    raise ValueError(f"unknown wire dtype {dtype}")
