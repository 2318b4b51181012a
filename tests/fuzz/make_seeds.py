#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<target>/): small,
valid inputs of every kind each fuzzer reads, so that mutation starts from
messages the server accepts. Run again after a protocol change:

    /usr/bin/python3 tests/fuzz/make_seeds.py

Uses Debian's python3-protobuf and stubs protoc generates into a
temporary directory; the first TFRecord and CSV records come from
testdata/."""
import gzip
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def frame(header, payloads):
    out = b"\x0a" + varint(len(header)) + header
    for p in payloads:
        out += b"\x12" + varint(len(p)) + p
    return out


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def example_cache(key, chunks):
    """A ps_worker --cache=DIR file (ps_worker/data/example_cache_file.h):
    `chunks` lists chunks, each a list of (label, ids, values, dense)."""
    out = b"PSRTEXC2" + struct.pack("<I", len(key)) + key
    examples = 0
    for chunk in chunks:
        ids = [i for e in chunk for i in e[1]]
        values = [v for e in chunk for v in e[2]]
        dense = [d for e in chunk for d in e[3]]
        payload = struct.pack(f"<{len(chunk)}f", *[e[0] for e in chunk])
        payload += struct.pack(f"<{len(chunk)}I", *[len(e[1]) for e in chunk])
        payload += struct.pack(f"<{len(chunk)}I", *[len(e[3]) for e in chunk])
        flags = 0
        if all(0 <= i < 1 << 32 for i in ids):
            flags |= 1
            payload += struct.pack(f"<{len(ids)}I", *ids)
        else:
            payload += struct.pack(f"<{len(ids)}q", *ids)
        if all(v == 1.0 for v in values):
            flags |= 2
        else:
            payload += struct.pack(f"<{len(values)}f", *values)
        payload += struct.pack(f"<{len(dense)}f", *dense)
        out += struct.pack("<5I", len(chunk), len(ids), len(dense), flags, crc32c(payload))
        out += payload
        examples += len(chunk)
    return out + b"PSRTEND1" + struct.pack("<2Q", examples, len(chunks))


def data_plane_message(kind, connection, sequence, body, status=0, key=0, sends=None):
    """A data-plane header message (dataplane/frame.h, version 2) with
    `body` inline, or announcing a body sent apart in messages of `sends`
    bytes each."""
    size = len(body) if sends is None else sum(sends)
    head = struct.pack("<IHHIIQIII", 0x50445350, 2, kind, connection, sequence, size, status, 0, 0)
    head += struct.pack("<Q", key)
    crc = crc32c(head)
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    table = b"".join(struct.pack("<I", n) for n in sends or [])
    return head + struct.pack("<I", masked) + body + table


def data_plane_call(method, messages):
    """A push's or pull's body (proto/data_plane_call.h)."""
    out = struct.pack("<B3xI", method, len(messages))
    for m in messages:
        out += struct.pack("<I", len(m)) + m
    return out


def main():
    gen = tempfile.mkdtemp()
    subprocess.run(["protoc", f"-I{ROOT}", f"--python_out={gen}", "proto/ps.proto"], check=True)
    sys.path.insert(0, os.path.join(gen, "proto"))
    import ps_pb2 as pb

    def ids(*v):
        return struct.pack(f"<{len(v)}q", *v)

    def floats(*v):
        return struct.pack(f"<{len(v)}f", *v)

    # request_fuzzer: byte 0 even = Pull, odd = Push (messages after 2-byte lengths).
    pull = pb.PullRequestHeader(
        items=[
            pb.TensorItem(variable="w", shard=0, offset=0, count=32 * 4),
            pb.TensorItem(variable="emb", shard=0, ids_payload=0),
            pb.TensorItem(variable="mod", shard=0, ids_payload=1),
            pb.TensorItem(variable="hash", shard=0, ids_payload=2),
        ]
    )
    write(
        "request_fuzzer",
        "pull",
        b"\x00" + frame(pull.SerializeToString(), [ids(1, 2, 249), ids(0, 3, 6), ids(12345, -7)]),
    )
    sync = pb.PullRequestHeader(
        items=[pb.TensorItem(variable="w", shard=0, count=8)],
        consistency=pb.Consistency(mode=1, workers=1, timeout_seconds=0.01),
        worker_index=0,
        step=0,
    )
    write("request_fuzzer", "pull_sync", b"\x02" + frame(sync.SerializeToString(), []))
    push = pb.PushRequestHeader(
        items=[
            pb.TensorItem(variable="w", shard=0, offset=0, count=8, grad_payload=0),
            pb.TensorItem(variable="emb", shard=0, ids_payload=1, grad_payload=2),
            pb.TensorItem(variable="hash", shard=0, ids_payload=3, grad_payload=4),
        ],
        client_id=1,
        request_id=1,
        last=True,
    )
    message = frame(
        push.SerializeToString(),
        [floats(*[0.5] * 8), ids(1, 2), floats(*[0.1] * 16), ids(42), floats(1, 2, 3, 4)],
    )

    def with_length(m):
        return struct.pack("<H", len(m)) + m

    write("request_fuzzer", "push", b"\x01" + with_length(message))
    first = pb.PushRequestHeader(
        items=[pb.TensorItem(variable="w", shard=0, count=4, grad_payload=0)]
    )
    last = pb.PushRequestHeader(
        items=[pb.TensorItem(variable="w", shard=0, offset=4, count=4, grad_payload=0)], last=True
    )
    m1 = frame(first.SerializeToString(), [floats(1, 1, 1, 1)])
    m2 = frame(last.SerializeToString(), [floats(3e38, 3e38, 1, 1)])
    write("request_fuzzer", "push_two_messages", b"\x03" + with_length(m1) + with_length(m2))

    # unary_request_fuzzer: CreateVariablesRequest.
    spec = pb.VariableSpec(
        name="new",
        kind=2,
        shape=[100, 4],
        partition=pb.PartitionSpec(num_shards=2, routing=1),
        optimizer=pb.OptimizerSpec(kind=4, learning_rate=0.1, l1=0.01),
    )
    write(
        "unary_request_fuzzer",
        "append",
        pb.CreateVariablesRequest(first_index=4, specs=[spec], num_ps=2).SerializeToString(),
    )
    dense = pb.VariableSpec(
        name="w",
        kind=1,
        shape=[64, 4],
        partition=pb.PartitionSpec(num_shards=2),
        optimizer=pb.OptimizerSpec(learning_rate=0.1),
    )
    write(
        "unary_request_fuzzer",
        "existing",
        pb.CreateVariablesRequest(first_index=0, specs=[dense], num_ps=2).SerializeToString(),
    )

    # rendezvous_fuzzer: 2-byte-length-prefixed RendezvousRequests.
    def prefixed(*requests):
        out = b""
        for r in requests:
            body = r.SerializeToString()
            out += len(body).to_bytes(2, "little") + body
        return out

    gloo_key = pb.RendezvousEntry(key="gloo/0", value=b"\x01" * 600)
    write(
        "rendezvous_fuzzer",
        "form_and_read",
        prefixed(
            pb.RendezvousRequest(worker=0, generation=0, set=[gloo_key]),
            pb.RendezvousRequest(worker=1, generation=0, get=["gloo/0", "member/1"]),
            pb.RendezvousRequest(
                worker=2, generation=1, set=[pb.RendezvousEntry(key="alive/2", value=b"1")]
            ),
        ),
    )

    # checkpoint_files_fuzzer: 0 + MANIFEST.json, 1 + a shard file.
    manifest = (
        b'{"format_version": 2, "name": "ckpt-0000000003-0000000000001", '
        b'"global_step": "3", "num_ps": 2, "variables": [{"name": "w", "kind": '
        b'"DENSE", "shape": ["64", "4"]}], "files": [{"variable": "w", "shard": 1, '
        b'"ps_task": 1, "path": "w.shard-00001-of-00002", "bytes": "700", '
        b'"crc32c": 123, "num_rows": "32", "row_begin": "32", "version": "5"}]}'
    )
    write("checkpoint_files_fuzzer", "manifest", b"\x00" + manifest)
    for name, kind, explicit in (("dense", 1, False), ("hash", 3, True)):
        header = pb.ShardFileHeader(
            variable=name,
            shard=0,
            num_shards=2,
            kind=kind,
            row_width=4,
            num_slots=1,
            num_rows=2,
            row_begin=0,
            routing=2 if explicit else 0,
            explicit_ids=explicit,
            version=7,
        ).SerializeToString()
        body = b"PSRTSHD1" + (ids(9, -4) if explicit else b"") + floats(*range(16))
        body += header + struct.pack("<I", len(header))
        write(
            "checkpoint_files_fuzzer",
            f"shard_{name}",
            b"\x01" + body + struct.pack("<I", crc32c(body)),
        )

    # s3_response_fuzzer.
    write(
        "s3_response_fuzzer",
        "list",
        b'<?xml version="1.0"?><ListBucketResult><Contents><Key>run1/ckpt-1/a</Key>'
        b"<Size>12</Size></Contents><Contents><Key>run1/ckpt-1/MANIFEST.json</Key>"
        b"<Size>3</Size></Contents><IsTruncated>true</IsTruncated>"
        b"<NextContinuationToken>abc&amp;d</NextContinuationToken></ListBucketResult>",
    )
    write(
        "s3_response_fuzzer",
        "error",
        b"<Error><Code>SlowDown</Code><Message>Reduce your request rate</Message></Error>",
    )
    write(
        "s3_response_fuzzer",
        "credentials",
        b'{"AccessKeyId": "ASIA", "SecretAccessKey": "s\\"e", "Token": "t",'
        b' "Expiration": "2026-11-23T20:00:00Z"}',
    )

    # record_reader_fuzzer: byte 0 % 4 = format, & 4 = skip bad records.
    write(
        "record_reader_fuzzer",
        "libsvm",
        b"\x00" + b"1 3:1 17:0.5 99:2\n0 1:1 2:1\n# comment\n-1 5:1:1 6:2:0.5\n",
    )
    write("record_reader_fuzzer", "libsvm_gzip", b"\x04" + gzip.compress(b"1 3:1 17:0.5\n0 4:1\n"))
    with open(os.path.join(ROOT, "testdata/criteo_deepfm_sagemaker/val.tfrecords"), "rb") as f:
        records = b""
        for _ in range(2):
            (length,) = struct.unpack("<Q", f.read(8))
            records += struct.pack("<Q", length) + f.read(4 + length + 4)
    write("record_reader_fuzzer", "tfrecord", b"\x01" + records)
    write(
        "record_reader_fuzzer",
        "criteo_tsv",
        b"\x02"
        + (
            "1\t"
            + "\t".join(str(i) for i in range(13))
            + "\t"
            + "\t".join(f"{i:08x}" for i in range(26))
            + "\n"
        ).encode(),
    )
    with open(os.path.join(ROOT, "testdata/adult/adult.data"), "rb") as f:
        write("record_reader_fuzzer", "adult_csv", b"\x03" + f.readline() + f.readline())
    # example_cache_fuzzer: a cache file written for the key "fuzz".
    write(
        "example_cache_fuzzer",
        "two_chunks",
        example_cache(
            b"fuzz",
            [
                [(1.0, [3, 1 << 40], [1.0, 0.5], [0.25]), (0.0, [], [], [])],
                [(1.0, [7], [2.0], [1.0, 2.0])],
            ],
        ),
    )
    write(
        "example_cache_fuzzer",
        "compact",
        example_cache(b"fuzz", [[(0.0, [5, 9], [1.0, 1.0], []), (1.0, [2], [1.0], [3.0])]]),
    )
    write("example_cache_fuzzer", "empty", example_cache(b"fuzz", []))
    # data_plane_frame_fuzzer: header messages as a PS's data plane gets them.
    address = b"fi_shm://1234\x00"
    proof = bytes(range(32))
    hello = struct.pack("<H", len(address)) + address + struct.pack("<H", len(proof)) + proof
    write("data_plane_frame_fuzzer", "hello", data_plane_message(1, 7, 0, hello))
    write("data_plane_frame_fuzzer", "request_inline", data_plane_message(3, 7, 1, b"abc", key=99))
    write(
        "data_plane_frame_fuzzer",
        "request_apart",
        data_plane_message(3, 7, 2, b"", key=99, sends=[4200, 5800]),
    )
    write(
        "data_plane_frame_fuzzer",
        "push_inline",
        data_plane_message(3, 7, 3, data_plane_call(2, [b"\x0a\x02\x08\x01", b"xyz"]), key=99),
    )
    write(
        "data_plane_frame_fuzzer",
        "error_response",
        data_plane_message(4, 7, 2, b"refused", status=3),
    )
    print(f"seeds written under {CORPUS}")


if __name__ == "__main__":
    main()
