"""The fixtures a suite asks for:

- `golden`: the checks of one test (a `Golden`: its case's `CaseCheck` against the baseline record,
  and the record written when the test ends); a case of a user model records the model's checkpoint
  fingerprint (and its assistant's, when the case uses it) as the field `checkpoint`, and a user model
  with its own dtype records its cases in that dtype; a case in a low-precision dtype is judged with
  allowances scaled by its model's rounding witness (harness/engine/witness.py);
- `zoo`: the installed transformers' view of the run's checkpoints - the fixture zoo and your own
  models - each loaded once per process (harness/subjects/hf.py `Zoo`), with the reference
  engine's answers read from its on-disk cache (harness/store/cache.py; `--harness-no-cache`: afresh);
- `fresh_models` (autouse): a test that uses the zoo starts with every loaded model as loaded
  (`Zoo.fresh`): no generation state of an earlier test in the worker;
- `run_settings`: the run's `RunSettings` (deep mode, seed salt, dtype, ...);
- `harness_env`: the run's fingerprint and env key; `harness_config`: the project's `[tool.harness]`.
"""

from __future__ import annotations

import pytest

from harness.plugin.golden import Golden
from harness.plugin.selection import case_id, case_of, suite_name
from harness.plugin.session import GOLDEN_KEY, RunEnv, run_settings, session_of
from harness.settings.config import HarnessConfig
from harness.settings.models import UserModel
from harness.settings.run import RunSettings
from harness.zoo.checkpoint import fingerprint


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """Golden-record checks for the current test's (suite, case)."""
    item = request.node
    session = session_of(request.config)
    if session.store_problem():  # an xdist worker (the controller collects nothing to refuse)
        pytest.fail(session.store_problem(), pytrace=False)
    checks = Golden(session, suite_name(item), case_id(item), item.nodeid)
    case = case_of(item)
    own = {m.name: m for m in run_settings(request.config).user_models}.get(getattr(case, "model", None))
    if own is not None:
        if own.dtype:
            checks.numerics(own.dtype)  # a user model loaded in its own dtype is recorded in that dtype
        if not own.unavailable:  # (the real model without its extra: the case skips when it reaches the model)
            checks.checkpoint(user_checkpoint(own, getattr(case, "assistant", None) == own.assistant_name))
    if "zoo" in request.fixturenames:
        checks.rounding(case_witness(request.getfixturevalue("zoo"), case))
    item.stash[GOLDEN_KEY] = checks
    return checks


def case_witness(zoo, case) -> float | None:
    """The largest rounding witness of the case's models (its model, its assistant) in the dtype each is
    loaded in (harness/subjects/engine.py `rounding_witness`); None in fp32 or without an engine model."""
    from harness.subjects.engine import rounding_witness
    from harness.subjects.hf import Zoo

    if not isinstance(zoo, Zoo):  # a unit test's stand-in
        return None
    names = [n for n in (getattr(case, "model", None), getattr(case, "assistant", None)) if isinstance(n, str) and n]
    found = [w for w in (zoo.memo(("rounding-witness", n), lambda n=n: rounding_witness(zoo, n)) for n in names)
             if w is not None]
    return max(found, default=None)


def user_checkpoint(model: UserModel, with_assistant: bool) -> dict[str, str]:
    """The fingerprint of a user model's files (its assistant's under "assistant/" when the case
    drafts with it): harness/zoo/checkpoint.py."""
    prints = fingerprint(model.path)
    if with_assistant and model.assistant is not None:
        prints.update(fingerprint(model.assistant, prefix="assistant/"))
    return prints


@pytest.fixture(autouse=True)
def fresh_models(request: pytest.FixtureRequest) -> None:
    """Reset the generation state of the worker's loaded models before a test that uses them."""
    if "zoo" in request.fixturenames:
        fresh = getattr(request.getfixturevalue("zoo"), "fresh", None)  # a unit test's stand-in has none
        if fresh is not None:
            fresh()


@pytest.fixture(name="run_settings", scope="session")
def run_settings_fixture(request: pytest.FixtureRequest) -> RunSettings:
    """The run's settings, as the plugin made them once at configure."""
    return run_settings(request.config)


@pytest.fixture(scope="session")
def harness_env(request: pytest.FixtureRequest) -> RunEnv:
    """The run's environment: fingerprint, env key, dtype / device / attention to run cases in."""
    return session_of(request.config).run_env


@pytest.fixture(scope="session")
def harness_config(request: pytest.FixtureRequest) -> HarnessConfig:
    """The project's `[tool.harness]` settings, as loaded once for this run."""
    return run_settings(request.config).config


@pytest.fixture(scope="session")
def zoo(request: pytest.FixtureRequest, harness_env: RunEnv):
    """Checkpoints from [tool.harness] models_dir and the user's, in their dtype on the run's device."""
    from harness.store.cache import AnswerCache, default_root
    from harness.subjects.hf import Zoo

    settings = run_settings(request.config)
    # a run with a fault injected reads clean answers but never stores its own (issue 41)
    answers = AnswerCache(default_root() / "engine", enabled=not settings.no_cache, writable=not settings.fault)
    return Zoo(settings.config.models_dir, harness_env.dtype, harness_env.device, settings.user_models, answers)
