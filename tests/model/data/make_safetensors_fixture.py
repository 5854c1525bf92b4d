"""Writes tests/model/data/reference.safetensors with the reference writer (the Python
`safetensors` library, Rust core) so the C++ reader is tested against real output, not only
against our own test writer. Values follow simple formulas that safetensors_test.cc
recomputes; regenerate with:

    .venv/bin/python tests/model/data/make_safetensors_fixture.py

The library version used is stored in the file's __metadata__ ("writer").
"""
import pathlib

import numpy as np
import safetensors
from safetensors import TensorSpec, serialize


def bf16_bytes(values: np.ndarray) -> np.ndarray:
    # numpy has no bfloat16: take the high half of float32 (values are exact in bf16).
    u32 = values.astype("<f4").view("<u4")
    assert np.all((u32 & 0xFFFF) == 0), "fixture values must be exact in bf16"
    return (u32 >> 16).astype("<u2")


def spec(dtype: str, shape, buf: np.ndarray) -> TensorSpec:
    buf = np.ascontiguousarray(buf)
    return TensorSpec(dtype=dtype, shape=tuple(shape), data_ptr=buf.ctypes.data,
                      data_len=buf.nbytes)


def main() -> None:
    arrays = {
        # name: (safetensors-library dtype name, shape, little-endian buffer)
        "model.embed_tokens.weight": ("bfloat16", (4, 8), bf16_bytes(np.arange(32) * 0.25 - 4)),
        "model.norm.weight": ("bfloat16", (8,), bf16_bytes(np.ones(8))),
        "f16.vector": ("float16", (5,), (np.arange(5) * 0.5 - 1).astype("<f2")),
        "f32.scalar": ("float32", (), np.array(3.25, dtype="<f4")),
        "f64.empty": ("float64", (0, 7), np.zeros((0, 7), dtype="<f8")),
        "i64.ids": ("int64", (4,), np.array([0, -1, 2**40, -(2**62)], dtype="<i8")),
        "i32.x": ("int32", (3,), np.array([7, -7, 2**31 - 1], dtype="<i4")),
        "i16.x": ("int16", (2,), np.array([-300, 300], dtype="<i2")),
        "i8.x": ("int8", (6,), np.arange(-3, 3, dtype="<i1")),
        "u8.cube": ("uint8", (2, 2, 2), np.arange(8, dtype="u1")),
        "bool.mask": ("bool", (3,), np.array([True, False, True])),
        "f8_e4m3.x": ("float8_e4m3fn", (2,), np.array([0x38, 0xB8], dtype="u1")),
        "f8_e5m2.x": ("float8_e5m2", (2,), np.array([0x3C, 0xBC], dtype="u1")),
    }
    specs = {name: spec(dt, shape, buf) for name, (dt, shape, buf) in arrays.items()}
    metadata = {"format": "pt", "writer": f"safetensors {safetensors.__version__}"}
    data = bytes(serialize(specs, metadata=metadata))
    out = pathlib.Path(__file__).with_name("reference.safetensors")
    out.write_bytes(data)
    print(f"wrote {out} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
