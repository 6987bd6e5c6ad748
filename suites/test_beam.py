"""Beam search per version - tokens, sequences_scores and beam_indices under num_beams,
length_penalty, early_stopping and num_return_sequences, against a reference beam search written in
the harness and against the library's own transition scores - and what generate() does with the
decoding modes v5 moved to the hub (group beam, contrastive, constrained beam, DoLa): runs them,
refuses them, or asks for a `custom_generate` repo (never fetched) (tables: harness/cases/ `beam`,
`beam_modes`; fields: harness/designs/beam.py).
"""

import pytest

from harness import cases
from harness.designs import beam


@pytest.mark.cases(table=cases.beam)
def test_beam(case, golden, zoo):
    golden.check_all(beam.beam(zoo, case))


@pytest.mark.cases(table=cases.beam_modes)
def test_beam_modes(case, golden, zoo):
    golden.check_all(beam.mode(zoo, case))
