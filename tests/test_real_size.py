"""Issue 42, your own model at real size, without a real-size model: the preflight's parameter count
from a safetensors header alone, memory per worker and the workers it allows, the budget plan's
selection (every suite covered, the rest listed), the progress line, and the reference engine on a
memory-mapped bf16 checkpoint computing exactly what it computed on its fp32 copy."""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness import cases
from harness.engine.mapped import header_of, mapped_checkpoint
from harness.engine.model import Model
from harness.plugin import progress
from harness.settings import budget, preflight
from harness.settings.models import UserModel
from harness.zoo.load import MODELS_DIR
from harness.zoo.prompts import PROMPTS

LLAMA_1B = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 8192,
            "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8}


def llama_shapes(cfg: dict) -> dict[str, list[int]]:
    """The tensors a Llama checkpoint of `cfg` holds (untied lm_head), by name."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    out = {"model.embed_tokens.weight": [v, h], "lm_head.weight": [v, h], "model.norm.weight": [h]}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out |= {p + "self_attn.q_proj.weight": [h, h], p + "self_attn.k_proj.weight": [kv, h],
                p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, h],
                p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h], p + "mlp.down_proj.weight": [h, i],
                p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]}
    return out


def header_only_checkpoint(directory: Path, cfg: dict) -> dict[str, list[int]]:
    """A config.json and a model.safetensors that is its header alone (offsets as if bf16 data followed)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg))
    shapes, header, offset = llama_shapes(cfg), {}, 0
    for name, shape in shapes.items():
        size = 2 * int(torch.tensor(shape).prod())
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    return shapes


def test_the_preflight_counts_a_1b_checkpoint_from_its_header_alone(tmp_path):
    shapes = header_only_checkpoint(tmp_path / "llama-1b", LLAMA_1B)
    counted = preflight.checkpoint_params(tmp_path / "llama-1b")
    assert counted == sum(int(torch.tensor(s).prod()) for s in shapes.values())
    assert 1.0e9 < counted < 1.3e9  # issue 42's checkpoint is a "1B"
    header, start = header_of(tmp_path / "llama-1b" / "model.safetensors")
    assert set(header) == set(shapes) and start > 8


def test_memory_per_worker_decides_the_workers_and_the_refusal_names_the_ways_out():
    params = 1_100_000_000
    memory = preflight.worker_memory(params, "bf16", shared=2 * params)
    fp32 = preflight.worker_memory(params, "fp32", shared=4 * params)
    assert fp32.private > memory.private  # the dtype's bytes count
    one = memory.total(1)
    assert memory.total(2) == one + memory.private  # the mapped weights are held once
    plenty = int((memory.total(2) + memory.private) / preflight.HEADROOM) + 1
    assert preflight.workers_for(memory, cores=2, available=plenty) == 2
    assert preflight.workers_for(memory, cores=8, available=plenty) == 3
    assert preflight.workers_for(memory, cores=2, available=int(memory.total(1) / preflight.HEADROOM) + 1) == 1
    assert preflight.workers_for(memory, cores=2, available=one // 2) == 0
    assert preflight.workers_for(memory, cores=2, available=0) == 2  # the platform does not say: cores
    line = preflight.refusal("my-1b", fp32, one // 2, "fp32")
    assert "\n" not in line and "--budget" in line and "bf16" in line and "GPU" in line


def test_the_time_estimate_grows_with_the_parameters_and_the_cases():
    work = {"outputs": 3 * 90, "sampling": 2 * 25, "latency": 160}  # single-token forwards per suite
    small, big = preflight.estimate(100_000_000, work), preflight.estimate(1_000_000_000, work)
    assert set(small) == {*work, "total"}
    assert big["total"] > small["total"] and big["outputs"] == pytest.approx(10 * small["outputs"], rel=0.02)
    more = preflight.estimate(1_000_000_000, {**work, "outputs": 6 * 90})
    assert more["outputs"] == pytest.approx(2 * big["outputs"], rel=0.02)
    slower = preflight.estimate(1_000_000_000, work, calibration=2 * preflight.CALIBRATION)
    assert slower["total"] == pytest.approx(2 * big["total"], rel=0.02)  # a slower machine, in proportion


def test_a_budget_parses_and_the_size_threshold_picks_the_plan():
    assert budget.parse("5m") == 300 and budget.parse("90s") == 90 and budget.parse("1.5h") == 5400
    assert budget.parse("full") == 0.0 and budget.parse(None) is None
    with pytest.raises(budget.BudgetError, match="--budget"):
        budget.parse("soon")
    assert not budget.plan_for(int(budget.THRESHOLD) // 2, None).budgeted  # the zoo's and small models: full grid
    assert budget.plan_for(int(budget.THRESHOLD) * 2, None).budgeted
    assert not budget.plan_for(int(budget.THRESHOLD) * 10, 0.0).budgeted  # --budget full
    assert budget.plan_for(1000, 120.0).seconds == 120.0  # an explicit budget, whatever the size


class _Run:
    deep = False

    def __init__(self, *models: UserModel):
        self.user_models = models


def _model(plan: budget.Plan) -> UserModel:
    prompts = tuple(p for p in PROMPTS if p.id in ("short-0", "long-0"))
    return UserModel("mine", Path("/nowhere"), "--model", paths=("plain", "prompt_lookup"), prompts=prompts, plan=plan)


def test_the_budget_plan_covers_every_suite_and_lists_what_it_left_out():
    full, planned = _Run(_model(budget.Plan("full"))), _Run(_model(budget.Plan("budget", 300.0, "test")))
    planned_tables = [t for s in cases.SUITES for t in s.tables if t.plan is not None]
    tables = {**{t.name: t for t in planned_tables}, "latency": cases.latency, "loading": cases.loading,
              "beam_modes": cases.beam_modes, "models": cases.models}
    lines = cases.left_out(planned)
    for name, table in tables.items():
        every = [c.id for c in table(full) if c.model == "mine"]
        kept = [c.id for c in table(planned) if c.model == "mine"]
        assert kept and set(kept) <= set(every), name  # every suite keeps a case, and only its own
        dropped = [i for i in every if i not in kept]
        listed = [ln for ln in lines if ln.startswith(f"mine: {name}:")]
        assert bool(dropped) == bool(listed), name
        if dropped:
            assert all(i in listed[0] for i in dropped) and tables[name].plan.why in listed[0]
        assert {c.path for c in table(planned) if c.model == "mine"} == {c.path for c in table(full) if c.model == "mine"} \
            or name in ("batching",), name  # every path the model runs is still run (batching: the plain batch)
    assert cases.left_out(full) == []
    # the zoo's own cases do not move: a run without models of yours is the same run
    for table in tables.values():
        assert [c.id for c in table(full) if c.model != "mine"] == [c.id for c in table(planned) if c.model != "mine"]


def test_the_progress_line_says_done_total_elapsed_and_what_is_left():
    assert progress.suite_of("suites/test_outputs.py::test_generate[mine.plain]") == "outputs"
    assert progress.duration(41) == "41 s" and progress.duration(185) == "3m05s" and progress.duration(3725) == "1h02m"
    text = progress.line("outputs", 2, 4, 40.0, 10, 30, 100.0)
    assert text.startswith("harness: progress: outputs 2/4 tests, 40 s, ~40 s left;")
    assert "run 10/30 tests, 1m40s, ~3m20s left" in text
    assert "left" not in progress.line("outputs", 4, 4, 40.0, 30, 30, 100.0)  # done: no estimate


def test_the_engine_on_a_mapped_bf16_checkpoint_computes_what_its_fp32_copy_did(tmp_path):
    source = MODELS_DIR / "llama-target"
    target = tmp_path / "bf16"
    target.mkdir()
    shutil.copy(source / "config.json", target / "config.json")
    from safetensors.torch import load_file, save_file

    save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v
               for k, v in load_file(source / "model.safetensors").items()}, target / "model.safetensors")
    copy, mapped = Model.load(target), Model.load(target, mapped=True)
    tokens = torch.arange(3, 40)
    a = copy.forward(tokens, torch.arange(len(tokens)), None).logits
    b = mapped.forward(tokens, torch.arange(len(tokens)), None).logits
    assert torch.equal(a, b)  # bf16 -> fp32 is exact: the same oracle, one resident copy
    stored = {t.dtype for t in mapped_checkpoint(target).values()}
    assert stored == {torch.bfloat16} and not mapped.w._fused  # nothing kept beside the file's pages
    assert copy.w._fused  # the zoo's fp32 copy keeps its fused projections (fast path unchanged)


def test_a_user_model_is_resident_once_per_process():
    from harness.subjects.hf import Zoo

    zoo = Zoo(user=[replace(_model(budget.Plan("budget", 300.0, "test")), name="llama-target")])
    zoo.checkpoints.user["llama-target"] = replace(zoo.checkpoints.user["llama-target"], path=MODELS_DIR / "llama-target")
    first = zoo.load("llama-target")
    eager = zoo.load("llama-target", "eager")
    assert list(zoo._loaded) == [("llama-target", "eager")] and len(zoo._states) == 1
    assert zoo.load("llama-target") is not first and eager is not first  # reloaded, not kept beside
    small = Zoo(user=[replace(zoo.checkpoints.user["llama-target"], plan=budget.Plan("full"))])
    small.load("llama-target"), small.load("llama-target", "eager")
    assert len(small._loaded) == 2  # a small model keeps each backend's load (as before)
