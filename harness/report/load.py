"""Read results.json back into `Results`, with errors that name the file and what is wrong.

The file is read through the input layer (harness/store/reading.py: a regular file, at most
`MAX_RESULTS_BYTES`, strict JSON, nesting limited, text cleaned), then its schema is checked here
before anything renders it: the top-level keys, every outcome's keys and types, and the types of
the `meta` entries the report and the command line read (`META`). Every problem is one
`ResultsFileError` naming the file and the key, never a traceback from the renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.schema import RESULTS_VERSION, Outcome, Results, Status
from harness.store.reading import MAX_RESULTS_BYTES, InputError, read_json


class ResultsFileError(ValueError):
    """A results file that is missing, unreadable, not JSON, of another version or malformed."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def _parse(path: Path) -> Any:
    if not path.exists() and not path.is_symlink():
        raise ResultsFileError(path, "no such file (expected the results.json of a harness run)")
    try:
        return read_json(path, max_bytes=MAX_RESULTS_BYTES)
    except InputError as err:
        raise ResultsFileError(path, err.problem) from None


def _describe(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"missing key {err.args[0]!r}"
    return str(err)


# ----------------------------------------------------------------------------------------------
# the schema: what a value must be, as a predicate and the words for it


Check = tuple[Callable[[Any], bool], str]


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _object_of_strings(*keys: str) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, dict) and all(isinstance(value.get(k), str) for k in keys)


STRING: Check = (_is_str, "a string")
NUMBER: Check = (_is_number, "a number")
BOOL: Check = (lambda v: isinstance(v, bool), "true or false")
STRINGS: Check = (_strings, "a list of strings")
OBJECT: Check = (lambda v: isinstance(v, dict), "an object")

# the outcome's keys (schema.Outcome), each with its type
OUTCOME: dict[str, Check] = {
    "suite": STRING, "case": STRING, "field": STRING, "kind": STRING, "status": STRING, "detail": STRING,
    "category": STRING, "diff": OBJECT, "against": STRING,
}
REQUIRED = ("suite", "case", "field", "kind", "status")

# meta entries something reads (report, summary, CLI); others are only listed, whatever their type
META: dict[str, Check] = {
    "error": STRING, "interrupted": STRING, "env_key": STRING, "baseline_key": STRING, "golden_dir": STRING,
    "argv": STRINGS, "broken_tests": STRINGS, "failed_tests": STRINGS, "collection_errors": STRINGS,
    "write_errors": STRINGS, "user_models": STRINGS, "shipped_models": STRINGS, "left_out": STRINGS, "not_observable": STRINGS,
    "injected_fault": (_object_of_strings("name", "breaks"), "an object with string 'name' and 'breaks'"),
    "upgrade_baseline": (_object_of_strings("key", "why"), "an object with string 'key' and 'why'"),
    "writes": (lambda v: isinstance(v, list) and all(isinstance(w, dict) for w in v), "a list of objects"),
    "golden_tests": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "alpha": NUMBER, "alpha_per_test": NUMBER, "duration_s": NUMBER, "force_regen": BOOL, "strict": BOOL,
    "real_model_off": BOOL,
}


def _outcome_problem(item: Any) -> str:
    if not isinstance(item, dict):
        return f"expected an object, got {type(item).__name__}"
    for key in REQUIRED:
        if key not in item:
            return f"missing key {key!r}"
    unknown = sorted(set(item) - set(OUTCOME))
    if unknown:
        return f"unknown key {unknown[0]!r}"
    for key, (ok, words) in OUTCOME.items():
        if key in item and not ok(item[key]):
            return f"{key!r} must be {words}, got {type(item[key]).__name__}"
    if item["status"] not in {s.value for s in Status}:
        return f"unknown status {item['status']!r}"
    return ""


def _meta_problem(meta: Any) -> str:
    if not isinstance(meta, dict):
        return f"'meta' must be an object, got {type(meta).__name__}"
    for key, (ok, words) in META.items():
        if key in meta and not ok(meta[key]):
            return f"meta.{key} must be {words}, got {type(meta[key]).__name__} {str(meta[key])[:60]!r}"
    return ""


def results_from_data(path: Path, data: Any) -> Results:
    """Validate the parsed JSON step by step so the error says where it is wrong."""
    if not isinstance(data, dict):
        raise ResultsFileError(path, f"expected a JSON object with 'results_version', got {type(data).__name__}")
    version = data.get("results_version")
    if version != RESULTS_VERSION:
        raise ResultsFileError(
            path,
            f"results_version {version!r} is not supported (this harness reads version {RESULTS_VERSION}); "
            "re-run the harness that wrote it, or upgrade this one",
        )
    for key in ("env", "outcomes"):
        if key not in data:
            raise ResultsFileError(path, f"malformed results: missing key {key!r}")
    if not isinstance(data["env"], dict):
        raise ResultsFileError(path, f"malformed results: 'env' must be an object, got {type(data['env']).__name__}")
    if data.get("baseline_env") is not None and not isinstance(data["baseline_env"], dict):
        raise ResultsFileError(path, "malformed results: 'baseline_env' must be an object or null")
    problem = _meta_problem(data.get("meta", {}))
    if problem:
        raise ResultsFileError(path, f"malformed results: {problem}")
    if not isinstance(data["outcomes"], list):
        raise ResultsFileError(path, "malformed results: 'outcomes' must be a list")
    for i, item in enumerate(data["outcomes"]):
        problem = _outcome_problem(item)
        if not problem:
            try:
                Outcome.from_json(item)
            except (KeyError, TypeError, ValueError) as err:
                problem = _describe(err)
        if problem:
            raise ResultsFileError(path, f"malformed results: outcomes[{i}]: {problem}")
    try:
        return Results.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ResultsFileError(path, f"malformed results: {_describe(err)}") from err


def load_results(path: str | Path) -> Results:
    """Results from a results.json; `ResultsFileError` (a ValueError) names the file on any problem."""
    path = Path(path)
    return results_from_data(path, _parse(path))

