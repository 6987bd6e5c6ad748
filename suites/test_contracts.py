"""API contracts an upgrade can silently break: return types, validation, feature acceptance, the
API surface (signatures and runtime shapes), per-model generation defaults, MTP checkpoint layouts,
the paths a stateful model runs (table: harness/cases/contracts.py `contracts`; probes and their fields:
harness/subjects/hf_contracts.py).
"""

import pytest

from harness import cases
from harness.designs import contracts


@pytest.mark.cases(table=cases.contracts)
def test_contract(case, golden, zoo, tmp_path):
    golden.check_all(contracts.observe(zoo, case, tmp_path))
