"""[tool.harness] -> HarnessConfig (harness/settings/config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.settings.config import ConfigError, HarnessConfig, Thresholds, load_config
from harness.zoo.specs import MODELS_DIR

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(body)
    return tmp_path


def test_repo_pyproject_loads():
    config = load_config(REPO)
    assert config.golden_dir == REPO / "golden" / "records"
    assert config.models_dir == REPO / "golden" / "models"
    assert config.reports_dir == REPO / "reports"
    assert 0 < config.alpha < 1


def test_defaults_without_pyproject(tmp_path):
    """A project of your own needs no models_dir: the zoo is the one that ships with the harness."""
    config = load_config(tmp_path)
    assert config == HarnessConfig(
        rootdir=tmp_path.resolve(),
        golden_dir=tmp_path.resolve() / "golden/records",
        models_dir=MODELS_DIR,
        reports_dir=tmp_path.resolve() / "reports",
    )
    assert config.thresholds == Thresholds() and config.alpha == 0.01 and config.baseline == ""


def test_all_keys(tmp_path):
    write(tmp_path, """
[tool.harness]
golden_dir = "g"
models_dir = "m"
reports_dir = "r"
alpha = 0.05
baseline = "tf5.0.0-torch2.5.0-cpu-x86_64-fp32"
models = ["tiny-llama"]
extra_model_dirs = ["private/models"]
[tool.harness.thresholds]
tie_eps_bf16 = 0.5
latency_tolerance = 1
""")
    config = load_config(tmp_path)
    assert config.golden_dir == tmp_path.resolve() / "g"
    assert config.alpha == 0.05 and config.baseline.startswith("tf5.0.0")
    assert config.models == ("tiny-llama",)
    assert config.extra_model_dirs == (tmp_path.resolve() / "private/models",)
    assert config.thresholds.tie_eps("bf16") == 0.5 and config.thresholds.latency_tolerance == 1.0
    assert config.thresholds.tie_eps("fp32") == Thresholds().tie_eps_fp32
    with pytest.raises(AttributeError):
        config.alpha = 0.1  # frozen


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("colour = 'red'", "colour"),
        ("alpha = 'x'", "alpha"),
        ("alpha = 1.5", "alpha"),
        ("alpha = true", "alpha"),
        ("golden_dir = 3", "golden_dir"),
        ("models = 'tiny'", "models"),
        ("extra_model_dirs = [1]", "extra_model_dirs"),
        ("thresholds = 2", "thresholds"),
        ("[tool.harness.thresholds]\ntie_eps_int8 = 1", "thresholds.tie_eps_int8"),
        ("[tool.harness.thresholds]\ntv_max = -1", "thresholds.tv_max"),
        ("[tool.harness.thresholds]\ntv_max = 'big'", "thresholds.tv_max"),
    ],
)
def test_bad_entries_name_file_and_key(tmp_path, body, key):
    write(tmp_path, "[tool.harness]\n" + body + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    message = str(info.value)
    assert "pyproject.toml" in message and f"[tool.harness] {key}:" in message


def test_invalid_toml_names_the_file(tmp_path):
    write(tmp_path, "[tool.harness\n")
    with pytest.raises(ConfigError, match="pyproject.toml: not valid TOML"):
        load_config(tmp_path)


def test_threads_are_pinned_to_one_wherever_the_run_starts(tmp_path):
    """A project of your own (no addopts) and this checkout make the same env: 1 thread unless
    --threads says otherwise, and `harness check` passes it to pytest explicitly."""
    from harness.settings.run import RunSettings

    own, here = (RunSettings.make(load_config(root), {}, ci=False) for root in (tmp_path, REPO))
    assert own.threads == here.threads == 1
    assert "--harness-threads" in own.to_pytest_args() and "1" in own.to_pytest_args()
    assert "--harness-threads" not in (REPO / "pyproject.toml").read_text()  # not an addopts of this checkout only
