#!/usr/bin/env python3
"""Writes the seed corpus of the gguf_parse and gguf_roundtrip fuzz targets:
valid files (the gguf-py golden file, a v2 copy, split parts, metadata only, zero-size
and 0-dim tensors, nested arrays) and hostile headers (huge counts and lengths, deep
nesting, bad alignment, truncations). Standard library only; run from anywhere."""
import struct
from pathlib import Path

root = Path(__file__).resolve().parent
golden = (root.parent / "golden/gguf/small.gguf").read_bytes()


def hdr(version, n_tensors, n_kv):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def kv_u32(key, v):
    return s(key) + struct.pack("<II", 4, v)


def tensor(name, ne, ty, offset):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ty, offset)


def pad(b, align=32):
    return b + b"\0" * (-len(b) % align)


def nested(depth):
    out = s("nested") + struct.pack("<I", 9)
    out += struct.pack("<IQ", 9, 1) * (depth - 1)
    return out + struct.pack("<IQ", 0, 2) + b"\x01\x02"


valid = {
    "golden-gguf-py": golden,
    "golden-v2": golden[:4] + struct.pack("<I", 2) + golden[8:],
    "metadata-only": hdr(3, 0, 2) + kv_u32("a", 1) + s("b") + struct.pack("<I", 8) + s("x"),
    "zero-size-and-scalar": pad(
        hdr(3, 3, 0)
        + tensor("empty", [0, 5], 0, 0)
        + tensor("scalar", [], 0, 0)
        + tensor("q", [32], 8, 32)
    )
    + pad(b"\x07" * 4)
    + pad(b"\x09" * 34),
    "nested-arrays": hdr(3, 0, 1) + nested(4),
    "split-part": pad(
        hdr(3, 1, 3)
        + s("split.no") + struct.pack("<IH", 2, 1)
        + s("split.count") + struct.pack("<IH", 2, 3)
        + s("split.tensors.count") + struct.pack("<Ii", 5, 9)
        + tensor("t", [4], 0, 0)
    )
    + pad(b"\x01" * 16),
}
hostile = {
    "count-2p60-tensors": hdr(3, 1 << 60, 0) + b"\0" * 64,
    "count-2p60-keys": hdr(3, 0, 1 << 60) + b"\0" * 64,
    "count-2p60-elements": hdr(3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 8, 1 << 60) + b"\0" * 64,
    "string-4gib": hdr(3, 0, 1) + s("k") + struct.pack("<IQ", 8, 1 << 32) + b"\0" * 64,
    "nested-40-deep": hdr(3, 0, 1) + nested(40),
    "alignment-3": hdr(3, 0, 1) + kv_u32("general.alignment", 3),
    "offset-past-end": pad(hdr(3, 1, 0) + tensor("t", [8], 0, 1 << 40)) + b"\0" * 32,
    "truncated-tensor": golden[:1300],
    "truncated-header": golden[:200],
}
for target in ["gguf_parse", "gguf_roundtrip"]:
    d = root / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    seeds = dict(valid)
    if target == "gguf_parse":
        seeds.update(hostile)
    for name, data in seeds.items():
        (d / name).write_bytes(data)
