"""The sampling suite's white-box fields: every sampled decision of a few generate() calls, observed
inside them (harness/subjects/hf_whitebox.py), against its exact value - deterministic, no sample size.

Fields (kind "deviation", value {"tv": the worst TV over the compared positions, "positions": how many};
decided by harness/checking/compare.py `compare_deviation` against `detectable_tv`, a float tolerance):

  exact_target      speculative paths: the processed target p the verifier used, rows i = 0..k
  exact_draft       the q each draft was drawn from vs the drafter's processors applied to its own logits
                    as the version applied them; and the q the acceptance test used vs that q
  exact_acceptance  each draft's acceptance probability min(1, ratio) vs min(1, p(x)/q(x)) from the exact
                    p and q (ensemble: 1 - w + w p(x)/q(x)); a TV between two Bernoullis
  exact_residual    what the correction / bonus token was drawn from vs norm([p - q]+) at the first
                    rejection (the ensemble's fallback p when that is 0), p_k when every draft was accepted
  exact_emitted     the emitted token's distribution at every position - implied by probing the verifier
                    (`implied_emission`: P(z) = sum_y q(y)[A(y) 1{z=y} + (1 - A(y)) R(z|y)]), or the
                    sampler's input where there is no verifier (plain, prompt lookup, MTP warm-up) - vs
                    the intended one: p (lossless), v = w p + (1 - w) q with q the drafter under the
                    *target's* settings at drafted positions (ensemble), p at the bonus

  processors_built  (a reference, exact) the target's processor list as the version built it - each
                    processor read as the engine's entry (class -> name, its parameters; harness/subjects/
                    hf_processors.py) - against the list the harness builds itself from the generation
                    config (harness/engine/pipeline.py `build`: which setting builds which processor, in
                    which order): the config the version handed its builder, every setting the harness
                    passed taking the harness's value (`pipeline.requested`). A processor not built, built
                    with other parameters, or in another order is a regression on a first run too.

The exact side is the installed version's own raw logits at each context (what each logits-processor
list received), processed by the reference engine's processor math (harness/engine/processors.py):
for the target's rows (p, and so the emitted distribution) with the list the HARNESS built, never the
version's - a processor built wrong or not at all moves the observed p and not the exact one; for the
drafter's rows (q) with the processors the drafter's list held as the version built it (what the
drafter is meant to do is the version's choice; the ensemble's intended q takes the harness's target
list). So these fields check sampling from the logits on, in any dtype, at float tolerance; the logits
themselves are the outputs and backends suites' business, and the black-box fit
(harness/designs/sampling.py) checks the path end to end.

Fail closed: a hook that found nothing, a quantity that was not seen or a path that drafted nothing
makes the field `skipped` with the reason; the black-box fit runs regardless.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from harness.engine import pipeline, processors, verify
from harness.schema import Observation

CALLS = 2  # generate() calls per case (distinct seeds)
NEW_TOKENS = 8  # tokens each call generates: several verification steps
MAX_LISTED = 64  # deviating positions a field lists (its identity for the known-deviation rule)
TOLERANCE = 1e-5  # the detectable TV: a clean run sits at <= 2e-7 (float32 rounding; measured 5.13-5.24, fp32 and bf16)
FIELDS = ("exact_target", "exact_draft", "exact_acceptance", "exact_residual", "exact_emitted")
OBSERVED = {
    "exact_target": "the verifier's own softmax of new_logits (TorchFunctionMode on Tensor.softmax inside "
                    "_speculative_sampling); rows of the one multinomial when there are no candidate logits",
    "exact_draft": "input of the drafter's torch.multinomial (q_draw) and the verifier's softmax of "
                   "candidate_logits (q_ver)",
    "exact_acceptance": "input of torch.rand_like inside the verifier (the ratio the uniforms are compared with)",
    "exact_residual": "input of the verifier's torch.multinomial (correction or bonus)",
    "exact_emitted": "implied by probing the recorded verifier call with every draft y in supp(q_draw) and its "
                     "randomness replaced; the sampler's input where there is no verifier",
}
EXACT = {
    "exact_target": "engine processors on the target's raw logits at c_i, as the version applied them",
    "exact_draft": "engine processors on the drafter's raw logits at c_i, as the version applied them (q_ver: q_draw)",
    "exact_acceptance": "min(1, p(x_i)/q(x_i)), ensemble 1 - w + w p/q, from the exact p and q",
    "exact_residual": "norm([p_n - q_n]+) (ensemble fallback p_n), p_k when all drafts are accepted",
    "exact_emitted": "p (lossless); ensemble: w p + (1 - w) q_intended at drafted positions, p at the bonus",
}


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return verify.tv_distance(a, b)


@dataclass
class Worst:
    """The largest deviation of one quantity over the positions compared, and where."""

    tv: float = 0.0
    positions: int = 0
    at: str = ""
    parts: dict[str, float] = field(default_factory=dict)  # per component (exact_draft: q_draw, q_ver)
    over: list[str] = field(default_factory=list)  # the positions beyond TOLERANCE (what identifies a deviation)

    def add(self, value: float, where: str, part: str = "") -> None:
        self.positions += 1
        if value > TOLERANCE and len(self.over) < MAX_LISTED:
            self.over.append(where)
        if part:
            self.parts[part] = max(self.parts.get(part, 0.0), value)
        if value > self.tv or not self.at:
            self.tv, self.at = max(self.tv, value), where


def exact_probs(raw: Any, ctx: tuple[int, ...], chain: Any = None) -> torch.Tensor:
    """The engine's processors on one row of raw logits the version processed, at the row's true context
    `ctx` (the committed tokens and the drafts before it - not necessarily the context the version
    gave its processors): `chain` (engine entries: the harness's list), or, None, the processors the
    row's list held as the version built it. ValueError: a processor the engine cannot apply."""
    steps = raw.procs if chain is None else chain
    if steps is None:
        raise ValueError("the row's processor list was not seen being built")
    return processors.chain_probs(raw.logits, ctx, steps).to(torch.float64)


def tie_groups(raw: Any, ctx: tuple[int, ...], chain: Any = None) -> torch.Tensor:
    """Per token, the id of its class of equal logits after the chain's logit-moving processors
    (processors.TRANSFORMS; temperature keeps equal logits equal): tokens a filter cannot tell apart."""
    z = processors.tie_values(raw.logits, ctx, raw.procs if chain is None else chain)
    return torch.unique(z, return_inverse=True)[1]


def expected_processors(built: Any, kwargs: dict[str, Any], prompt: list[int]) -> list[Any]:
    """The harness's own list for the call (the module docstring's `processors_built`)."""
    return pipeline.build(pipeline.requested(built.config, kwargs, len(prompt)), prompt)


def adopt_ties(exact: torch.Tensor, observed: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """`exact` with the observed choice among tied tokens: where a top-k / top-p / min-p cut falls inside
    a class of equal logits, which of them survive is the implementation's sort order, not math (common
    in bf16, whose logits tie often). A class that keeps as many tokens on both sides takes the observed
    ones (each with the class's exact probability); any other difference is left to be measured."""
    out = exact.clone()
    for g in torch.unique(groups[(exact > 0) != (observed > 0)]).tolist():
        members = groups == g
        kept_e, kept_o = exact[members] > 0, observed[members] > 0
        if int(kept_e.sum()) == int(kept_o.sum()) and bool(kept_e.any()):
            out[members] = torch.where(kept_o, exact[members][kept_e][0], torch.zeros_like(exact[members]))
    return out


def _ratio(p: torch.Tensor, q: torch.Tensor, x: int, w: float | None) -> float:
    r = float(p[x] / q[x]) if q[x] > 0 else float("inf")
    return r if w is None else 1.0 - w + w * r


def measure(steps: list[Any], probes: list[Any], expected: Any, weight: float | None) -> tuple[dict[str, Worst], list[str]]:
    """Every observed quantity of every step against its exact value (module docstring): the target's
    rows under `expected` (the harness's list, engine entries); notes on what could not be compared.
    ValueError: a processor the engine cannot apply."""
    from harness.subjects.hf_whitebox import accept_probability

    worst = {name: Worst() for name in FIELDS}
    notes: list[str] = []
    for s_i, (step, pr) in enumerate(zip(steps, probes, strict=True)):
        ctxs = step.contexts()
        where = f"call {step.call} step {s_i}"
        rows = step.p.shape[0] if step.p is not None else step.k + 1
        if step.chain_missing or len(step.raw_p) < rows or len(step.raw_q) < (step.k if step.kind != "no_logits" else 0):
            notes.append(f"{where}: the raw logits of every row were not seen ({len(step.raw_p)} target, "
                         f"{len(step.raw_q)} drafter rows)")
            continue
        p_e = [exact_probs(step.raw_p[i], ctxs[i], expected) for i in range(rows)]
        if step.p is not None:
            p_e = [adopt_ties(p_e[i], step.p[i], tie_groups(step.raw_p[i], ctxs[i], expected)) for i in range(rows)]
        if step.kind in ("plain", "no_logits"):
            for i in range(rows):
                worst["exact_emitted"].add(tv(step.p[i], p_e[i]), f"{where} position {i}")
            continue
        k, x = step.k, step.drafts
        q_e = [exact_probs(step.raw_q[i], ctxs[i]) for i in range(k)]
        if step.q_draw is not None:
            q_e = [adopt_ties(q_e[i], step.q_draw[i], tie_groups(step.raw_q[i], ctxs[i])) for i in range(k)]
        if step.p is not None:
            for i in range(k + 1):
                worst["exact_target"].add(tv(step.p[i], p_e[i]), f"{where} row {i}")
        if step.q_draw is not None:
            for i in range(k):
                worst["exact_draft"].add(tv(step.q_draw[i], q_e[i]), f"{where} draft {i}", "q_draw")
        if step.q_ver is not None and step.q_draw is not None:
            for i in range(k):
                worst["exact_draft"].add(tv(step.q_ver[i], step.q_draw[i]), f"{where} draft {i} (q_ver)", "q_ver")
        if step.ratio is not None and step.ratio.numel() == k:
            for i in range(k):
                got, want = accept_probability(float(step.ratio[i])), accept_probability(_ratio(p_e[i], q_e[i], x[i], weight))
                worst["exact_acceptance"].add(abs(got - want), f"{where} draft {i}")
        if step.last is not None and step.n is not None:
            n = step.n
            want = p_e[k] if n >= k else _residual(p_e[n], q_e[n], weight)
            worst["exact_residual"].add(tv(step.last, want), f"{where} {'bonus' if n >= k else f'correction at {n}'}")
        if pr is None:
            notes.append(f"{where}: not probed ({'; '.join(step.notes) or 'no verifier call or draft distribution'})")
            continue
        for i in range(k + 1):
            if pr.reach[i] == 0.0:
                continue
            intended = p_e[i]
            if weight is not None and i < k:
                intended = weight * p_e[i] + (1.0 - weight) * exact_probs(step.raw_q[i], ctxs[i], expected)
            if i < k:
                if not pr.accept[i]:
                    notes.append(f"{where} position {i}: support too large to probe")
                    continue
                implied = verify.implied_emission(step.q_draw[i], pr.accept[i], pr.residual[i])
            elif pr.bonus is None:
                continue  # every draft accepted and the version drew no bonus (a stop condition)
            else:
                implied = pr.bonus
            worst["exact_emitted"].add(tv(implied, intended), f"{where} position {i}")
    return worst, notes


def _residual(p: torch.Tensor, q: torch.Tensor, w: float | None) -> torch.Tensor:
    res = torch.clamp(p - q, min=0)
    if w is not None and float(res.sum()) <= torch.finfo(torch.float32).tiny:
        return p
    return res / res.sum()


def mechanism(worst: dict[str, Worst], draft_chain: Any, target_chain: Any, weight: float | None) -> list[str]:
    """What the observed deviations say about how the path differs from the intended process."""
    out = []
    q_ver = worst["exact_draft"].parts.get("q_ver", 0.0)
    if q_ver > TOLERANCE:
        out.append(f"the acceptance test used another q than the draft was drawn from (TV {q_ver:.2g})")
    if worst["exact_draft"].parts.get("q_draw", 0.0) > TOLERANCE:
        out.append(f"the draft was drawn from another q than the drafter's processed logits "
                   f"(TV {worst['exact_draft'].parts['q_draw']:.2g})")
    for name, what in (("exact_target", "the target p"), ("exact_acceptance", "the acceptance probability"),
                       ("exact_residual", "the correction / bonus distribution")):
        if worst[name].tv > TOLERANCE:
            out.append(f"{what} differs from the exact one (TV {worst[name].tv:.2g}, {worst[name].at})")
    names = [n for n, _ in draft_chain or []]
    if weight is not None and draft_chain is not None and draft_chain != target_chain:
        out.append(f"the drafter's processors as applied {names} are not the target's {[n for n, _ in target_chain]}: "
                   "v = w p + (1 - w) q mixes in the q the drafter really sampled")
    if not out and worst["exact_emitted"].tv > TOLERANCE:
        out.append(f"the distribution sampled from is not the harness's processor list applied to the version's own "
                   f"logits (the version built {[n for n, _ in target_chain]}): a processor is built or computes "
                   "something else, or the sampler does")
    return out


def fields(worst: dict[str, Worst], notes: list[str], path: str, skip: dict[str, str], extras: dict[str, Any],
           mechanisms: list[str], generated: int | None = None) -> Observation:
    """The case's white-box fields (which exist depends on the path: plain and prompt lookup have only
    `exact_emitted`), each with what was observed and how, the exact side and `detectable_tv`.
    Coverage: `exact_emitted` states `min_positions` = the `generated` tokens of the calls - every
    sampled token was emitted from a position the hooks must see (fewer is coverage-lost, judged in
    the run); the other fields say whether it did (`tokens_all_observed`): then fewer draws of theirs
    than the baseline's are draws that emitted no token (5.17's `is_done_candidate` stop draws no
    bonus past the last token), not draws the hooks missed; a deviating field lists the positions beyond
    tolerance (`deviating_at`)."""
    obs = Observation()
    names = FIELDS if path in ("assisted", "mtp", "ensemble") else ("exact_emitted",)
    for name in names:
        w = worst[name]
        if name in skip or w.positions == 0:
            why = skip.get(name) or "nothing to compare: " + ("; ".join(sorted(set(notes))[:3]) or
                                                              "no step of this kind was observed")
            obs.skipped(name, "deviation", f"not checkable ({why})", "not-checkable")
            continue
        more: dict[str, Any] = {"parts": w.parts} if w.parts else {}
        if w.over:
            more["deviating_at"] = w.over
        if name == "exact_emitted" and generated is not None:
            more["min_positions"] = generated
        elif generated is not None:  # the emitted positions cover every token: a draw missing here was no token's
            more["tokens_all_observed"] = worst["exact_emitted"].positions >= generated
        obs.add(name, {"tv": w.tv, "positions": w.positions}, kind="deviation", detectable_tv=TOLERANCE,
                observed=OBSERVED[name] if path in ("assisted", "mtp", "ensemble") or name != "exact_emitted"
                else "the sampler's input (torch.multinomial)", exact=EXACT[name], worst_at=w.at,
                mechanism=mechanisms if w.tv > TOLERANCE else [], **more, **extras)
    return obs


@dataclass
class Observed:
    """One case's white-box run: its fields, and what generate() raised or applied."""

    obs: Observation
    error: dict[str, str] | None
    processors: list[list[Any]]  # the target's processor list as built
    drafter_processors: list[list[Any]]  # the assistant's inner list (the target's for MTP)
    seconds: float
    built_config: dict[str, Any] | None = None  # the generation config the target's list was built from


def observe(model: Any, ids: torch.Tensor, kwargs: dict[str, Any], seed: int, *, path: str,
            weight: float | None, assistant: Any = None, draft_tokens: int | None = None) -> Observed:
    """CALLS generate() calls (seeds seed, seed + 1, ...) with NEW_TOKENS new tokens under the recorder,
    every step measured against the exact side (module docstring)."""
    import time

    from harness.subjects import hf_whitebox as wb
    from harness.subjects.hf import draft_schedule

    start = time.process_time()
    kwargs = {**kwargs, "max_new_tokens": NEW_TOKENS}
    steps, probes, recorders, generated = [], [], [], 0
    with draft_schedule(assistant, draft_tokens):
        for call in range(CALLS):
            rec, error = wb.generate(model, ids, kwargs, seed + call)
            if error is not None:
                return Observed(Observation(), error, [], [], time.process_time() - start)
            recorders.append(rec)
            generated += rec.generated
            for step in wb.steps(rec):
                step.call = call
                steps.append(step)
                probes.append(wb.probe(step))
    rec = recorders[0]
    target, drafter = (rec.chains("target") or [[]])[0], (rec.chains("draft") or rec.chains("target") or [[]])[0]
    skip = _unobservable(rec, path)
    obs, built = Observation(), (rec.built_lists("target") or [None])[0]
    prompt = ids[0].tolist()
    expected = expected_processors(built, kwargs, prompt) if built is not None else None
    if built is None:
        obs.skipped("processors_built", "exact", "not checkable (no processor list was seen being built: "
                    f"{'; '.join(rec.missing) or 'generate() built none'})", "not-checkable")
        skip = {name: skip.get(name, "no harness-built list: the target's list was not seen being built") for name in FIELDS}
    else:
        obs.reference("processors_built", [p.spec() for p in built.processors], [p.spec() for p in expected],
                      observed_extras={"observed": "the target's LogitsProcessorList as _get_logits_processor returned "
                                                   "it, each processor read as the engine's entry"},
                      expected_extras={"expected": "harness/engine/pipeline.py build() on the generation config "
                                                   "the version received, the harness's own settings taking its value"})
    try:
        worst, notes = measure(steps, probes, expected, weight) if expected is not None else ({n: Worst() for n in FIELDS}, [])
    except ValueError as exc:  # a processor the engine cannot apply: nothing exact to compare with
        worst, notes = {name: Worst() for name in FIELDS}, []
        skip = {name: f"the exact side cannot be computed: {exc}" for name in FIELDS}
    extras = {"calls": CALLS, "new_tokens": NEW_TOKENS, "hooks_missing": rec.missing}
    obs.merge(fields(worst, notes, path, skip, extras, mechanism(worst, drafter, target, weight), generated))
    return Observed(obs, None, target, drafter, time.process_time() - start, built.config if built else None)


def _unobservable(rec: Any, path: str) -> dict[str, str]:
    """Fields that cannot be observed because a hook found nothing (fail closed: skipped, the reason)."""
    from harness.subjects.hf_whitebox import VERIFIER

    missing = {m.split(":")[0]: m for m in rec.missing}
    skip: dict[str, str] = {}
    if "LogitsProcessorList.__call__" in missing:
        skip = {name: f"no exact side: {missing['LogitsProcessorList.__call__']}" for name in FIELDS}
    elif path != "plain" and not any(h.endswith(".get_candidates") for h in rec.hooked):
        skip = {name: "the verification steps cannot be cut: no get_candidates hooked" for name in FIELDS}
    elif VERIFIER in missing:
        for name in ("exact_target", "exact_emitted"):
            skip[name] = f"the verifier was not observed ({missing[VERIFIER]}): its p and the emitted " \
                         "distribution cannot be probed; acceptance and residual seen through the primitives"
    return skip
