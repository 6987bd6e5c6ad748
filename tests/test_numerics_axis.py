"""The hardware axis is real: a run loads its models in the env key's dtype on its device, and no
record claims numerics it did not use."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.settings.config import load_config
from harness.store.records import GoldenStore
from harness.subjects.hf import Zoo, loaded_as

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize(("dtype", "torch_dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_the_zoo_loads_in_the_runs_dtype(dtype, torch_dtype):
    zoo = Zoo(load_config(ROOT).models_dir, dtype=dtype)
    model = zoo.load("llama-assistant").model
    assert {p.dtype for p in model.parameters()} == {torch_dtype}
    assert loaded_as(model) == {"dtype": dtype, "device": "cpu"}
    assert zoo.prompt_ids("llama-assistant", "short-0").device.type == "cpu"


def test_no_record_claims_a_dtype_it_did_not_use():
    """Every recorded env's backends records carry the dtype the parameters really had
    (`loaded_as`, observed through the loaded model): it must be the env key's own."""
    store = GoldenStore(load_config(ROOT).golden_dir)
    checked = 0
    for key in store.env_keys():
        for record in store.records(key):
            field = record.fields.get("default_attn_implementation")
            if record.suite == "backends" and field is not None:
                assert field.extras["loaded_as"]["dtype"] == record.env["dtype"] == key.rsplit("-", 1)[1], record.case
                checked += 1
    assert checked >= 8 * 3  # every zoo model in at least the three fp32 envs


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_an_unavailable_device_is_a_usage_error(device, capfd):
    available = torch.cuda.is_available() if device == "cuda" else torch.backends.mps.is_available()
    if available:
        pytest.skip(f"{device} is available here")
    assert main(["check", "--device", device, "--root", str(ROOT)]) == 2
    err = capfd.readouterr().err
    assert f"device '{device}' requested but" in err and "Traceback" not in err
