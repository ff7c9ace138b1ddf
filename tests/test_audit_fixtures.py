"""Write small GGUF files with the official gguf writer, for the audit tests.

Tensor shapes are given in ggml order (ne[0] = row length first); quantized tensors are written as raw bytes
of the right size. BYTES_PER_BLOCK is the tests' own table (from ggml-common.h), independent of the package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

# (elements per block, bytes per block): ggml-common.h static_asserts, typed in by hand.
BYTES_PER_BLOCK: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q8_0": (32, 34),
    "Q4_0": (32, 18),
    "Q5_K": (256, 176),
    "Q4_K": (256, 144),
    "Q6_K": (256, 210),
    "Q2_K": (256, 84),
    "IQ4_XS": (256, 136),
    "MXFP4": (32, 17),
}


def nbytes(qtype: str, shape: tuple[int, ...]) -> int:
    block, size = BYTES_PER_BLOCK[qtype]
    n = 1
    for d in shape:
        n *= d
    assert shape[0] % block == 0
    return n // block * size


def write_gguf(path: Path, arch: str, kv: dict[str, Any], tensors: list[tuple[str, str, tuple[int, ...]]]) -> Path:
    w = GGUFWriter(str(path), arch)
    for key, value in kv.items():
        full = key if key.startswith(("general.", "tokenizer.")) else f"{arch}.{key}"
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, int):
            w.add_uint32(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        elif isinstance(value, str):
            w.add_string(full, value)
        else:
            w.add_array(full, value)
    for name, qtype, shape in tensors:
        np_shape = tuple(reversed(shape))
        if qtype == "F32":
            w.add_tensor(name, np.ones(np_shape, dtype=np.float32))
        elif qtype == "F16":
            w.add_tensor(name, np.ones(np_shape, dtype=np.float16))
        else:
            block, size = BYTES_PER_BLOCK[qtype]
            byte_shape = (*np_shape[:-1], np_shape[-1] // block * size)
            w.add_tensor(name, np.zeros(byte_shape, dtype=np.uint8), raw_dtype=Q[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
