"""What call or API a case exercises, in a reader's words: the line a finding opens with.

A generation case id is `<model>.<path>.<cache>.<prompt>.<decoding>` (harness/schema.py Case.id):
the path and cache name the `generate()` arguments. A contracts case `api-<Name>` is that name's
signature; other suites exercise one API each (their registry row's `api`, harness/cases/). One finding may span suites: its
cases' calls are listed once each, the most frequent first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

# generate()'s arguments per decoding path (harness/schema.py PATHS)
PATH_ARGS = {
    "plain": "",
    "assisted": "assistant_model=",
    "prompt_lookup": "prompt_lookup_num_tokens=",
    "mtp": "MTP heads (use_mtp)",
    "ensemble": "assistant_model=, assistant_ensemble_weight=",
}


def about_case(suite: str, case: str) -> str:
    """`generate(assistant_model=, cache_implementation="static")` for an outputs case; the API's
    name for a contracts `api-` case; the suite's API otherwise."""
    parts = case.split(".")
    if suite in ("outputs", "sampling") and len(parts) >= 3 and parts[1] in PATH_ARGS:
        args = [PATH_ARGS[parts[1]]] if PATH_ARGS[parts[1]] else []
        if parts[2] == "static":
            args.append('cache_implementation="static"')
        sampled = suite == "sampling" or (len(parts) >= 5 and parts[-1].startswith("sample"))
        if sampled:
            args.append("do_sample=True")
        return f"generate({', '.join(args)})"
    if suite == "contracts":
        return f"`{case[4:]}`" if case.startswith("api-") else f"the `{case}` contract"
    from harness import (
        cases,  # (imported here: the case tables import torch, a report needs it for this line only)
    )

    row = cases.suite(suite)
    return row.api if row is not None and row.api else f"the {suite} suite"


def about(cases: Iterable[tuple[str, str]], limit: int = 3) -> str:
    """The calls a finding's (suite, case) pairs exercise, most frequent first."""
    counted = Counter(about_case(suite, case) for suite, case in cases)
    names = [name for name, _ in counted.most_common()]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
