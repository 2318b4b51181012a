"""16-bit values on the wire from Python (Client(wire_dtype=...)): the same
bits as the C++ client and the servers, float32 arrays in and out."""
import numpy as np
import pytest

import psrt
from psrt._proto import ps_pb2


def _round_trip(dtype, values):
    """float32 `values` as the servers widen them back from `dtype`: IEEE
    half by numpy's own conversion, bfloat16 as the top 16 bits rounded to
    nearest even (finite values only here)."""
    values = values.reshape(-1)
    if dtype == ps_pb2.FLOAT16:
        return values.astype(np.float16).astype(np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    top = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return (top << 16).astype(np.uint32).view(np.float32)


def test_an_unknown_wire_dtype_is_named():
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
