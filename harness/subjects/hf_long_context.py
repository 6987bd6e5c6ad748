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

from harness.subjects import error_of, is_subject_error
from harness.subjects.hf import top2_margin


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
    error: dict[str, str] | None = None


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids [B, T], attention_mask [B, T]): each row right-aligned, pads (mask 0) on its left."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def greedy(model: Any, rows: list[list[int]], n: int, pad: int) -> Greedy:
    """Greedy generate() of n new tokens for the rows as one left-padded batch (one row: no padding)."""
    ids, mask = left_padded(rows, pad)
    ids, mask = ids.to(model.device), mask.to(model.device)
    try:
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad,
                                 return_dict_in_generate=True, output_logits=True)
    except Exception as exc:
        if not is_subject_error(exc):
            raise
        return Greedy(error=error_of(exc))
    steps = torch.stack([s.float().cpu() for s in out.logits], dim=1)  # [B, n, V]
    return Greedy(tokens=out.sequences[:, ids.shape[1]:].tolist(), scores=steps.tolist(),
                  margins=[[top2_margin(s) for s in row] for row in steps])


def forward_logits(model: Any, ids: list[int]) -> torch.Tensor:
    """One forward over the ids from position 0 (no cache): the logits [T, V] in fp32."""
    with torch.no_grad():
        x = torch.tensor([ids], device=model.device)
        return model(x, attention_mask=torch.ones_like(x)).logits[0].float().cpu()
