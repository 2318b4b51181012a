"""16-bit values on the wire from Python (Client(wire_dtype=...)): the same
bits as the C++ client and the servers, float32 arrays in and out."""
import numpy as np
import pytest

import psrt
from psrt import wire_dtype
from psrt._proto import ps_pb2


def _round_trip(dtype, values):
    return wire_dtype.decode(dtype, wire_dtype.encode(dtype, values).tobytes())


def test_encodings_round_to_nearest_even_and_keep_non_finite_values():
    one_and_half_ulp = np.float32(1 + 2.0**-8)  # a tie between 1 and 1 + 2^-7
    bits = wire_dtype.encode(
        ps_pb2.BFLOAT16,
        np.array([1.0, -2.5, one_and_half_ulp, 1 + 3 * 2.0**-8, np.inf], np.float32),
    )
    assert [int(b) for b in bits] == [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x7F80]
    assert np.isnan(_round_trip(ps_pb2.BFLOAT16, np.array([np.nan], np.float32))).all()
    half = _round_trip(ps_pb2.FLOAT16, np.array([1e5, -3e38, 65504, -np.inf, 1e-8], np.float32))
    assert half.tolist() == [65504.0, -65504.0, 65504.0, -np.inf, 0.0]
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(100_000) * 10.0 ** rng.uniform(-20, 20, 100_000)).astype(np.float32)
    rel = np.abs(_round_trip(ps_pb2.BFLOAT16, x) - x) / np.abs(x)
    assert rel.max() <= 2.0**-8
    with pytest.raises(ValueError, match="wire_dtype 'bf8': expected one of fp32, bf16, fp16"):
        psrt.Client({"cluster": {"ps": ["localhost:1"]}}, wire_dtype="bf8")


@pytest.mark.parametrize("name,dtype", [("bf16", ps_pb2.BFLOAT16), ("fp16", ps_pb2.FLOAT16)])
def test_servers_apply_the_widened_gradient_and_python_equals_cpp(cluster2, cpp_push, name, dtype):
    fp32 = cluster2.client()
    narrow = cluster2.client(wire_dtype=name)
    specs = []
    for who in ("py", "cpp"):
        specs += [
            psrt.dense(f"{who}/w", (500, 3), num_shards=2, optimizer="sgd", learning_rate=1.0),
            psrt.embedding(f"{who}/e", 4000, 8, num_shards=3, optimizer="sgd", learning_rate=1.0),
        ]
    fp32.create_variables(specs)
    narrow.refresh_catalog()
    rng = np.random.default_rng(7)
    w_grad = (rng.standard_normal((500, 3)) * 0.01).astype(np.float32)
    # Ties whose lower neighbour is odd: bf16 and fp16 round them up.
    w_grad[0, :2] = [1 + 3 * 2.0**-8, 1 + 3 * 2.0**-11]
    ids = rng.permutation(4000)[:1500].astype(np.int64)
    e_grad = (rng.standard_normal((1500, 8)) * 0.01).astype(np.float32)
    narrow.push({"py/w": w_grad, "py/e": (ids, e_grad)})
    cpp_push(cluster2, "cpp/w", w_grad, wire_dtype=name)
    cpp_push(cluster2, "cpp/e", e_grad, ids=ids, wire_dtype=name)
    got = fp32.pull({"py/w": None, "cpp/w": None, "py/e": ids, "cpp/e": ids})
    # SGD at rate 1 from zeros: minus the widened gradient, bit for bit, and
    # the same from either client.
    assert np.array_equal(got["py/w"].reshape(-1), -_round_trip(dtype, w_grad))
    assert np.array_equal(got["py/e"].reshape(-1), -_round_trip(dtype, e_grad))
    assert np.array_equal(got["py/w"], got["cpp/w"])
    assert np.array_equal(got["py/e"], got["cpp/e"])
    assert not np.array_equal(got["py/w"].reshape(-1), -w_grad.reshape(-1))
    # A 16-bit pull is the float32 value rounded once; arrays stay float32.
    pulled = narrow.pull({"py/w": None, "py/e": ids})
    assert pulled["py/w"].dtype == np.float32
    assert np.array_equal(pulled["py/w"].reshape(-1), _round_trip(dtype, got["py/w"]))
    assert np.array_equal(pulled["py/e"].reshape(-1), _round_trip(dtype, got["py/e"]))
