"""The harness's own tests run the plugin and the CLI inside pytester / subprocesses: they decide
for themselves whether a run is strict, so the CI variable of the machine running them must not
leak into those inner runs (a test that wants CI semantics sets it). The inner `harness check` /
`regen` runs are serial unless a test asks for workers (`-n 2`): the outer `pytest -n 2` already
uses every core, and nested xdist workers would only oversubscribe them. The inner runs also leave out hypothesis's
pytest plugin (a dev dependency of this repository, not of the harness: ~1 s of every inner pytest
start, and a user's project does not have it)."""

from __future__ import annotations

import os

import _pytest.pytester
import pytest

# pytester's in-process runs drop from sys.modules whatever the inner run imported, when the run ends
# (and pytester's own snapshot at the end of the test); modules that keep process-wide state cannot be
# imported twice in one process - torch's operator libraries ("Only a single TORCH_LIBRARY can be used
# to register the namespace c10d_functional"), its compile caches ("Artifact of type=autotune already
# registered in mega-cache artifact factory": every later torch.compile in that worker fails) - and a
# second copy of a transformers module is not the one a fault patches (harness/faults/patches.py finds
# its holders in sys.modules). pytester keeps zope's modules for the same reason; torch's and
# transformers' are kept with them, and numpy's / scipy's (numpy.fft's extension "cannot load module more
# than once per process": tests/test_plugin_workflow.py failed alone, passing only where an earlier test
# had imported it outside a snapshot).
KEPT = ("torch", "functorch", "torchao", "transformers", "numpy", "scipy")


class _KeepStatefulModules(_pytest.pytester.SysModulesSnapshot):
    def __init__(self, preserve=None) -> None:
        super().__init__(lambda name: name.partition(".")[0] in KEPT or bool(preserve and preserve(name)))


_pytest.pytester.SysModulesSnapshot = _KeepStatefulModules  # Pytester builds its snapshots from this name

# The harness's real model (harness/settings/real.py) takes part wherever its conversion is cached or its
# extra installed - a developer's machine, not CI's: this run and its inner runs leave it out, so that they
# see the same cases everywhere (set before the plugin's configure reads it; tests/test_real_subject.py
# unsets it where it asks for the model).
os.environ.setdefault("HARNESS_REAL", "0")


@pytest.fixture(autouse=True)
def no_ci_in_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(autouse=True)
def serial_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "1")  # harness/cli/project.py default_workers


@pytest.fixture(autouse=True)
def no_hypothesis_plugin_in_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"),
                                                               "-p no:hypothesispytest"])))


# The deep tier (`pytest -n 2 -m deep`; .ci/run runs it after the README's `pytest -n 2`): every test
# that took over ~2 s of a worker on 2 cores (`--durations=0`, 2026-12-02) - end-to-end harness runs
# in subprocesses, the fault-per-first-run checks, the statistical calibrations, the MTP and hybrid
# models' parity - except one representative of each kind, which stays in the default run:
# test_faults' fast pair, one stopping fault on a first run, the cheap fail-closed probes.
# An entry is a test function (`file::name`, every parameter) or a parameter id's prefix (`file::name[id`).
DEEP = (
    "test_time_to_verdict.py::test_parallel_and_cached_runs_decide_as_a_serial_uncached_one",
    "test_real_size.py::test_a_user_model_is_resident_once_per_process",
    "test_user_models.py::test_a_tiny_qwen3_runs_through_harness_check_then_passes_then_catches_a_perturbed_weight",
    "test_user_models.py::test_a_one_off_model_run_works_where_there_is_no_project",
    "test_user_models.py::test_regen_with_model_is_partial_and_keeps_other_records",
    "test_stop_rule.py::test_a_first_run_without_a_fault_is_clean",
    *(f"test_stop_rule.py::test_a_stopping_or_streaming_fault_fails_a_first_run[{fault}]" for fault in (
        "streamer-skip-prompt-streams-prompt", "assisted-stream-drops-bonus-token", "eos-list-first-id-only",
        "min-new-tokens-released-late", "streamer-holds-text-until-end", "stopping-criteria-one-step-late")),
    "test_latency_method.py::test_a_slower_forward_is_a_regression_and_a_rerun_is_not",
    "test_latency_method.py::test_the_serving_faults_keep_the_tokens_and_cost_what_they_say",
    *(f"test_cli.py::{name}" for name in (
        "test_check_baseline_and_strict_reach_the_run", "test_regen_asks_on_a_terminal_and_writes_only_on_yes",
        "test_regen_of_a_partial_run_keeps_what_it_did_not_see", "test_regen_dry_run_of_float_noise_reports_nothing_changed",
        "test_workers_and_threads_are_forwarded_to_pytest", "test_check_without_golden_observations",
        "test_reports_carry_no_local_paths", "test_no_tests_collected_is_a_usage_error",
        "test_a_collection_error_renders_an_error_report_never_a_pass",
        "test_regen_of_a_run_whose_failures_are_findings_is_complete", "test_regen_yes_prints_and_writes_only_the_current_env",
        "test_regen_rewrites_an_unreadable_record")),
    "test_bias_controls.py::test_bug_detected_fast",
    "test_repro.py::test_a_perturbed_baseline_makes_it_exit_1_naming_where",
    "test_repro.py::test_against_this_envs_own_record_the_script_matches",
    "test_plugin_workflow.py::test_xdist_two_workers_merge_records_and_results",
    "test_stats.py::test_latency_slowdown_test_holds_alpha_and_has_its_stated_power",
    "test_stats.py::test_the_sequential_monte_carlo_p_value_is_valid_and_reaches_below_small_levels",
    "test_whitebox.py::test_a_verifier_the_hooks_cannot_find_is_skipped_with_the_reason_and_the_black_box_still_runs",
    "test_readme.py::test_compare_runs_as_written",
    "test_golden_store.py::test_sigkill_during_regen_leaves_every_record_complete",
    *(f"test_engine_parity.py::test_greedy_equals_generate[{model}" for model in
      ("glm4moe-mtp", "qwen3_5-linear", "llama-rope-llama3")),
    "test_engine_parity.py::test_speculative_greedy_equals_plain_greedy[glm4moe-mtp",
    "test_engine_parity.py::test_mtp_drafts_equal_transformers_drafts[glm4moe-mtp",
    "test_engine_parity.py::test_logits_match_transformers[glm4moe-mtp-dense]",
    "test_zoo.py::test_recorded_acceptance_rates_are_reproduced_by_the_engine[glm4moe-mtp",
    "test_zoo.py::test_loads_through_auto_class_and_generates[glm4moe-mtp]",
    *(f"test_interrupts.py::test_ctrl_c_at_any_moment_of_a_start_is_130_and_leaves_nothing[{s}]" for s in ("1.5", "2.5", "4.0")),
    "test_interrupts.py::test_ctrl_c_under_a_busy_neighbour_at_every_moment_twice",
    *(f"test_fail_closed.py::test_probe[{probe}]" for probe in (
        "verdict/deleted-suite", "fault/first-run-writes-nothing", "boundary/regen", "write/deep-first-run",
        "merge/reindented-16mib", "interrupt/sigint", "surrogate/check", "verdict/failing-plain-test",
        "verdict/collection-error", "strict/no-test-modes-ci", "golden-dir/pytest-typo", "preflight/long-message",
        "interrupt/sigkill", "interrupt/sigint-partial", "verdict/full-reports-dir", "input/hostile-claims", "verdict/untakeable-lock",
        "verdict/unwritable-store", "strict/force-regen-ini-addopts", "store/symlink-out",
        "pytest-paths/plugin", "regen/project-pytest-config")),
    *(f"test_fail_closed_weak.py::test_probe[{probe}]" for probe in ("report/disk-full", "regen/not-run-keeps-records")),
    "test_upgrade_baseline.py::test_pytest_on_the_suites_compares_with_the_older_env_and_writes_nothing",
    "test_upgrade_baseline.py::test_a_regression_after_the_upgrade_fails_names_the_baseline_and_is_never_recorded",
    "test_stop_rule.py::test_a_stopping_or_streaming_fault_fails_a_first_run[stop-string-single-char-raises]",
)


def _deep(item: pytest.Item) -> bool:
    """A whole test function named in DEEP, or a parameter id named or prefixed there."""
    file, _, test = item.nodeid.partition("::")
    nodeid = f"{file.split('/')[-1]}::{test}"  # a parameter id may hold a '/' (the fail-closed probes)
    return any(nodeid.split("[")[0] == entry or ("[" in entry and nodeid.startswith(entry)) for entry in DEEP)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the DEEP tier (before `-m` deselects), then the tests marked `long` first (stable
    otherwise): xdist hands the workers tests in collection order, and a long test collected last
    leaves one worker idle while the other finishes it."""
    for item in items:
        if _deep(item):
            item.add_marker(pytest.mark.deep)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
