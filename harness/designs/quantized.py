"""Quantized weights on the CPU, per version (suites/test_quantized.py; table: harness/cases/ `quantized`;
the load: harness/subjects/hf_quantized.py): the checkpoint loaded with torchao's int8 weight-only
quantization (one scale per output row), the load contract, what it generates and how much it holds.

The oracle never runs the quantization library: harness/engine/quantize.py states the scheme (the
scale of a row is its absmax over 127.5, each int8 value the weight over the scale rounded to the
nearest, half a step from it at most) and the weights the int8 data and scales stand for; the
reference engine then runs the model with those dequantized weights in place of the quantized ones.

  setup          exact   the scheme and torchao's version (an optional extra: a version moved is a
                         changed setup beside what it moved); the load dtype is the env key's
  load_error     exact   the quantized load's exception, or None
  quantized      exact   which modules hold a quantized weight (folded names) and its class; which
                         linear layers stayed in full precision
  weight_bytes   exact   the bytes the quantized model's parameters and buffers hold, and the same model's
                         in full precision (the quantized / full ratio beside them) - presentation: a
                         difference is `changed` (across dtypes they halve by design); what the scheme
                         must save is judged in-run by quantized_as_promised
  tokens         tokens  greedy new tokens on the first prompt, with the dequantized engine's margins
                         after the row's own prefix (teacher-forced)
 references, computed in the run:
  loaded_as_promised    exact  the load done ("loaded"), or its raise: the scheme promises to quantize this
                               checkpoint's linear weights (harness/engine/quantize.py `promised`, read from
                               the file), so a load that raises fails a first run too - unless a declared
                               known upstream failure (harness/designs/served.py: its releases, its
                               precondition here, its message), then listed as `known_upstream_failure`;
                               the references below are not observed after a raise (the case is skipped
                               with it unless this one failed)
  quantized_as_promised exact  what the scheme promises, from the checkpoint (harness/engine/quantize.py
                               `promised`): every linear projection's weight quantized - the modules the
                               load quantized against each 2-D weight of the file that is neither an
                               embedding nor the output head -, each as int8 data of the weight's shape,
                               and the model's bytes at most the full-precision model's less
                               (element size - 1) per promised element plus 8 per row (its scale and a
                               zero point): a load that quantizes nothing, or leaves the MLP in full
                               precision, fails here while every reference below holds
  quantized_as_scheme   exact  per quantized weight, against the checkpoint's own weight read from its
                               safetensors and rounded to the load dtype (what the library quantized):
                               rows whose scale is not absmax / 127.5 (in that dtype's rounding),
                               elements further than half a step from their weight, int8 values out of
                               range - all 0
  logits_as_dequantized tensor the quantized model's logits over the long prompt against the engine's
                               with the dequantized weights (float32: the kernel scales after its
                               matmul, the engine before - a scale off, taken from another row or
                               rounded to a coarser dtype, is far beyond that; pytorch/ao #1662's class)
  tokens_as_dequantized tokens greedy tokens against the engine's greedy decode with the dequantized
                               weights (tie-aware)
  steps_as_dequantized  tokens each token against the dequantized engine's choice after its own prefix
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file

from harness.designs.served import LOADED, as_text, served_as_asked
from harness.engine.decode import decode
from harness.engine.model import Config, Model
from harness.engine.quantize import dequantized, promised, promised_bytes, violations
from harness.engine.teacher_forced import teacher_forced
from harness.schema import Case, Observation
from harness.subjects import engine, fold_keys, hf
from harness.subjects.hf import TORCH_DTYPES
from harness.subjects.hf_cache import logits, narrowed
from harness.subjects.hf_quantized import SCHEME, load, quantized_weights, require, weight_bytes

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

PROMPT, LOGITS_PROMPT = "short-0", "long-0"


def dequantized_engine(directory: Any, found: dict[str, tuple[torch.Tensor, torch.Tensor, str]]) -> Model:
    """The engine's model of the checkpoint with each quantized weight replaced by the weight its int8
    data and scales stand for (harness/engine/quantize.py), every other weight as the file holds it."""
    import json
    from pathlib import Path

    directory = Path(directory)
    weights = {k: v.to(torch.float32) if v.is_floating_point() else v for k, v in load_file(directory / "model.safetensors").items()}
    for name, (q, scale, _) in found.items():
        weights[f"{name}.weight"] = dequantized(q, scale)
    return Model(Config.from_dict(json.loads((directory / "config.json").read_text())), weights, directory)


def observe(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    version = require()
    directory = zoo.checkpoints.directory(case.model)
    dtype = zoo.checkpoints.dtype_of(case.model)
    obs.add("setup", {"scheme": SCHEME, "torchao": version})  # the dtype is the env key's
    model, error = load(directory, TORCH_DTYPES[dtype])
    obs.add("load_error", error)
    checkpoint = load_file(str(directory / "model.safetensors"))
    shapes = promised(checkpoint)
    outcome = [LOADED if error is None else f"failed: {as_text(error)}"]
    served_as_asked(obs, "loaded_as_promised", "quantized", outcome, [as_text(error)], hf.version(),
                    applies=bool(shapes), ok=LOADED)
    if error is not None:
        return obs.stop(f"the quantized load raised {error['type']}: {error['message']}")
    found = quantized_weights(model)
    linear = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in found]
    obs.add("quantized", {"modules": fold_keys(found), "classes": sorted({c for _, _, c in found.values()}),
                          "full_precision": fold_keys(linear)})
    full = zoo.load(case.model).model
    sizes = {"quantized": weight_bytes(model), "full": weight_bytes(full)}
    obs.add("weight_bytes", sizes, ratio=round(sizes["quantized"] / max(sizes["full"], 1), 4), presentation=True)
    loaded = TORCH_DTYPES[dtype]  # the library quantizes the weights as loaded: the checkpoint's, in the load dtype
    bound = promised_bytes(sizes["full"], shapes, torch.empty((), dtype=loaded).element_size())
    obs.reference("quantized_as_promised",
                  {"quantized": fold_keys(found),
                   "int8 data of the weight's shape": all(q.dtype == torch.int8 and tuple(q.shape) == shapes.get(n)
                                                           for n, (q, _, _) in found.items()),
                   "bytes within the scheme's": sizes["quantized"] <= bound},
                  {"quantized": fold_keys(shapes), "int8 data of the weight's shape": True,
                   "bytes within the scheme's": True},
                  implementations_differ=False, observed_extras={"bytes": sizes["quantized"], "bound": bound})
    u = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}.get(loaded, 0.0)
    obs.reference("quantized_as_scheme",
                  {n: violations(checkpoint[f"{n}.weight"].to(loaded), q, s, u) for n, (q, s, _) in found.items()},
                  {n: {"scale_not_absmax": 0, "beyond_half_step": 0, "out_of_range": 0} for n in found},
                  implementations_differ=False)
    gap = zoo.oracle.gap(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=case.new_tokens,
                             do_sample=False, pad_token_id=model.config.pad_token_id)
    tokens = out[0, ids.shape[1]:].tolist()
    if gap:
        obs.add("tokens", [tokens], kind="tokens")
        for name, kind in (("logits_as_dequantized", "tensor"), ("tokens_as_dequantized", "tokens"),
                           ("steps_as_dequantized", "tokens")):
            obs.skipped(name, kind, gap)
        return obs
    ours = dequantized_engine(directory, found)
    prompt = ids[0].tolist()
    forced = teacher_forced(ours.forward(torch.tensor([*prompt, *tokens]), torch.arange(len(prompt) + len(tokens)),
                                         None).logits.float(), len(prompt), tokens)
    obs.add("tokens", [tokens], kind="tokens", margins=[forced.gaps], scales=[forced.scales])
    long_ids = zoo.prompt_ids(case.model, LOGITS_PROMPT)
    expected = ours.forward(long_ids[0], torch.arange(long_ids.shape[1]), None).logits.float()
    obs.reference("logits_as_dequantized", *narrowed(logits(model, long_ids), expected), kind="tensor")
    greedy = decode(ours, prompt, case.new_tokens, eos_token_id=engine.EOS)
    obs.reference("tokens_as_dequantized", [tokens], [greedy.tokens], kind="tokens",
                  expected_extras={"margins": [greedy.margins], "scales": [greedy.scales]})
    engine.forced_reference(obs, "steps_as_dequantized", tokens, forced, [f"step {i}" for i in range(len(tokens))])
    return obs
