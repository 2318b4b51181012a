#!/usr/bin/python3
"""Reads TensorBoard event files without TensorFlow or psrt's code: TFRecord
framing (lengths and data checked against their masked CRC32C) and the
Event / Summary protos decoded from the protobuf wire format by hand, with
the field numbers of tensorflow/core/util/event.proto. Prints one line per
scalar, "step tag value", after a "file_version ..." line.

    read_events.py FILE
"""
import struct
import sys


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        header = data[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8 : at + 12])
        if masked(header) != length_crc:
            raise SystemExit(f"{path}: bad length CRC at byte {at}")
        body = data[at + 12 : at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length : at + 16 + length])
        if masked(body) != body_crc:
            raise SystemExit(f"{path}: bad data CRC at byte {at}")
        yield body
        at += 16 + length


def fields(message):
    """(field number, wire type, value) of each field; value is an int for
    varints, bytes for length-delimited, raw bytes for fixed32/64."""
    at = 0
    while at < len(message):
        key, at = varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(message, at)
        elif wire == 1:
            value, at = message[at : at + 8], at + 8
        elif wire == 2:
            n, at = varint(message, at)
            value, at = message[at : at + n], at + n
        elif wire == 5:
            value, at = message[at : at + 4], at + 4
        else:
            raise SystemExit(f"unexpected wire type {wire}")
        yield number, wire, value


def varint(data, at):
    shift = result = 0
    while True:
        b = data[at]
        at += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, at
        shift += 7


def main():
    for record in records(sys.argv[1]):
        step = 0
        summary = None
        for number, _, value in fields(record):
            if number == 2:  # Event.step
                step = value
            elif number == 3:  # Event.file_version
                print(f"file_version {value.decode()}")
            elif number == 5:  # Event.summary
                summary = value
        if summary is None:
            continue
        for number, _, value in fields(summary):
            if number != 1:  # Summary.value
                continue
            tag, simple = "", None
            for n, _, v in fields(value):
                if n == 1:  # Summary.Value.tag
                    tag = v.decode()
                elif n == 2:  # Summary.Value.simple_value
                    (simple,) = struct.unpack("<f", v)
            print(f"{step} {tag} {simple!r}")


if __name__ == "__main__":
    main()
