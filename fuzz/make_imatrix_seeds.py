#!/usr/bin/env python3
"""Writes the seed corpus of the imatrix_parse fuzz target: legacy imatrix files (with and
without the trailer, a MoE entry, huge counts and lengths, truncations) and GGUF ones
(.in_sum2/.counts pairs with and without .in_sum, missing metadata, an unpaired tensor).
Standard library only; run from anywhere."""
import struct
from pathlib import Path

root = Path(__file__).resolve().parent


def legacy_entry(name, ncall, values):
    b = name.encode()
    return struct.pack("<i", len(b)) + b + struct.pack("<ii", ncall, len(values)) + struct.pack(f"<{len(values)}f", *values)


def legacy(entries, trailer=None):
    out = struct.pack("<i", len(entries)) + b"".join(legacy_entry(*e) for e in entries)
    if trailer is not None:
        chunks, dataset = trailer
        out += struct.pack("<ii", chunks, len(dataset)) + dataset.encode()
    return out


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def pad(b, align=32):
    return b + b"\0" * (-len(b) % align)


def gguf(tensors, meta=True):
    """tensors: (name, ne, floats); all f32."""
    kvs = []
    if meta:
        kvs.append(s("imatrix.datasets") + struct.pack("<IIQ", 9, 8, 1) + s("calibration.txt"))
        kvs.append(s("imatrix.chunk_count") + struct.pack("<II", 4, 10))
        kvs.append(s("imatrix.chunk_size") + struct.pack("<II", 4, 512))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset, infos, data = 0, b"", b""
    for name, ne, values in tensors:
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", 0, offset)
        blob = pad(struct.pack(f"<{len(values)}f", *values))
        data += blob
        offset += len(blob)
    return pad(head + infos) + data


seeds = {
    "legacy": legacy([("blk.0.attn_q.weight", 4, [1.0, 2.0, 3.0, 4.0]), ("output.weight", 0, [5.0])], (7, "wiki")),
    "legacy-no-trailer": legacy([("a", 1, [1.0] * 8)]),
    "legacy-short-trailer": legacy([("a", 1, [1.0])]) + b"\x01\x02",
    "legacy-huge-count": struct.pack("<i", 1) + struct.pack("<i", 1) + b"a" + struct.pack("<ii", 1, 0x7FFFFFFF) + b"\0" * 8,
    "legacy-huge-name": struct.pack("<ii", 1, 0x7FFFFFFF) + b"abc",
    "legacy-negative-name": struct.pack("<ii", 1, -5) + b"abc",
    "legacy-many-entries": struct.pack("<i", 1 << 30) + legacy_entry("x", 1, [1.0]),
    "gguf": gguf([
        ("blk.0.ffn_up_exps.weight.in_sum2", [4, 2], [1.0] * 8),
        ("blk.0.ffn_up_exps.weight.counts", [1, 2], [2.0, 0.0]),
        ("blk.0.attn_q.weight.in_sum", [4], [0.5] * 4),
        ("blk.0.attn_q.weight.in_sum2", [4], [1.0] * 4),
        ("blk.0.attn_q.weight.counts", [1], [3.5]),
    ]),
    "gguf-no-metadata": gguf([("w.in_sum2", [2], [1.0, 2.0]), ("w.counts", [1], [1.0])], meta=False),
    "gguf-unpaired": gguf([("w.in_sum2", [2], [1.0, 2.0])]),
}

out = root / "corpus" / "imatrix_parse"
out.mkdir(parents=True, exist_ok=True)
for name, data in seeds.items():
    (out / name).write_bytes(data)
print(f"{len(seeds)} seeds in {out}")
