"""The installed transformers' beam search, and the decoding modes v5 moved out of the library, as a
subject.

- `beam_run(...)` -> `Beamed`: one `generate(num_beams=...)` with return_dict_in_generate and
  output_scores: the returned rows' new tokens (pads included), `sequences_scores`, `beam_indices`,
  and the library's own `compute_transition_scores` of those rows (summed per row: the
  self-consistency reference), or the exception transformers raised, as data; and what the
  library's beam loop scored (`scored`: each running prefix -> the processed log-probabilities the
  loop ranked its candidates by, read by a pass-through processor appended to the processor list,
  `Scored`; `steps`: how many steps it scored) - the numbers the design's replay of the documented
  rule runs on;
- `next_logprobs(model)`: the model's next-token log-probabilities for a batch of prefixes, by a
  plain forward of each whole prefix (no cache, no generate()): what the design's reference beam
  search runs on, independent of the library's beam code;
- `mode_run(...)` -> `ModeRun`: generate() under a decoding mode's settings (group beam search,
  contrastive search, constrained beam search, DoLa), never with trust_remote_code: the mode the
  version's GenerationConfig resolves them to, where the version says the mode lives now (a hub
  `custom_generate` repo), the tokens when it still runs, or its refusal as data. A hub repo is
  never fetched: `GenerationMixin.load_custom_generate` is replaced for the call by a guard that
  records the repo asked for and refuses (there is no network, and no checkpoint code runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.subjects import observe


@dataclass
class Beamed:
    rows: list[list[int]] = field(default_factory=list)  # new tokens per returned row, pads included
    scores: list[float] = field(default_factory=list)  # sequences_scores
    beam_indices: list[list[int]] = field(default_factory=list)  # per returned row, -1 past its end
    transition_sums: list[float] = field(default_factory=list)  # per row: sum of compute_transition_scores
    scored: dict[tuple[int, ...], torch.Tensor] = field(default_factory=dict)  # prefix (prompt included) -> log p
    steps: int = 0  # how many steps the beam loop scored (len(out.scores))
    error: dict[str, str] | None = None


class Scored:
    """A logits processor that changes nothing: appended last to the list generate() builds, it
    sees each step's running sequences and the log-probabilities the beam loop ranks them by (after
    every processor of the version's own), and keeps them by prefix (`table`)."""

    def __init__(self) -> None:
        self.table: dict[tuple[int, ...], torch.Tensor] = {}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for prefix, row in zip(input_ids.tolist(), scores.detach().float().cpu(), strict=True):
            self.table.setdefault(tuple(prefix), row.clone())
        return scores


def beam_run(model, input_ids: torch.Tensor, settings: dict[str, Any]) -> Beamed:
    """One beam-search generate() of `input_ids` ([B, T], no padding) with `settings` (generate()
    keywords: num_beams, length_penalty, early_stopping, num_return_sequences, eos_token_id,
    max_new_tokens, pad_token_id)."""
    from transformers import LogitsProcessorList

    scored = Scored()
    kwargs: dict[str, Any] = dict(do_sample=False, return_dict_in_generate=True, output_scores=True,
                                  logits_processor=LogitsProcessorList([scored]), **settings)

    def run() -> tuple[Any, torch.Tensor]:
        with torch.no_grad():
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
            return out, model.compute_transition_scores(out.sequences, out.scores, out.beam_indices,
                                                        normalize_logits=False)

    ran, error = observe(run)
    if error is not None:
        return Beamed(error=error)
    out, transitions = ran
    prompt = input_ids.shape[1]
    return Beamed(rows=out.sequences[:, prompt:].tolist(), scores=[float(s) for s in out.sequences_scores],
                  beam_indices=out.beam_indices.tolist(),
                  transition_sums=[float(t) for t in transitions.float().sum(dim=-1)],
                  scored=scored.table, steps=len(out.scores))


def next_logprobs(model) -> Callable[[list[list[int]]], torch.Tensor]:
    """prefixes (equal lengths) -> [len(prefixes), V] float32 log-softmax of the last position's
    logits, from one uncached forward of the whole prefixes."""
    def step(prefixes: list[list[int]]) -> torch.Tensor:
        ids = torch.tensor(prefixes, dtype=torch.long, device=model.device)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[:, -1, :]
        return torch.log_softmax(logits.float(), dim=-1).cpu()
    return step


# ----------------------------------------------------------------------------------------------
# decoding modes moved out of the library


class CustomGenerateBlocked(Exception):
    """The library asked for a hub `custom_generate` repo: the guard refused to fetch it."""

    def __init__(self, repo: str):
        super().__init__(f"the harness never fetches custom_generate repo {repo!r}")
        self.repo = repo


@contextlib.contextmanager
def no_custom_generate(sink: list[str]) -> Iterator[None]:
    """`GenerationMixin.load_custom_generate` replaced by a guard that appends the repo asked for to
    `sink` and raises `CustomGenerateBlocked`; restored afterwards."""
    from transformers import GenerationMixin

    original = GenerationMixin.__dict__.get("load_custom_generate")

    def guard(self, pretrained_model_name_or_path=None, *args: Any, **kwargs: Any) -> Any:
        sink.append(str(pretrained_model_name_or_path))
        raise CustomGenerateBlocked(str(pretrained_model_name_or_path))

    GenerationMixin.load_custom_generate = guard
    try:
        yield
    finally:
        if original is None:
            del GenerationMixin.load_custom_generate
        else:
            GenerationMixin.load_custom_generate = original


@dataclass
class ModeRun:
    mode: str | None = None  # the GenerationMode the version's GenerationConfig resolves the settings to
    moved_to: str | None = None  # the hub repo the version names for that mode (None: it runs in the library)
    custom_generate_requested: list[str] = field(default_factory=list)  # repos generate() tried to load (refused)
    tokens: list[int] = field(default_factory=list)
    error: dict[str, str] | None = None


def generation_mode(settings: dict[str, Any]) -> tuple[str | None, str | None, dict[str, str] | None]:
    """(mode name, the repo the version maps it to or None, the error building the config raised)."""
    import transformers
    from transformers.generation import utils as gen_utils

    mode, error = observe(lambda: transformers.GenerationConfig(**settings).get_generation_mode())
    if error is not None:
        return None, None, error
    target = getattr(gen_utils, "GENERATION_MODES_MAPPING", {}).get(mode)
    name = getattr(mode, "name", str(mode))
    return name, (target if isinstance(target, str) and "/" in target else None), None


def mode_run(model, input_ids: torch.Tensor, settings: dict[str, Any]) -> ModeRun:
    """generate() with a decoding mode's `settings` (trust_remote_code left at its default, False)."""
    out = ModeRun()
    out.mode, out.moved_to, config_error = generation_mode(settings)
    if config_error is not None:
        out.error = config_error
        return out

    def run() -> Any:
        with no_custom_generate(out.custom_generate_requested), torch.no_grad():
            return model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                  return_dict_in_generate=True, **settings)

    try:  # the harness's own guard raises CustomGenerateBlocked: observe() lets a harness error through
        result, out.error = observe(run)
    except CustomGenerateBlocked as exc:
        out.error = {"type": "custom_generate refused by the harness", "message": str(exc)}
    if out.error is not None:
        return out
    out.tokens = result.sequences[0, input_ids.shape[1]:].tolist()
    return out
