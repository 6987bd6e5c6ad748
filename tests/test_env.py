"""Environment fingerprint and env key (harness/store/env.py)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from harness.store.env import (
    NUMERICS_KEYS,
    canonical_dtype,
    env_key,
    fingerprint,
    hardware_class,
    is_safe_key,
    key_of,
    machine_differences,
    moved_axes,
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


@pytest.mark.parametrize("dtype", ["fp32", "bfloat16", "fp16", "torch.float64"])
def test_the_cli_key_without_torch_is_the_fingerprints_key(dtype):
    assert key_of(dtype=dtype, device="cpu") == env_key(fingerprint(dtype=dtype, device="cpu"))


def test_the_cli_key_refuses_what_the_fingerprint_refuses():
    for dtype, device, says in (("fp8", "cpu", "unknown dtype"), ("fp32", "tpu", "unknown device")):
        with pytest.raises(ValueError, match=says):
            key_of(dtype=dtype, device=device)


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


def test_fingerprint_names_the_cpu_kernels_torch_dispatches_to():
    kernels = fingerprint()["cpu_kernels"]
    assert kernels["isa"] == str(torch.backends.cpu.get_cpu_capability())
    config = torch.__config__.show()
    assert kernels["onednn"] in config and kernels["blas"] in config  # read from torch's build config
    assert set(kernels["sdpa_backends"]) <= {"flash", "efficient", "math", "cudnn"}
    assert ("math" in kernels["sdpa_backends"]) is torch.backends.cuda.math_sdp_enabled()


def test_the_bf16_units_are_read_from_the_cpu_flags_and_differ_in_numerics():
    """Two CPUs at torch's same dispatch level (AVX512) with and without AMX / AVX512-BF16 round bf16
    matmuls differently: the fingerprint names the units, so the two are other numerics."""
    from harness.store.env import low_precision_units

    spr = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile avx512_fp16\n\nflags\t: ignored\n"
    assert low_precision_units(spr) == ["amx_bf16", "avx512_bf16", "avx512_fp16"]
    assert low_precision_units("flags\t: fpu avx512f avx2\n") == [] and low_precision_units("no flags here") == "unknown"
    a = fingerprint(threads=1)
    assert isinstance(a["cpu_kernels"]["low_precision_units"], (list, str))
    icelake = {**a, "cpu_kernels": {**a["cpu_kernels"], "low_precision_units": []}}
    amx = {**a, "cpu_kernels": {**a["cpu_kernels"], "low_precision_units": ["amx_bf16", "avx512_bf16"]}}
    assert numerics_differences(icelake, amx) == ["cpu_kernels"]
    assert "bf16/fp16 units  -> amx_bf16,avx512_bf16" in machine_differences(amx, icelake)


def test_another_isa_is_another_hardware_class_and_other_numerics_and_the_report_says_so():
    a = fingerprint(threads=1)
    other_isa = {**a, "cpu_kernels": {**a["cpu_kernels"], "isa": "AVX2" if a["cpu_kernels"]["isa"] != "AVX2" else "AMX"}}
    assert hardware_class(a) != hardware_class(other_isa)  # latency never compared across ISA levels
    assert "isa=" + a["cpu_kernels"]["isa"] in hardware_class(a)
    assert numerics_differences(a, other_isa) == ["cpu_kernels"]
    note = machine_differences(a, other_isa)
    assert "CPU ISA " + other_isa["cpu_kernels"]["isa"] + " -> " + a["cpu_kernels"]["isa"] in note
    assert machine_differences(a, dict(a)) == "" and machine_differences(a, None) == ""
    assert machine_differences({"device": "cpu"}, {"device": "cpu", "cpu_kernels": 3}) == ""  # any shape: no crash
    old_record = {k: v for k, v in a.items() if k != "cpu_kernels"}  # a record made before the ISA was recorded
    assert "not recorded" in machine_differences(a, old_record)
    assert hardware_class(old_record) != hardware_class(a)


def test_the_fingerprint_fields_that_decide_cpu_kernels_have_their_types():
    kernels = fingerprint()["cpu_kernels"]
    for key in ("isa", "onednn", "blas"):
        assert isinstance(kernels[key], str) and kernels[key], key
    assert isinstance(kernels["sdpa_backends"], list) and all(isinstance(b, str) for b in kernels["sdpa_backends"])
    assert kernels["sdpa_backends"] == sorted(kernels["sdpa_backends"])


def test_a_torch_bump_on_the_same_cpu_is_another_torch_build_not_another_machine():
    a = fingerprint(threads=1)
    newer = {**a, "torch": "9.9.9", "cpu_kernels": {**a["cpu_kernels"], "onednn": "0.0.1", "isa": "AMX"}}
    note = machine_differences(newer, a)
    assert note.startswith("another torch build: ") and "another machine" not in note
    assert "oneDNN " + a["cpu_kernels"]["onednn"] + " -> 0.0.1" in note and "CPU ISA" in note
    assert "latency is not compared" in note  # the ISA moved: another hardware class
    build_only = {**a, "torch": "9.9.9", "cpu_kernels": {**a["cpu_kernels"], "blas": "openblas"}}
    assert "latency is compared (the same hardware class)" in machine_differences(build_only, a)
    elsewhere = {**newer, "device": {**a["device"], "name": "Another CPU"}}
    assert machine_differences(elsewhere, a).startswith("another machine: device ")  # ISA with the machine


def test_the_report_header_names_the_axis_that_moved():
    a = fingerprint(threads=1)
    torch_bump = {**a, "torch": "9.9.9+cpu"}
    line = moved_axes(torch_bump, a)
    assert line.startswith("axis moved: torch " + a["torch"].split("+")[0] + " -> 9.9.9")
    assert "held: transformers " + a["transformers"] in line
    tf_bump = {**a, "transformers": "0.0.1"}
    assert moved_axes(tf_bump, a).startswith("axis moved: transformers ") and "held: " in moved_axes(tf_bump, a)
    both = moved_axes({**tf_bump, "torch": "9.9.9"}, a)
    assert both.startswith("axes moved: transformers") and "torch" in both and "not pinned on one axis" in both
    assert moved_axes({**a, "dtype": "bf16"}, a).startswith("axis moved: dtype fp32 -> bf16")
    assert moved_axes(a, dict(a)).startswith("no axis moved") and moved_axes(a, None) == ""


def test_a_package_that_is_not_installed_is_recorded_as_absent(monkeypatch):
    import harness.store.env as env

    def not_installed(name):
        raise env.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(env.metadata, "version", not_installed)
    fp = fingerprint()
    assert {fp[name] for name in env.VERSIONED_PACKAGES} == {"absent"}
    assert env_key(fp).startswith("tfabsent-torchabsent-cpu-")


def test_cpu_name_without_proc_cpuinfo_falls_back_to_platform(monkeypatch):
    import harness.store.env as env

    def unreadable(*args, **kwargs):
        raise OSError("no /proc here")

    monkeypatch.setattr(env, "open", unreadable, raising=False)
    monkeypatch.setattr(env.platform, "processor", lambda: "")
    monkeypatch.setattr(env.platform, "machine", lambda: "riscv64")
    assert fingerprint()["device"] == {"type": "cpu", "name": "riscv64", "arch": "riscv64"}
    monkeypatch.setattr(env.platform, "machine", lambda: "")
    assert env._cpu_name() == "unknown"


def test_cuda_fingerprint_key_and_hardware_class(monkeypatch):
    """What a GPU run records (torch.cuda faked: the device is read through its API only)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="torch.cuda.is_available\\(\\) is False"):
        fingerprint(device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: {0: (9, 0), 1: (8, 0)}[i])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: {0: "NVIDIA H200", 1: "NVIDIA A100"}[i])
    h200, a100 = fingerprint(device="cuda", dtype="bf16"), fingerprint(device="cuda:1")
    assert h200["device"]["name"] == "NVIDIA H200" and h200["device"]["capability"] == "9.0"
    assert env_key(h200).endswith("-cuda-sm90-bf16") and env_key(a100).endswith("-cuda-sm80-fp32")
    assert hardware_class(h200) == "cuda/NVIDIA H200/sm90"
    # on a GPU the thread count is not part of the hardware class (it is on a CPU)
    assert hardware_class({**h200, "threads": 99}) == hardware_class(h200) != hardware_class(a100)


def test_mps_fingerprint(monkeypatch):
    import torch

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)  # an Apple machine, faked
    fp = fingerprint(device="mps")
    assert fp["device"]["type"] == "mps" and env_key(fp).split("-")[2] == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device 'mps' requested but"):
        fingerprint(device="mps")



def test_an_isa_cap_is_its_own_hardware_class_in_the_key_and_the_fingerprint(monkeypatch):
    """ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA / MKL_ENABLE_INSTRUCTIONS make an AVX-512 host run as an
    AVX2 one (issue 60): the cap names the key's device tag and sits in the fingerprint; a native run's
    key and fingerprint are as they were (no `isa_caps`), so no committed record moved."""
    native = fingerprint()
    assert "isa_caps" not in native["cpu_kernels"] and "-avx2-" not in key_of()
    for name, value in (("ATEN_CPU_CAPABILITY", "avx2"), ("ONEDNN_MAX_CPU_ISA", "AVX2"), ("MKL_ENABLE_INSTRUCTIONS", "AVX2")):
        monkeypatch.setenv(name, value)
    capped = fingerprint()
    assert capped["cpu_kernels"]["isa_caps"] == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                                 "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert env_key(capped) == key_of() == env_key(native).replace("-cpu-x86_64-", "-cpu-x86_64-avx2-") \
        if native["device"]["arch"] == "x86_64" else env_key(capped).endswith("-avx2-fp32")
    assert "ISA cap none (native) -> ATEN_CPU_CAPABILITY=avx2" in machine_differences(capped, native)
    assert numerics_differences(capped, native) == ["cpu_kernels"]
    assert hardware_class(capped) != hardware_class(native)  # latency is not compared across them either
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", " ")  # blank: not a cap
    assert "ATEN_CPU_CAPABILITY" not in fingerprint()["cpu_kernels"]["isa_caps"]


def test_a_cap_set_after_torch_was_imported_is_refused_and_the_flag_sets_all_three(monkeypatch):
    from harness.cli.project import apply_cpu_isa
    from harness.store.env import ISA_CAPS, isa_cap_problem

    for name in ISA_CAPS:
        monkeypatch.setenv(name, "")  # blank: no cap; monkeypatch removes what apply_cpu_isa sets afterwards
    native = fingerprint()
    assert isa_cap_problem(native) == ""
    other = "default" if native["cpu_kernels"]["isa"].lower() != "default" else "avx2"
    apply_cpu_isa(other)  # in this process torch is imported already: the dispatcher stays where it was
    assert all(os.environ.get(name) for name in ISA_CAPS)
    assert "set it before torch is imported" in isa_cap_problem(fingerprint())


def test_the_packages_that_change_an_outcome_are_recorded_and_a_moved_one_is_named():
    from harness.store.env import OUTCOME_PACKAGES

    fp = fingerprint()
    assert set(fp["packages"]) == set(OUTCOME_PACKAGES)
    without = {**fp, "packages": {**fp["packages"], "psutil": "absent"}}
    with_ = {**fp, "packages": {**fp["packages"], "psutil": "7.1.0"}}
    assert moved_axes(with_, without).endswith("also moved: psutil absent -> 7.1.0")
    assert "also moved" not in moved_axes(with_, {k: v for k, v in fp.items() if k != "packages"})  # not recorded
    assert env_key(with_) == env_key(without)  # recorded, not part of the key
