"""Environment fingerprint and the readable env key that names a directory of golden records.

A record is only meaningful together with the environment it was taken in. The fingerprint
holds everything that can change what `generate()` returns or how fast it runs:

- versions: python, torch, transformers, tokenizers, safetensors (read from package metadata,
  so nothing heavy is imported just to ask),
- device: ``{"type": "cpu", "name": <CPU model>, "arch": <machine>}`` or
  ``{"type": "cuda", "name": <GPU name>, "capability": "9.0", "arch": <host machine>}``,
- numerics: dtype, thread count, attention implementation, deterministic-algorithms flag,
  float32 matmul precision,
- CPU kernels (`cpu_kernels`): what decides which kernels torch runs on this CPU - the ISA level its
  dispatcher picked (``torch.backends.cpu.get_cpu_capability()``: DEFAULT / AVX2 / AVX512 / AMX ...),
  the oneDNN and BLAS torch was built with (``torch.__config__.show()``) and the SDPA backends that
  are enabled. Two machines of one arch with another ISA level round differently (another GEMM
  micro-kernel) and time differently, so the ISA is part of the numerics and of the hardware class.

The env key is the short, readable part of it, e.g. ``tf5.24.0-torch2.13.0-cpu-x86_64-fp32``
(``...-cuda-sm90-bf16`` on a GPU). It is a safe directory name (``[A-Za-z0-9._-]`` only). The
full fingerprint is stored inside every record, so two envs that share a key (e.g. a different
thread count) are still told apart when comparing.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

# Canonical dtype names, and the spellings accepted for them.
DTYPES = {
    "fp32": ("fp32", "float32", "float", "torch.float32"),
    "fp16": ("fp16", "float16", "half", "torch.float16"),
    "bf16": ("bf16", "bfloat16", "torch.bfloat16"),
    "fp64": ("fp64", "float64", "double", "torch.float64"),
}

VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors")
# packages that are not generate()'s but change what a version does with it, seen in the records (issue 62):
# accelerate (4.57's quantized load raises without it; the gguf_file= load needs it), psutil (5.13+'s
# continuous batching sizes its cache from the free memory psutil reports: without it a MemoryError),
# kernels (5.25 requires it and kernelizes on load by default), gguf and torchao (the real and serving
# extras). Recorded, not part of the key: `moved_axes` names one that moved.
OUTCOME_PACKAGES = ("accelerate", "psutil", "kernels", "gguf", "torchao")

# Fingerprint entries that change floating-point results (not only speed). Two envs that differ
# in any of them may legitimately flip a near-tie or drift within a tolerance.
NUMERICS_KEYS = ("device", "dtype", "threads", "torch", "attn_implementation", "matmul_precision", "cpu_kernels")

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def canonical_dtype(dtype: Any) -> str:
    """'float32', torch.float32, 'fp32' -> 'fp32'. Raises ValueError naming the accepted names."""
    text = str(dtype).strip().lower()
    for name, spellings in DTYPES.items():
        if text in spellings:
            return name
    accepted = ", ".join(DTYPES)
    raise ValueError(f"unknown dtype {dtype!r}; expected one of {accepted}")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def _cpu_name() -> str:
    """The CPU model as the OS reports it ('AMD EPYC 9454', 'Apple M2', ...)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _device_info(device: str) -> dict[str, Any]:
    import torch

    kind = device.split(":", 1)[0]
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
        index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return {
            "type": "cuda",
            "name": torch.cuda.get_device_name(index),
            "capability": f"{major}.{minor}",
            "arch": platform.machine(),
        }
    if kind == "cpu":
        return {"type": "cpu", "name": _cpu_name(), "arch": platform.machine()}
    if kind == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError("device 'mps' requested but torch.backends.mps.is_available() is False")
        return {"type": "mps", "name": _cpu_name(), "arch": platform.machine()}
    raise ValueError(f"unknown device {device!r}; expected cpu, cuda[:N] or mps")


def _built_with(config: str, pattern: str) -> str:
    match = re.search(pattern, config)
    return match.group(1) if match else "unknown"


def cpu_kernels() -> dict[str, Any]:
    """What decides the CPU kernels torch dispatches to, read from torch as it is now:
    ``{"isa": "AVX512", "low_precision_units": ["amx_bf16", ...], "onednn": "3.12.0", "blas": "mkl",
    "sdpa_backends": ["flash", ...]}`` (`low_precision_units`: the CPU's bf16 / fp16 units, which the
    dispatch level does not name).

    The SDPA flags are torch's global backend switches (``torch.backends.cuda.*_sdp_enabled``: on a
    CPU they choose between the fused flash kernel and the math one too)."""
    import torch

    config = torch.__config__.show()
    switches = {"flash": "flash_sdp_enabled", "efficient": "mem_efficient_sdp_enabled",
                "math": "math_sdp_enabled", "cudnn": "cudnn_sdp_enabled"}
    backends = sorted(name for name, flag in switches.items()
                      if getattr(torch.backends.cuda, flag, None) is not None and getattr(torch.backends.cuda, flag)())
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    caps = isa_caps()
    return {
        "isa": str(capability()) if capability else "unknown",
        "low_precision_units": low_precision_units(),
        "onednn": _built_with(config, r"MKL-DNN v([0-9][0-9.]*)"),
        "blas": _built_with(config, r"BLAS_INFO=([A-Za-z0-9_]+)"),
        "sdpa_backends": backends,
        **({"isa_caps": caps} if caps else {}),  # only where set: a native run's fingerprint is as it was
    }


# The variables that cap the instruction set torch's dispatcher, oneDNN and MKL use - an AVX-512 host
# runs as an AVX2 one (issue 60: SmolLM2 in bf16 greedy parts from the native run at token 31). A run
# under a cap is its own hardware class: the cap is in the fingerprint (`cpu_kernels.isa_caps`) and the
# dispatcher's cap in the env key (`tf5.24.0-torch2.13.0-cpu-x86_64-avx2-fp32`), so its records are a
# store of their own and `harness compare` reads the move between the two classes. Each must be set
# before torch is imported (the children `harness check` starts inherit them).
ISA_CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def isa_cap_problem(fp: dict[str, Any]) -> str:
    """Why a fingerprint's ISA cap did not take ('' when it did or there is none): ATEN_CPU_CAPABILITY set
    after torch was imported leaves the dispatcher where it was - records made so would be filed under a
    hardware class they were not made in."""
    kernels = fp.get("cpu_kernels") or {}
    cap = (kernels.get("isa_caps") or {}).get("ATEN_CPU_CAPABILITY", "").strip()
    if not cap or str(kernels.get("isa", "")).lower() == cap.lower():
        return ""
    return (f"ATEN_CPU_CAPABILITY={cap} but torch dispatches to {kernels.get('isa')}: set it before torch is imported "
            "(in the shell that starts `harness`, or with --cpu-isa), or it is not a level this CPU or torch has")


def isa_caps(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The `ISA_CAPS` set in the environment (empty: the machine's native dispatch)."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in ISA_CAPS if environ.get(name, "").strip()}


# the CPU flags that give oneDNN / torch another bf16 / fp16 matmul kernel: torch's dispatch level
# ("AVX512") is the same on a Sapphire Rapids (AMX) and an Ice Lake (neither), and their bf16
# logits differ by 1-2 bf16 ulps (2026-12-02: this machine's AMX run moved 14 bf16 records made on
# an "Intel(R) Xeon(R) Processor" of the same ISA level; fp32 moved none)
LOW_PRECISION_FLAGS = ("avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "avx_ne_convert")


def low_precision_units(cpuinfo: str | None = None) -> list[str] | str:
    """The `LOW_PRECISION_FLAGS` this CPU has (Linux /proc/cpuinfo's first `flags` line), sorted;
    "unknown" where the flags cannot be read (another OS): unknown is never equal to a list."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "unknown"
    line = next((x for x in cpuinfo.splitlines() if x.startswith("flags")), None)
    if line is None:
        return "unknown"
    flags = set(line.split(":", 1)[-1].split())
    return sorted(flag for flag in LOW_PRECISION_FLAGS if flag in flags)


def key_of(dtype: str = "fp32", device: str = "cpu") -> str:
    """The env key a run on `device` in `dtype` records under, without importing torch where the
    key needs nothing from it (a CPU: versions come from package metadata, the arch from the OS);
    equal to ``env_key(fingerprint(dtype=dtype, device=device))`` (tests/test_env.py). The CLI
    names its report folder with it before any pytest starts."""
    if device.split(":", 1)[0] != "cpu":
        return env_key(fingerprint(dtype=dtype, device=device))
    caps = isa_caps()
    return env_key({**{name: _version(name) for name in VERSIONED_PACKAGES},
                    "device": {"type": "cpu", "arch": platform.machine()}, "dtype": canonical_dtype(dtype),
                    **({"cpu_kernels": {"isa_caps": caps}} if caps else {})})


def fingerprint(
    dtype: str = "fp32",
    attn_implementation: str = "sdpa",
    device: str = "cpu",
    threads: int | None = None,
) -> dict[str, Any]:
    """The environment the observations are taken in, as plain JSON data.

    `threads` defaults to ``torch.get_num_threads()`` (what the run really uses); the
    deterministic flag is read from torch as it is now.
    """
    import torch

    return {
        "python": platform.python_version(),
        **{name: _version(name) for name in VERSIONED_PACKAGES},
        "platform": sys.platform,
        "device": _device_info(device),
        "dtype": canonical_dtype(dtype),
        "threads": int(threads) if threads is not None else torch.get_num_threads(),
        "attn_implementation": str(attn_implementation),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cpu_kernels": cpu_kernels(),
        "packages": {name: _version(name) for name in OUTCOME_PACKAGES},
    }


def _short_version(version: str) -> str:
    """'2.13.0+cpu' -> '2.13.0' (the local build tag is in the fingerprint, not the key)."""
    return version.split("+", 1)[0]


def _device_tag(device: dict[str, Any], kernels: dict[str, Any] | None = None) -> str:
    """`cpu-x86_64`, `cuda-sm90`; a CPU run whose dispatcher is capped (ATEN_CPU_CAPABILITY) names the
    cap: `cpu-x86_64-avx2`."""
    if device.get("type") == "cuda":
        return "cuda-sm" + str(device.get("capability", "")).replace(".", "")
    cap = ((kernels or {}).get("isa_caps") or {}).get("ATEN_CPU_CAPABILITY", "")
    return f"{device.get('type', 'unknown')}-{device.get('arch', 'unknown')}" + (f"-{cap.strip().lower()}" if cap else "")


def env_key(fp: dict[str, Any]) -> str:
    """`tf<transformers>-torch<torch>-<device>-<dtype>`, e.g. ``tf5.24.0-torch2.13.0-cpu-x86_64-fp32``
(``...-cpu-x86_64-avx2-fp32`` under an ISA cap: `isa_caps`).

    Only ``[A-Za-z0-9._-]`` survive, so the key is a safe directory name on every OS.
    """
    parts = [
        "tf" + _short_version(str(fp.get("transformers", "absent"))),
        "torch" + _short_version(str(fp.get("torch", "absent"))),
        _device_tag(fp.get("device", {}), fp.get("cpu_kernels") if isinstance(fp.get("cpu_kernels"), dict) else None),
        str(fp.get("dtype", "fp32")),
    ]
    key = _SAFE.sub("_", "-".join(parts)).strip("._-")
    if not key or key in {".", ".."}:
        raise ValueError(f"cannot build an env key from fingerprint {fp!r}")
    return key


def is_safe_key(key: str) -> bool:
    """True when `key` can name a directory: non-empty, only [A-Za-z0-9._-], not '.'/'..'."""
    return bool(key) and not _SAFE.search(key) and key not in {".", ".."} and os.sep not in key


def hardware_class(fp: dict[str, Any]) -> str:
    """What latency numbers are comparable across: the device model, plus threads and the ISA level
    torch dispatches to on a CPU (the same CPU model under another torch build can pick another
    one: pytorch #193951's decode slowdown was AMX-only).

    Two fingerprints with different hardware classes never have their latencies compared. A record
    made before the ISA was fingerprinted has none in its class: it is another class.
    """
    device = fp.get("device", {})
    if device.get("type") == "cuda":
        return f"cuda/{device.get('name')}/sm{str(device.get('capability', '')).replace('.', '')}"
    base = f"{device.get('type')}/{device.get('arch')}/{device.get('name')}/threads={fp.get('threads')}"
    kernels = fp.get("cpu_kernels") or {}
    isa, caps = kernels.get("isa"), kernels.get("isa_caps") or {}
    base = f"{base}/isa={isa}" if isa else base
    return base + "".join(f"/{name}={value}" for name, value in sorted(caps.items()))  # oneDNN / MKL under a cap


def numerics_differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """The `NUMERICS_KEYS` on which two fingerprints differ (empty list: same numerics).

    A missing fingerprint counts as different in everything (nothing is known about it).
    """
    if not a or not b:
        return list(NUMERICS_KEYS)
    return [key for key in NUMERICS_KEYS if a.get(key) != b.get(key)]


def _part(fp: dict[str, Any], key: str) -> dict[str, Any]:  # a results.json from elsewhere: any shape
    value = fp.get(key)
    return value if isinstance(value, dict) else {}


def _shown(kernels: dict[str, Any], key: str) -> str:
    if key == "isa_caps":
        return ",".join(f"{k}={v}" for k, v in (kernels.get(key) or {}).items()) or "none (native)"
    value = kernels.get(key, "not recorded")
    return ",".join(value) if isinstance(value, list) else str(value)


# what the machine has (machine_differences: "another machine") and what the torch build brings
# ("another torch build"): oneDNN and BLAS are linked into torch, the SDPA switches are torch's
MACHINE_KERNELS = (("isa", "CPU ISA"), ("isa_caps", "ISA cap"), ("low_precision_units", "bf16/fp16 units"))
BUILD_KERNELS = (("onednn", "oneDNN"), ("blas", "BLAS"), ("sdpa_backends", "SDPA backends"))


def machine_differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    """One sentence when two fingerprints ran on kernels that differ ("" when they do not or when
    either is unknown): another machine (device model, bf16 / fp16 units, the ISA level torch
    dispatches to) and / or another torch build (the oneDNN / BLAS it links, its SDPA switches).
    The ISA counts as the torch build's when the device model is the same and torch moved (a newer
    dispatcher picking another level on the same CPU). A report comparing them says so beside its
    verdict: latency is never compared across hardware classes (`hardware_class`: the ISA is in it),
    and their rounding may differ."""
    machine, build = kernel_differences(a, b)
    if not machine and not build:
        return ""
    said = [*(["another machine: " + "; ".join(machine)] if machine else []),
            *(["another torch build: " + "; ".join(build)] if build else [])]
    latency = ("latency is not compared (another hardware class)" if hardware_class(a or {}) != hardware_class(b or {})
               else "latency is compared (the same hardware class)")
    return ", ".join(said) + f" (baseline -> this run): {latency}, and floating-point rounding may differ"


def kernel_differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """(what differs of the machine, what differs of the torch build), each "label old -> new"
    (b -> a); both empty when the kernels are the same or either fingerprint is unknown
    (`machine_differences` says them as one sentence)."""
    if not isinstance(a, dict) or not isinstance(b, dict) or not a or not b:
        return [], []
    machine: list[str] = []
    build: list[str] = []
    da, db = _part(a, "device"), _part(b, "device")
    same_device = (da.get("type"), da.get("name")) == (db.get("type"), db.get("name"))
    if not same_device:
        machine.append(f"device {db.get('name', '?')} -> {da.get('name', '?')}")
    ka, kb = _part(a, "cpu_kernels"), _part(b, "cpu_kernels")
    torch_moved = a.get("torch") != b.get("torch")
    for key, label in (*MACHINE_KERNELS, *BUILD_KERNELS):
        absent = {} if key == "isa_caps" else "unknown"  # no cap recorded: the native dispatch
        if kb.get(key, absent) != ka.get(key, absent):
            by_build = (key, label) in BUILD_KERNELS or (key == "isa" and same_device and torch_moved)
            (build if by_build else machine).append(f"{label} {_shown(kb, key)} -> {_shown(ka, key)}")
    return machine, build


def hardware_difference(this_run: str, recorded: list[str]) -> str:
    """Why a latency recorded on `recorded` hardware classes is not compared with `this_run`'s, when
    one of them is the same device that only dispatches to another ISA level ("" otherwise)."""
    base = this_run.split("/isa=", 1)[0]
    for other in recorded:
        if other != this_run and other.split("/isa=", 1)[0] == base:
            isa = other.split("/isa=", 1)[1] if "/isa=" in other else "not recorded"
            here = this_run.split("/isa=", 1)[1] if "/isa=" in this_run else "not recorded"
            return f"the CPU ISA torch dispatches to differs (record {isa}, this run {here}): "
    return ""


# the axes of an upgrade report (`moved_axes`): what can move between a baseline and a run
AXES = ("transformers", "torch", "dtype", "device", "threads")


def _axis_value(fp: dict[str, Any], axis: str) -> str:
    if axis in ("transformers", "torch"):
        return _short_version(str(fp.get(axis, "absent")))
    if axis == "device":
        device = _part(fp, "device")
        isa = _part(fp, "cpu_kernels").get("isa")
        return " ".join(str(x) for x in (device.get("type"), device.get("name"), isa) if x)
    return str(fp.get(axis, "absent"))


def moved_axes(current: dict[str, Any] | None, baseline: dict[str, Any] | None) -> str:
    """The report header's line on which axis moved between the baseline and this run (`AXES`:
    transformers, torch, dtype, device - the machine and the ISA torch dispatches to - threads),
    e.g. "axis moved: torch 2.12.1 -> 2.13.0 (held: transformers 5.24.0, dtype fp32, ...)"; several
    moved: "axes moved: ... - more than one at a time: a finding is not pinned on one axis"; "" when
    either fingerprint is unknown. A torch bump and a transformers bump change generate() in their
    own ways, so the report names the one it measures."""
    if not isinstance(current, dict) or not isinstance(baseline, dict) or not current or not baseline:
        return ""
    values = {axis: (_axis_value(baseline, axis), _axis_value(current, axis)) for axis in AXES}
    moved = [f"{axis} {old} -> {new}" for axis, (old, new) in values.items() if old != new]
    held = ", ".join(f"{axis} {old}" for axis, (old, new) in values.items() if old == new)
    packages = packages_moved(current, baseline)
    also = f"; also moved: {packages}" if packages else ""
    if not moved:
        return f"no axis moved (the same {held})" + also
    if len(moved) == 1:
        return f"axis moved: {moved[0]}" + (f" (held: {held})" if held else "") + also
    return ("axes moved: " + "; ".join(moved) + " - more than one at a time: a finding is not pinned on one axis"
            + (f" (held: {held})" if held else "") + also)


def packages_moved(current: dict[str, Any], baseline: dict[str, Any]) -> str:
    """The `OUTCOME_PACKAGES` whose versions differ ("psutil absent -> 7.1.0, kernels absent -> 0.19.1"),
    "" when none did or either fingerprint predates them (not recorded: nothing is claimed)."""
    a, b = _part(current, "packages"), _part(baseline, "packages")
    if not a or not b:
        return ""
    return ", ".join(f"{name} {b.get(name, 'absent')} -> {a.get(name, 'absent')}" for name in OUTCOME_PACKAGES
                     if a.get(name, "absent") != b.get(name, "absent"))
