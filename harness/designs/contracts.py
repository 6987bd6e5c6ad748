"""API contracts an upgrade can silently break, probed on the installed transformers
(suites/test_contracts.py; the table is harness/cases/contracts.py `contracts`). Each case names a probe
(harness/subjects/hf_contracts.py `PROBES`, whose docstring lists the fields) and, where the probe
needs a generation feature, the feature (`requires`, a key of `harness.subjects.hf.capabilities()`):
a version without it records ``supports_<feature> = False`` (a capability: the comparison says
"feature added / removed", never a crash or a regression) and the case stops with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.schema import Case, Observation
from harness.subjects import hf
from harness.subjects.hf_contracts import PROBES

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

PROBE_KEYS = ("probe", "requires")


def observe(zoo: Zoo, case: Case, tmp: Path) -> Observation:
    obs = Observation()
    if not hf.requires(obs, case.param("requires")):
        return obs
    params = {k: v for k, v in case.params if k not in PROBE_KEYS}
    return obs.merge(PROBES[case.param("probe")](zoo, params, tmp))
