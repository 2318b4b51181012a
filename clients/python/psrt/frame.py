"""psrt.Frame on the wire: `bytes header = 1; repeated bytes payload = 2`,
written and read by hand so tensors go straight from numpy buffers into the
message and come back as numpy views of the received bytes
(docs/protocol.md#frames)."""
import numpy as np


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode(header, payloads):
    """header: bytes of a serialized header message; payloads: numpy arrays
    (written in their little-endian memory order). Returns bytes."""
    parts = [b"\x0a", _varint(len(header)), header]
    for p in payloads:
        view = memoryview(np.ascontiguousarray(p)).cast("B")
        parts += [b"\x12", _varint(view.nbytes), view]
    return b"".join(parts)


class FrameError(ValueError):
    pass


def decode(data):
    """Returns (header bytes, [memoryview payloads]); rejects malformed
    frames as the server does."""
    view = memoryview(data)
    n = len(view)
    pos = 0
    header = b""
    payloads = []
    while pos < n:
        tag = view[pos]
        pos += 1
        length = 0
        shift = 0
        while True:
            if pos >= n:
                raise FrameError("truncated length")
            b = view[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        if pos + length > n:
            raise FrameError(f"field of {length} bytes runs past the message")
        if tag == 0x0A:
            if payloads:
                raise FrameError("header after a payload")
            header = bytes(view[pos : pos + length])
        elif tag == 0x12:
            payloads.append(view[pos : pos + length])
        else:
            raise FrameError(f"unexpected field tag {tag:#x}")
        pos += length
    return header, payloads


def identity(x):
    return x
