"""Read results.json back into `Results`, with errors that name the file and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.schema import RESULTS_VERSION, Outcome, Results


class ResultsFileError(ValueError):
    """A results file that is missing, unreadable, not JSON, of another version or malformed."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsFileError(path, "no such file (expected the results.json of a harness run)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ResultsFileError(path, f"cannot be read: {err}") from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultsFileError(
            path, f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
        ) from err


def _describe(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"missing key {err.args[0]!r}"
    return str(err)


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
    if not isinstance(data["outcomes"], list):
        raise ResultsFileError(path, "malformed results: 'outcomes' must be a list")
    for i, item in enumerate(data["outcomes"]):
        try:
            if not isinstance(item, dict):
                raise TypeError(f"expected an object, got {type(item).__name__}")
            Outcome.from_json(item)
        except (KeyError, TypeError, ValueError) as err:
            raise ResultsFileError(path, f"malformed results: outcomes[{i}]: {_describe(err)}") from err
    try:
        return Results.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ResultsFileError(path, f"malformed results: {_describe(err)}") from err


def load_results(path: str | Path) -> Results:
    """Results from a results.json; `ResultsFileError` (a ValueError) names the file on any problem."""
    path = Path(path)
    return results_from_data(path, _parse(path))
