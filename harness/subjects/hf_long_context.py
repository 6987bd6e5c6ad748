"""The installed transformers at long context, as a subject: what a loaded model's rotary embedding
holds (its RoPE type, inverse frequencies and cos/sin scaling), greedy generate() of a batch of
left-padded rows with every step's scores, and one forward's logits.

- `rotary(model)` -> `Rotary`: the model's rotary embedding module (the first module whose class
  name ends in "RotaryEmbedding" and holds an `inv_freq`), as transformers built it on load;
- `greedy(model, rows, n, pad)` -> `Greedy`: the rows (token lists of any lengths) left-padded into
  one batch with its attention mask, greedy generate() of n new tokens, per row the new tokens, the
  raw logits of every step (`output_logits`: before any processor) and their top-2 margins - or the
  exception transformers raised, as data;
- `forward_logits(model, ids)`: one forward over [1, T] ids, the logits [T, V] in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from harness.subjects import observe
from harness.subjects.hf import top2_margin, top2_scale


@dataclass
class Rotary:
    rope_type: str
    attention_scaling: float
    inv_freq: list[float]


def rotary(model: Any) -> Rotary | None:
    """The model's rotary embedding as loaded (None: it has none)."""
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding") and hasattr(module, "inv_freq"):
            return Rotary(str(getattr(module, "rope_type", "?")), float(getattr(module, "attention_scaling", 1.0)),
                          module.inv_freq.detach().float().cpu().tolist())
    return None


@dataclass
class Greedy:
    tokens: list[list[int]] = field(default_factory=list)  # new tokens per row
    scores: list[list[list[float]]] = field(default_factory=list)  # per row, per step: the raw logits [V]
    margins: list[list[float]] = field(default_factory=list)
    scales: list[list[float]] = field(default_factory=list)  # the same logits' `top2_scale`
    error: dict[str, str] | None = None


def greedy(model: Any, ids: list[list[int]], mask: list[list[int]], n: int, pad: int) -> Greedy:
    """Greedy generate() of n new tokens for one batch, `ids` [B][T] with its `attention_mask`, padded
    by the design (harness/designs/batching.py `pad_rows`; one row: no padding)."""
    ids, mask = torch.tensor(ids, device=model.device), torch.tensor(mask, device=model.device)

    def run() -> Any:
        with torch.no_grad():
            return model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad,
                                  return_dict_in_generate=True, output_logits=True)

    out, error = observe(run)
    if error is not None:
        return Greedy(error=error)
    steps = torch.stack([s.float().cpu() for s in out.logits], dim=1)  # [B, n, V]
    return Greedy(tokens=out.sequences[:, ids.shape[1]:].tolist(), scores=steps.tolist(),
                  margins=[[top2_margin(s) for s in row] for row in steps],
                  scales=[[top2_scale(s) for s in row] for row in steps])


def forward_logits(model: Any, ids: list[int]) -> torch.Tensor:
    """One forward over the ids from position 0 (no cache): the logits [T, V] in fp32."""
    with torch.no_grad():
        x = torch.tensor([ids], device=model.device)
        return model(x, attention_mask=torch.ones_like(x)).logits[0].float().cpu()
