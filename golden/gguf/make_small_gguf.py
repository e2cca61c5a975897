#!/usr/bin/env python3
"""Writes golden/gguf/small.gguf with gguf-py, the Python GGUF writer llama.cpp's
converters use (PyPI package `gguf`; made with gguf 0.19.0: `pip install gguf==0.19.0`).

quantforge must read this file exactly (formats/tests/gguf_golden.rs checks every key,
type, value and tensor) and re-emit it byte for byte. It holds one key of every scalar
value type, arrays of several element types, arrays of arrays (which only gguf-py writes),
a non-ASCII string, and tensors of five ggml types, one with a trailing dimension of 1
(gguf-py keeps it in n_dims, ggml would not).

Usage: python3 golden/gguf/make_small_gguf.py [OUT]   (default: next to this script)
"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("small.gguf")

w = GGUFWriter(out, "llama")  # adds general.architecture = "llama" first
w.add_string("general.name", "quantforge golden: gguf-py small")
w.add_uint8("test.u8", 200)
w.add_int8("test.i8", -100)
w.add_uint16("test.u16", 60000)
w.add_int16("test.i16", -30000)
w.add_uint32("test.u32", 4000000000)
w.add_int32("test.i32", -2000000000)
w.add_float32("test.f32", 0.1)
w.add_bool("test.bool", True)
w.add_string("test.str", "héllo, wörld ✓")
w.add_uint64("test.u64", 18000000000000000000)
w.add_int64("test.i64", -9000000000000000000)
w.add_float64("test.f64", -2.5e-300)
w.add_array("test.arr_i32", [1, -2, 3])
w.add_array("test.arr_f32", [0.5, -1.25])
w.add_array("test.arr_bool", [True, False, True])
w.add_array("test.arr_str", ["a", "", "ç"])
w.add_key_value("test.arr_u16", [1, 65535], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT16)
w.add_key_value("test.arr_u64", [2**64 - 1], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT64)
w.add_key_value("test.arr_f64", [1.0, -0.0], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT64)
w.add_array("test.nested", [[1, 2], ["x"], [[True], [False, True]], [0.25]])
w.add_custom_alignment(64)  # sets general.alignment and the layout

rng = np.random.default_rng(20250101)
w.add_tensor("f32.weight", rng.standard_normal((3, 4)).astype(np.float32))
w.add_tensor("f16.weight", rng.standard_normal((2, 8)).astype(np.float16))
w.add_tensor("i32.row", np.arange(8, dtype=np.int32).reshape(1, 8))  # ne = [8, 1]
q8 = rng.integers(0, 256, size=(2, 34), dtype=np.uint8)  # 2 rows of one q8_0 block
w.add_tensor("q8_0.weight", q8, raw_dtype=GGMLQuantizationType.Q8_0)
q4k = rng.integers(0, 256, size=(1, 144), dtype=np.uint8)  # 1 row of one q4_K block
w.add_tensor("q4_K.weight", q4k, raw_dtype=GGMLQuantizationType.Q4_K)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(out)
