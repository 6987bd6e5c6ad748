"""The draws-as-draws oracle (harness/engine/draws.py): the log-likelihood z-test joined with the
mode count. Draws are simulated from known distributions with a fixed seed; alpha 1e-3 (a run's
per-test level is smaller: the tests below hold at 2e-5 too where they claim detection)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.engine.draws import draw_fit, poisson_binomial_upper

ALPHA = 1e-3


def _peaked(n: int, seed: int) -> list[torch.Tensor]:
    """n steps of a top-3 distribution, the mode carrying 0.6-0.9 of the mass (-inf elsewhere)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        logits = torch.full((50,), -math.inf)
        top = torch.rand(3, generator=g) * torch.tensor([0.0, 1.0, 1.0]) + torch.tensor([2.5, 0.0, 0.0])
        logits[torch.randperm(50, generator=g)[:3]] = top
        out.append(torch.log_softmax(logits, -1))
    return out


def _draw(steps: list[torch.Tensor], seed: int, temperature: float = 1.0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [int(torch.multinomial(torch.softmax(lp / temperature, -1), 1, generator=g)) for lp in steps]


def test_draws_from_the_distributions_fit_at_the_stated_rate():
    """A/A: 200 runs of 96 honest draws; false alarms at alpha 0.05 about 5 %, never near all."""
    alarms = sum(not draw_fit(steps := _peaked(96, s), _draw(steps, s + 1), 0.05).fits(0.05) for s in range(200))
    assert alarms <= 25  # binomial(200, 0.05): P(X > 25) < 1e-3


def test_a_sampler_stuck_on_the_mode_fails_even_where_the_model_is_peaked():
    steps = _peaked(96, 7)
    greedy = [int(lp.argmax()) for lp in steps]
    fit = draw_fit(steps, greedy, 2e-5)
    assert fit.modes == 96 and fit.all_modes == pytest.approx(math.prod(float(lp.max().exp()) for lp in steps))
    assert not fit.fits(2e-5) and fit.p_modes == pytest.approx(fit.all_modes)


def test_a_flatter_sampler_fails_on_the_likelihood():
    steps = _peaked(96, 11)
    fit = draw_fit(steps, _draw(steps, 12, temperature=4.0), ALPHA)
    assert fit.z < 0 and not fit.fits(ALPHA)


def test_the_detectable_shift_shrinks_with_the_draws_and_a_draw_off_the_support_is_left_out():
    short, long = (draw_fit(s := _peaked(n, 3), _draw(s, 4), ALPHA) for n in (24, 96))
    assert long.detectable < short.detectable and long.detectable == pytest.approx(short.detectable / 2, rel=0.35)
    steps = _peaked(10, 5)
    off = [int(torch.isinf(steps[0]).nonzero()[0])] + _draw(steps, 6)[1:]
    assert draw_fit(steps, off, ALPHA).excluded == 1 and draw_fit(steps, off, ALPHA).n == 9


def test_the_mode_count_tail_is_the_poisson_binomial():
    assert poisson_binomial_upper([0.5, 0.5], 2) == pytest.approx(0.25)
    assert poisson_binomial_upper([0.5, 0.5], 1) == pytest.approx(0.75)
    assert poisson_binomial_upper([0.9, 0.2, 0.7], 0) == pytest.approx(1.0)
