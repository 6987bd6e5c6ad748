"""Environment fingerprint and env key (harness/env.py)."""

from __future__ import annotations

import json

import pytest
import torch

from harness.env import (
    NUMERICS_KEYS,
    canonical_dtype,
    env_key,
    fingerprint,
    hardware_class,
    is_safe_key,
    numerics_differences,
)


def test_fingerprint_has_versions_device_and_numerics():
    fp = fingerprint()
    for key in ("python", "torch", "transformers", "tokenizers", "safetensors"):
        assert fp[key] and fp[key] != "absent", key
    assert fp["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert fp["device"]["type"] == "cpu" and fp["device"]["arch"] and fp["device"]["name"]
    assert fp["dtype"] == "fp32"
    assert fp["threads"] == torch.get_num_threads()
    assert fp["attn_implementation"] == "sdpa"
    assert fp["deterministic"] is torch.are_deterministic_algorithms_enabled()
    json.dumps(fp)  # plain data


def test_fingerprint_records_dtype_threads_and_attention():
    fp = fingerprint(dtype="bfloat16", attn_implementation="eager", threads=1)
    assert (fp["dtype"], fp["threads"], fp["attn_implementation"]) == ("bf16", 1, "eager")


def test_env_key_is_readable_and_safe():
    fp = fingerprint()
    key = env_key(fp)
    transformers_version = fp["transformers"].split("+")[0]
    torch_version = fp["torch"].split("+")[0]
    assert key == f"tf{transformers_version}-torch{torch_version}-cpu-{fp['device']['arch']}-fp32"
    assert is_safe_key(key)
    assert env_key(fingerprint(dtype="bf16")).endswith("-bf16")


def test_env_key_sanitises_hostile_values():
    fp = {"transformers": "5.0/../../etc", "torch": "2.1 +x", "device": {"type": "cuda", "capability": "9.0"},
          "dtype": "fp16"}
    key = env_key(fp)
    assert is_safe_key(key) and "/" not in key and " " not in key
    assert key.endswith("cuda-sm90-fp16")
    assert not is_safe_key("../x") and not is_safe_key("") and not is_safe_key("..")


def test_canonical_dtype_accepts_torch_names_and_rejects_others():
    assert canonical_dtype(torch.float16) == "fp16"
    assert canonical_dtype("float32") == "fp32"
    with pytest.raises(ValueError, match="unknown dtype 'int8'.*fp32"):
        canonical_dtype("int8")


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        fingerprint(device="tpu")


def test_numerics_differences_and_hardware_class():
    a = fingerprint(threads=2)
    assert numerics_differences(a, dict(a)) == []
    b = {**a, "threads": 1, "dtype": "bf16"}
    assert numerics_differences(a, b) == ["dtype", "threads"]
    assert numerics_differences(a, None) == list(NUMERICS_KEYS)
    assert hardware_class(a) != hardware_class(b)  # threads are part of a CPU's hardware class
    assert hardware_class(a) == hardware_class({**a, "dtype": "bf16"})
