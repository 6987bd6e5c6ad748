"""A checkpoint's safetensors files memory-mapped: every tensor a view of the file's pages, in the
dtype it was saved in - nothing is read until a forward touches it, and the pages are the page
cache's (shared with every other process that maps the file, given back under memory pressure).

The safetensors layout (https://github.com/huggingface/safetensors, "Format"):

    [8 bytes: N, little-endian u64][N bytes: JSON header][data]
    header = {name: {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}

offsets are relative to the start of the data (8 + N). `header_of` reads only the header (the
preflight's parameter count needs no weights); `mapped` maps the file copy-on-write (a tensor a
caller writes to would change its own pages, never the file).
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path
from typing import Any

import torch

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
         "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER = 100 << 20  # the format's own bound on N


def header_of(path: Path | str) -> tuple[dict[str, Any], int]:
    """(the header's tensor entries, the data's start offset) of one safetensors file."""
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (size,) = struct.unpack("<Q", raw)
        if size > MAX_HEADER:
            raise ValueError(f"{path}: safetensors header of {size} bytes (over the format's {MAX_HEADER})")
        header = json.loads(handle.read(size))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    return header, 8 + size


def weight_files(directory: Path) -> list[Path]:
    """The checkpoint's safetensors files: `model.safetensors`, else every shard."""
    single = directory / "model.safetensors"
    return [single] if single.is_file() else sorted(directory.glob("model-*.safetensors"))


def mapped(path: Path | str) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file as a view of its memory-mapped pages (no copy)."""
    header, start = header_of(path)
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        if size == 0:
            return {}
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    out = {}
    for name, entry in header.items():
        dtype = DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has dtype {entry['dtype']}, which the reference engine does not read")
        begin, end = entry["data_offsets"]
        count = (end - begin) // BYTES[entry["dtype"]]
        if count == 0:
            out[name] = torch.empty(entry["shape"], dtype=dtype)
            continue
        out[name] = torch.frombuffer(buffer, dtype=dtype, count=count, offset=start + begin).view(entry["shape"])
    return out


def mapped_checkpoint(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's safetensors files, memory-mapped."""
    out: dict[str, torch.Tensor] = {}
    for path in weight_files(directory):
        out.update(mapped(path))
    return out
