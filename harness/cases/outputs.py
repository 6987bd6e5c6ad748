"""The outputs suite's table (suites/test_outputs.py): every (model, path, cache, prompt, decoding)
combination that makes sense for the zoo, then each user model's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.cases.common import (
    ASSISTANT,
    DRAFT_TOKENS,
    ENSEMBLE_WEIGHTS,
    TARGET,
    draft_tokens_of,
)
from harness.cases.registry import Recipe, Rule, Suite, Table
from harness.schema import Case
from harness.settings.models import UserModel
from harness.settings.run import RunSettings
from harness.zoo.specs import MTP_TRUNK_LAYERS, SPECS


def user_outputs(model: UserModel) -> list[Case]:
    """A user model's outputs cases, from its resolved paths and prompts: every path greedy on
    every prompt in both caches (ensemble at each weight), and each path sampled (seed 0) once on
    the first prompt in a dynamic cache."""
    cases: list[Case] = []
    first = model.prompts[0].id
    for path in model.paths:
        assistant = model.assistant_name if path in ("assisted", "ensemble") else None
        draft = draft_tokens_of(path)
        weights = ENSEMBLE_WEIGHTS if path == "ensemble" else (None,)
        for w in weights:
            for cache in ("dynamic", "static"):
                for prompt in model.prompts:
                    cases.append(Case(model.name, path, cache, prompt.id, weight=w, draft_tokens=draft,
                                      assistant=assistant))
            if path != "early_exit":  # (its sampled verification is the assistant's: one mechanism)
                cases.append(Case(model.name, path, "dynamic", first, "sample", seed=0, weight=w,
                                  draft_tokens=draft, assistant=assistant))
    return cases


def deep_trunk(spec: Any) -> bool:
    """A GLM-4.5-layout MTP fixture: 46 trunk layers only because its checkpoint layout puts the MTP
    weights at `model.layers.46.*` - the layout is the point, the depth is not."""
    return spec.role == "mtp" and spec.config.get("num_hidden_layers", 0) >= MTP_TRUNK_LAYERS


def zoo_outputs(run: RunSettings | None = None) -> list[Case]:
    """Every (model, path, cache, prompt, decoding) combination that makes sense for the zoo (each
    user model's: `user_outputs`). A deep-trunk MTP fixture (`deep_trunk`) runs where its
    layout is the point: the MTP path in both caches on both prompts (whose lossless check runs
    plain greedy beside it), and one plain greedy case so a version without MTP still generates
    with the family; prompt lookup and sampling are the other models' (the same code, at a 20th
    of the cost)."""
    cases: list[Case] = []
    for spec in (s for s in SPECS if s.role in ("target", "mtp")):
        model, is_mtp = spec.name, spec.role == "mtp"
        if deep_trunk(spec):
            cases.append(Case(model, "plain", "dynamic", "short-0"))
            cases += [Case(model, "mtp", cache, prompt, draft_tokens=1)
                      for cache in ("dynamic", "static") for prompt in ("short-0", "long-0")]
            continue
        for cache in ("dynamic", "static"):
            for prompt in ("short-0", "long-0"):
                cases.append(Case(model, "plain", cache, prompt))
                cases.append(Case(model, "prompt_lookup", cache, prompt, draft_tokens=DRAFT_TOKENS))
                if is_mtp:
                    cases.append(Case(model, "mtp", cache, prompt, draft_tokens=1))
                else:
                    cases.append(Case(model, "assisted", cache, prompt, draft_tokens=DRAFT_TOKENS,
                                      assistant=ASSISTANT))
                if model == TARGET:
                    for w in ENSEMBLE_WEIGHTS:
                        cases.append(Case(model, "ensemble", cache, prompt, weight=w, draft_tokens=DRAFT_TOKENS,
                                          assistant=ASSISTANT))
                    # self-speculation by early exit (LayerSkip): the target's own first half drafts
                    cases.append(Case(model, "early_exit", cache, prompt, draft_tokens=DRAFT_TOKENS))
        cases.append(Case(model, "plain", "dynamic", "short-1", "sample", seed=0))
        if model == TARGET:
            cases.append(Case(model, "assisted", "dynamic", "short-1", "sample", seed=0, draft_tokens=DRAFT_TOKENS,
                              assistant=ASSISTANT))
            for w in ENSEMBLE_WEIGHTS:
                cases.append(Case(model, "ensemble", "dynamic", "short-1", "sample", seed=0, weight=w,
                                  draft_tokens=DRAFT_TOKENS, assistant=ASSISTANT))
    return cases




def _plan(case: Case, cases: Sequence[Case]) -> bool:
    """A budget plan runs each path once, greedy on the first prompt (dynamic cache; plain also static)."""
    greedy = [c for c in cases if c.decoding == "greedy"]
    first = greedy[0].prompt if greedy else None
    return case.decoding == "greedy" and case.prompt == first and (case.cache == "dynamic" or case.path == "plain")


outputs = Table("outputs", zoo_outputs, user=user_outputs, plan=Rule(
    _plan, "each path runs once, greedy on the first prompt (dynamic cache; plain also static): the second prompt "
           "repeats the code path, the sampled cases are the sampling suite's"))

SUITE = Suite(
    "outputs",
    (outputs,), api='generate()', units=(90,),
    # the speculative paths' long prompt repeats their short prompt's code path (plain's long prompt crosses the
    # sliding / chunked windows); a `.sample` case's draws are the sampling suite's `.default` case's
    quick=Rule(lambda c: c.decoding == "greedy" and (c.prompt == "short-0" or c.path == "plain"),
               "the speculative paths' long prompt and the .sample cases (the sampling suite's .default draws)"),
    repro=Recipe(of=lambda c: None if c.name else "generate", scripts=lambda case_id: True))
