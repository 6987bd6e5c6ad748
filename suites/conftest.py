"""What every suite shares: the run's subjects, the thread count, the model selection.

- `zoo` (session): the installed transformers' view of the checkpoints - the fixture zoo under
  `[tool.harness] models_dir` and your own (`[tool.harness.models.NAME]`, or `--harness-model
  PATH [--harness-assistant PATH]`; harness/settings/models.py) - loaded once per worker;
- `@pytest.mark.cases(table=fn)`: parametrizes a test's `case` over ``table(user_models)`` (a
  function of harness/fixtures/cases.py), so the zoo's cases and each user model's come from one
  table; the user models are resolved (files checked, paths and prompts filled in) once per run,
  and a problem is a usage error naming the key and the fix;
- one intra-op thread for the tiny forwards unless the run chose a count;
- before any case runs, every zoo checkpoint the run loads is checked against its manifest sha256:
  a missing or corrupt one is a usage error naming the file and the fix, never a skip;
- `[tool.harness] models` (a list) keeps only those zoo models' cases, and `--harness-model`
  only that model's: other cases are deselected (so their records are not reported missing);
- a user model with its own dtype records its cases with that dtype (`golden.numerics`);
- `require_feature(name)`: a path's generate() feature, recorded as a capability, its absence a skip.
"""

from __future__ import annotations

import pytest
import torch

from harness.fixtures.load import FixtureError, check_models
from harness.plugin import settings_of
from harness.settings.models import ModelError, UserModel, from_flags, resolve
from harness.subjects import hf
from harness.subjects.hf import Zoo

USER_MODELS = pytest.StashKey[tuple[UserModel, ...]]()


def pytest_configure(config):
    config.addinivalue_line("markers", "cases(table): parametrize `case` over table(user_models) "
                                       "(harness/fixtures/cases.py; suites/conftest.py)")


def one_off(config) -> bool:
    """`--harness-model PATH`: only that model's cases run."""
    return bool(config.getoption("harness_model", None))


def user_models(config) -> tuple[UserModel, ...]:
    """The run's own checkpoints, resolved once (harness/settings/models.py `resolve`)."""
    if USER_MODELS not in config.stash:
        flag = config.getoption("harness_model", None)
        try:
            models = ((from_flags(flag, config.getoption("harness_assistant", None)),) if flag
                      else settings_of(config).user_models)
            config.stash[USER_MODELS] = tuple(resolve(m) for m in models)
        except ModelError as exc:
            raise pytest.UsageError(f"bad model: {exc}") from exc
    return config.stash[USER_MODELS]


def pytest_sessionstart(session):
    user_models(session.config)  # a bad model stops the run before collection


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("cases")
    if marker is not None:
        cases = marker.kwargs["table"](user_models(metafunc.config))
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def zoo(harness_config, harness_env, pytestconfig) -> Zoo:
    """Checkpoints from [tool.harness] models_dir and the user's, loaded in their dtype on the run's device."""
    return Zoo(harness_config.models_dir, harness_env.dtype, harness_env.device, user_models(pytestconfig))


@pytest.fixture
def require_feature(golden):
    """`require_feature(name)`: record whether the installed transformers has the generate()
    feature (`supports_<name>`, a capability) and skip the case with the reason when it does not."""
    def require(feature: str) -> None:
        supported = hf.capabilities()[feature]
        golden.check(f"supports_{feature}", supported, kind="capability")
        if not supported:
            pytest.skip(f"transformers {hf.version()} does not support {feature}")
    return require


@pytest.fixture(autouse=True)
def model_numerics(request):
    """A user model loaded in its own dtype records (and is compared) in that dtype."""
    case = getattr(getattr(request.node, "callspec", None), "params", {}).get("case")
    model = {m.name: m for m in user_models(request.config)}.get(getattr(case, "model", None))
    if model is not None and model.dtype and "golden" in request.fixturenames:
        request.getfixturevalue("golden").numerics(model.dtype)


@pytest.fixture(autouse=True, scope="session")
def one_intra_op_thread(harness_env, pytestconfig):
    """Run the suites' tiny forwards on one intra-op thread unless the run chose a thread count
    (``--harness-threads N``). With 2 threads per process on 2 shared cores (or two xdist
    workers) OpenMP's spin-waiting makes a 4-layer forward ~60x slower; on the zoo the logits are
    bit-identical at 1 and 2 threads. `harness_env` is requested first, so the run's fingerprint
    (threads included) is taken before this and does not depend on which test runs first."""
    if pytestconfig.getoption("harness_threads", 0):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _model_of(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return getattr(callspec.params.get("case"), "model", None) if callspec else None


def pytest_collection_modifyitems(config, items):
    settings = settings_of(config)
    if any("zoo" in getattr(item, "fixturenames", ()) for item in items):
        try:  # fail closed: a missing or corrupt checkpoint stops the run, it never skips a case
            check_models(settings.models_dir, settings.models)
        except FixtureError as exc:
            raise pytest.UsageError(f"missing or corrupt fixture: {exc}") from exc
    users = {m.name for m in user_models(config)}
    if one_off(config):  # only the given checkpoint's cases
        keep_model = users.__contains__
        keep_other = False
    elif settings.models:
        keep_model = lambda model: model in settings.models or model in users  # noqa: E731
        keep_other = True
    else:
        return
    keep, drop = [], []
    for item in items:
        model = _model_of(item)
        (keep if (keep_model(model) if model is not None else keep_other) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
