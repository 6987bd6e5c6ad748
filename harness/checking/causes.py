"""Causes that span fields: what makes several findings one (harness/checking/findings.py
`by_cause` merges them). Pure functions on outcomes.

The causes recognised, each from what the outcomes themselves say:

- one exception: the calls that raise now the same exception (type and message, numbers masked) - 5.17's
  static cache refused for assisted generation raises it in every assisted / prompt-lookup / MTP static
  case, whether the baseline generated there or failed otherwise (`exception_of`; a failure a step holds
  as words, a request's 'Memory footprint ...': `failure_of`) - with the fields it left unchecked (an
  in-run reference that "cannot run now", a field skipped because the step it needs raised:
  `lost_to`) and, in its own cases, the capabilities, references and warnings that follow from it;
  the other way, the calls that no longer raise one the baseline raised (`exception_gone`: 5.14's
  sliding-window crop error gone from the rollback and from the same rollback called without
  arguments), with what its cases report now;
- a checkpoint's load (`LOAD_FIELDS`) that works or fails now (`step_fixed`, `step_broken`): every case
  of that model (`subject_of`) whose step raised the same exception type, and what its cases report -
  5.17 loads glm4moe-mtp-dense's MTP head (its outputs generate, its contract's `expected` and
  `use_mtp` follow), and does not load mellum-mtp's;
- a removed name: a capability that lost a value or keyword, or ignores it now (`diff["removed"]`,
  `diff["ignored"]`: `dynamic_full` of cache_implementation, the `cache` keyword) is the cause of every
  other difference whose detail names it as a value - quoted (`'cache' -> 'past_key_values'`, ``renamed
  from `cache` ``) or as the head of a changed path (`dynamic_full.stage: ...`) - unless that difference
  lists other changes too (`other_changes`: a signature renaming `cache` and dropping another
  parameter holds two causes and joins neither);
- a model's attention backend: a model whose attention implementation or backend support
  changed (`default_attn_implementation`, `attn_implementation`, `supports`, `attn_load_error`:
  SDPA gained or lost, with it the soft-cap) is the cause of the numeric differences of its own cases (tensor, tokens,
  the SDPA calls it makes, references against its eager logits or the engine, its attention against
  its definition);
- one sampler mechanism: the white-box fields of a verifier naming the same mechanism, there or gone
  (`mechanism_of`: 5.17's MTP drafts drawn from the processed q fix exact_draft, exact_acceptance,
  exact_residual and exact_emitted at once);
- one token stream parting: the in-run references of one case that read its tokens differing from
  the same step (`divergence_of`: equals_plain_greedy, equals_reference_engine and steps_as_engine of
  5.25's prompt lookup on Qwen3.5, all at step 8) judge one observation - the token chosen there.

Anything else stays its own finding: a cause is only claimed where the outcomes name it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from harness.checking.compare import mechanism_key
from harness.checking.oracles import numbers_masked
from harness.schema import Category, Outcome, Status

ATTENTION_FIELDS = ("default_attn_implementation", "attn_implementation", "supports", "attn_load_error")
NUMERIC_KINDS = ("tensor", "tokens")
ATTENTION_FOLLOWERS = ("sdpa_prefill", "text", "eager_vs_sdpa", "attention_as_defined")


def model_of(outcome: Outcome) -> str:
    """A case id starts with its model's name (which has no dots)."""
    return outcome.case.split(".", 1)[0]


def added_names(outcomes: Iterable[Outcome]) -> list[str]:
    """The names a capability holds now and did not (its comparer's `added`): a keyword renamed to one."""
    names = [n for o in outcomes if o.kind == "capability" and isinstance(o.diff, dict) for n in o.diff.get("added") or []]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def removed_names(outcomes: Iterable[Outcome]) -> list[str]:
    """The names a capability no longer holds or now silently ignores (its comparer's `removed`, `ignored`)."""
    names = [n for o in outcomes if o.kind == "capability" and isinstance(o.diff, dict)
             for n in [*(o.diff.get("removed") or []), *(o.diff.get("ignored") or [])]]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def names_value(detail: str, name: str) -> bool:
    """`detail` names `name` as a value: quoted, backticked, or as the head of a changed path."""
    quoted = rf"['\"`]{re.escape(name)}['\"`]"
    head = rf"(?:^|; ){re.escape(name)}[.:\[]"
    return bool(re.search(quoted, detail) or re.search(head, detail))


def other_changes(outcomes: Iterable[Outcome], name: str) -> list[str]:
    """The changes an outcome lists (a signature's `changes`) that do not name `name`: a signature that
    renames `cache` and drops `block_sequence_ids` holds two causes, so it joins neither's group."""
    return [str(c) for o in outcomes if isinstance(o.diff, dict) and isinstance(o.diff.get("changes"), list)
            for c in o.diff["changes"] if not names_value(str(c), name)]


def attention_model(outcome: Outcome) -> str:
    """The model whose attention backend this outcome says changed ("" when it says nothing of it)."""
    return model_of(outcome) if outcome.field in ATTENTION_FIELDS else ""


def follows_attention(outcome: Outcome, model: str) -> bool:
    """A numeric difference of `model`'s own case, which its attention backend explains."""
    if model_of(outcome) != model:
        return False
    return outcome.kind in NUMERIC_KINDS or outcome.field in ATTENTION_FOLLOWERS


CRASHES = (Category.BROKEN, Category.ERROR_CHANGED)


# how compare.py words a step that fails now: `_error_transition` ("raises now: T: m", "raises T: m (was
# ...)") and `_outcome_transition` for an outcome field ("fails now (request_errors.0): ...", "fails
# otherwise (...)"), either after oracles.py `failed_before_too`'s "fails in KEY too, not the upgrade's; now "
STEP_FAILED = re.compile(r"^(?:fails in .*? too, not the upgrade's; now )?(raises|fails now|fails otherwise)\b")


def raised(o: Outcome) -> bool:
    """A field holding an exception (or a failure) as data that raises now where it generated before,
    or raises another exception (checking/compare.py `_error_transition`, `_outcome_transition`): the
    case's `error`, or a step's own (`rollback_error`, `request_errors` - one request's generation loop
    failed - `load_error`, ...). Not a field broken by its oracle."""
    return o.category in CRASHES and bool(STEP_FAILED.match(str(o.detail)))


def exception_of(o: Outcome) -> str:
    """'Type: message' of the exception a call raises now (a `raised` outcome whose diff holds the new
    error as data), "" otherwise."""
    new = o.diff.get("new") if isinstance(o.diff, dict) else None
    if not raised(o) or not isinstance(new, dict) or not new.get("type"):
        return ""
    return f"{new['type']}: {new.get('message', '')}"


_LOST = re.compile(r"cannot run now: (?:.*? raised |a request failed: )(?:(\w+(?:Error|Exception)): )?(.+?)(?: - not the upgrade's|$)")
# a field skipped because the step it needs raised: "crop/rollback ... raised RuntimeError: ...", "generate_batch
# raised MemoryError: ...", "a request failed: ..." (an exception type named, or a request's own failure)
_SKIPPED_BY = re.compile(r"(?:\braised \w+(?:Error|Exception): |\ba request failed: )(.+?)(?: - not the upgrade's|$)")


def lost_to(o: Outcome) -> str:
    """The exception a field lost its run to, its numbers masked - an in-run reference that "cannot run
    now: ... raised X" / "a request failed: ...", or a field skipped because the step it needs raised
    ("... raised RuntimeError: ...") - the consequence of that one exception, never a cause of its own;
    "" otherwise. The words may go on after the message (the layers it ran on): `follows_exception`
    compares the start."""
    if o.category is Category.REFERENCE_LOST:
        found = _LOST.search(str(o.detail))
        return numbers_masked(found.group(2)) if found else ""
    if o.status is Status.SKIPPED:
        found = _SKIPPED_BY.search(str(o.detail))
        return numbers_masked(found.group(1)) if found else ""
    return ""


def follows_exception(o: Outcome, key: str) -> bool:
    """`o` could not be checked because of the exception whose masked message is `key` (`exception_key`)."""
    lost = lost_to(o)
    return bool(key) and bool(lost) and lost.startswith(key)


def failure_of(o: Outcome) -> str:
    """What a step that fails now failed with: 'Type: message' of a raised exception (`exception_of`), or
    the failure a step's own outcome field holds as words (a request's 'Memory footprint ...'); ""
    otherwise."""
    exc = exception_of(o)
    if exc:
        return exc
    new = o.diff.get("new") if isinstance(o.diff, dict) else None
    return new if raised(o) and isinstance(new, str) and new else ""


def failure_key(o: Outcome) -> str:
    """`failure_of`'s message with its numbers masked: one cause whatever sizes its calls quote."""
    return exception_key(exception_of(o)) if exception_of(o) else numbers_masked(failure_of(o)) if failure_of(o) else ""


def exception_key(exc: str) -> str:
    """An exception's message with its numbers masked (`lost_to`'s key): one cause whatever sizes its
    calls quote (1157120 and 1157632 bytes)."""
    return numbers_masked(exc.split(": ", 1)[-1])


def exception_gone(o: Outcome) -> str:
    """'Type: message' of the exception a call raised in the baseline and no longer raises (a `fixed`
    error field: "generates now; raised ...", its diff's `old` error), "" otherwise - one exception
    gone from several calls (a rollback and the same rollback called another way) is one fix."""
    old = o.diff.get("old") if isinstance(o.diff, dict) else None
    if o.category is not Category.FIXED or not str(o.detail).startswith("generates now") or not isinstance(old, dict) \
            or not old.get("type"):
        return ""
    return f"{old['type']}: {old.get('message', '')}"


def gone_key(o: Outcome) -> str:
    """The failure a step had in the baseline and no longer has, its numbers masked: an exception gone
    (`exception_gone`) or a failure a step's own field held as words ("works now (request_errors.0);
    failed before: 'Memory footprint 1157632 ...'") - one key for the exception a call raised and the
    words a request failing on it held; "" otherwise."""
    exc = exception_gone(o)
    if exc:
        return exception_key(exc)
    old = o.diff.get("old") if isinstance(o.diff, dict) else None
    if o.category is Category.FIXED and str(o.detail).startswith("works now") and isinstance(old, str) and old:
        return numbers_masked(old)
    return ""


def crashed_cases(outcomes: Iterable[Outcome]) -> dict[tuple[str, str], str]:
    """(suite, case) -> the exception, for the cases where a call raises now (`raised`): the fields
    that call would have produced are its consequences, never `missing` to accept."""
    out: dict[tuple[str, str], str] = {}
    for o in outcomes:
        if raised(o):
            what = str(o.detail).removeprefix("raises now: ").split("; worked before")[0]
            out.setdefault((o.suite, o.case), what if len(what) <= 200 else what[:197] + "...")
    return out


_PARTS = re.compile(r"tokens differ from step (\d+)")


def divergence_of(o: Outcome) -> str:
    """`suite/case@step` of an in-run reference that reads the case's tokens differing from a step
    ("tokens differ from step 8: ..."); "" otherwise."""
    found = _PARTS.search(o.detail or "") if o.against == "reference" and o.kind == "tokens" else None
    return f"{o.suite}/{o.case}@{found.group(1)}" if found else ""



def mechanism_of(o: Outcome) -> str:
    """The mechanism a white-box deviation field names (harness/designs/whitebox.py `mechanism`, in words
    without its sizes: compare.py `mechanism_key`) - the baseline's for a deviation gone (fixed), this
    run's otherwise; "" where none is isolated. The exact_* fields of one verifier are views of one
    sampling step: the same mechanism appearing or disappearing in several of them is one change."""
    if o.kind != "deviation" or not isinstance(o.diff, dict):
        return ""
    if o.category is Category.COVERAGE_LOST and o.status is Status.CHANGED:
        return "fewer positions reachable, every one observed exact"  # draws the process no longer makes
    named = o.diff.get("mechanism_baseline") if o.category is Category.FIXED else o.diff.get("mechanism")
    return "; ".join(mechanism_key(named if isinstance(named, list) else []))


LOAD_FIELDS = ("load", "load_error", "loading_info")  # a checkpoint's load: every case of its model loads it
WORKS_NOW = re.compile(r"^(?:generates now|works now)\b")


def step_fixed(o: Outcome) -> str | None:
    """The exception type a step raised in the baseline and no longer raises - a fixed `error` ("generates
    now; raised ...") or a fixed outcome field ("works now (load); failed before: ...", its old value
    naming what it `raises`; "" where it names none) - None where no step was fixed."""
    old = o.diff.get("old") if isinstance(o.diff, dict) else None
    if o.category is not Category.FIXED or not WORKS_NOW.match(str(o.detail)):
        return None
    return str(old.get("type") or old.get("raises") or "") if isinstance(old, dict) else ""


FAILS_NOW = re.compile(r"^(?:raises now|fails now)\b")


def step_broken(o: Outcome) -> str | None:
    """The exception type a step raises now where it worked in the baseline - a broken `error` ("raises
    now: ...") or outcome field ("fails now (load): ...", its new value naming what it `raises`; ""
    where it names none: a load report listing unexpected keys) - None where no step broke."""
    new = o.diff.get("new") if isinstance(o.diff, dict) else None
    if o.category is not Category.BROKEN or not FAILS_NOW.match(str(o.detail)):
        return None
    return str(new.get("type") or new.get("raises") or "") if isinstance(new, dict) else ""


def subject_of(case: str, models: Iterable[str]) -> str:
    """The model a case observes: its id's first part, or - a contract about one model's checkpoint
    (`mtp-checkpoint-glm4moe-mtp-dense`) - the longest model name its id ends with."""
    named = [m for m in models if m != case and (case.startswith(m + ".") or case.endswith("-" + m))]
    return max(named, key=len) if named else case.split(".", 1)[0]
