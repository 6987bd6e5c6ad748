"""Self-speculation by early exit in the reference engine (harness/engine/drafters.py `EarlyExitDrafter`,
harness/engine/model.py `Model.truncated`): the drafter is the target cut after `early_exit_layer`
layers - its drafts are that cut model's argmax - and the decode stays lossless."""

from __future__ import annotations

import pytest
import torch

from harness.engine.decode import decode
from harness.engine.drafters import EarlyExitDrafter, early_exit_layer
from harness.zoo import load, prompts


@pytest.fixture(scope="module")
def target():
    return load.load_reference("llama-target")


def test_the_exit_layer_is_half_the_trunk_and_at_least_one():
    assert [early_exit_layer(n) for n in (1, 2, 4, 30, 31)] == [1, 1, 2, 15, 15]


def test_a_truncated_model_runs_its_first_layers_then_the_norm_and_head(target):
    tokens = torch.tensor([5, 9, 17, 3, 11])
    full = target.forward(tokens, torch.arange(5), None).logits
    assert torch.equal(target.truncated(target.cfg.num_layers).forward(tokens, torch.arange(5), None).logits, full)
    half = target.truncated(2).forward(tokens, torch.arange(5), None).logits
    assert not torch.allclose(half, full)  # another depth, other logits
    with pytest.raises(ValueError, match="early exit after 0 layers"):
        target.truncated(0)


def test_early_exit_decoding_is_lossless_and_drafts_the_cut_models_argmax(target):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(load.check_files("llama-target")))(prompts.BY_ID["short-0"].text).input_ids
    plain = decode(target, ids, 16)
    exited = decode(target, ids, 16, drafter=EarlyExitDrafter(target), k=4)
    assert exited.tokens == plain.tokens and exited.acceptance[1] > 0
    cut = target.truncated(early_exit_layer(target.cfg.num_layers))
    context = list(ids)
    for step in exited.steps:  # each step's drafts: the cut model's greedy continuation of the context
        for j, token in enumerate(step.draft):
            logits = cut.forward(torch.tensor(context + list(step.draft[:j])),
                                 torch.arange(len(context) + j), None).logits[-1]
            assert token == int(logits.argmax())
        context += list(step.tokens)
