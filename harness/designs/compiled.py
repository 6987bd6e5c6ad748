"""Compiled static-cache decoding, per version (suites/test_compiled.py; table: harness/cases/ `compiled`;
the call: harness/subjects/hf_compiled.py): generate() with `cache_implementation="static"` and a
CompileConfig that compiles on every device - the path a team serves on once it turns compilation on.

The calls, in order, on one model with one config (dynamo's caches emptied before the first, so the
counts are this case's):

  first    the first prompt, `NEW_TOKENS` new tokens: compiles the decode step
  other    the second prompt (another text; cut to the first's length where it is longer, whatever the
           tokenizer): fits the cache the first call made
  shorter  the first prompt, `SHORTER` new tokens: fits it too
  longer   the first prompt, `LONGER` new tokens: needs a longer cache (what a version compiles then
           is recorded, not judged)

and the first call once more without the config (eager), for the secondary reference.

  setup     exact   the knobs the path needs (backend, mode, fullgraph, dynamic, _compile_all_devices,
                    the cache) - the harness's choice, recorded beside the case
  errors    exact   per call: its exception (type, first line), or None
  tokens    tokens  per call (rows first, other, shorter, longer): the new tokens, with the engine's
                    margins after each row's own prefix (teacher-forced, harness/engine/teacher_forced.py)
  compiles  exact   per call: the graphs dynamo compiled during it - the version's recompile behaviour
                    (a change is a finding; the contract is the references')
 references, computed in the run:
  compiled_as_asked         exact   the first call compiled (at least one graph): the config asks for
                                    compilation on every device (its oracle is the config's documented
                                    meaning; an auto-compile gate that leaves a device out - transformers
                                    PR #44757 / #44742 - runs eager instead, silently)
  first_call_compiles_once  exact   the first call recompiles nothing: a static cache keeps the decode
                                    step's shapes from step to step, so its forward is compiled once and
                                    every later step runs that graph (the oracle is the static cache's
                                    contract; dynamo's count of cached graphs whose guards failed, not
                                    the time: 0 exactly when no step recompiled). A
                                    value the graph guards on that moves per step - transformers #44609's
                                    sliding-window length, a Python int - recompiles at every step until
                                    dynamo's limit sends the rest eager (7 graphs for 8 tokens)
  compiled_every_step       exact   per call asked to compile that fits its cache (first, other,
                                    shorter): how many forwards after the first ran eager - 0: every
                                    decode step ran the compiled graph (the oracle is the config's meaning:
                                    the decode loop runs the compiled forward, the prefill may stay
                                    eager; a loop that drops back to the eager forward after a step makes
                                    the same tokens and no new graph, so only this count shows it). The
                                    count: a forward pre-hook counting behind
                                    `torch.compiler.is_compiling()` (harness/subjects/hf_compiled.py
                                    `EagerForwards`)
  no_recompile_within_cache exact   the calls that fit the cache an earlier call made (other, shorter)
                                    compile nothing (the static cache's contract, as transformers' own
                                    compile tests state it: a second call of the same shapes compiles no
                                    graph; 4.57-5.14 reuse the cache, 5.x keeps the longest length for
                                    that - a cache reallocated at each call's own length recompiles,
                                    #46424's class)
  tokens_as_engine          tokens  per call, the reference engine's greedy decode of that prompt and
                                    length (tie-aware: the compiled graph's kernels round otherwise)
  steps_as_engine           tokens  every token against the engine's choice after its row's own prefix
                                    (teacher-forced): a token from a stale cache or another call's
                                    state is seen at every step, not only before the first near-tie
  tokens_as_eager           tokens  the first call against the same call eager (secondary: the library's
                                    own other path; tie-aware on both sides' margins) - a bug both paths
                                    share moves both, so it never stands in for the engine
 information (never a check): `compile_seconds`, each call's wall time - the first one's is mostly
 compiling; the latency suite is where time is judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.engine.teacher_forced import Forced, teacher_forced
from harness.schema import Case, Observation
from harness.subjects import engine
from harness.subjects.hf_compiled import compile_config, reset, run

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

PROMPTS = ("short-0", "short-1")  # the second cut to the first's length at most: it fits the first's cache
NEW_TOKENS, SHORTER, LONGER = 8, 4, 16
CALLS = (("first", 0, NEW_TOKENS), ("other", 1, NEW_TOKENS), ("shorter", 0, SHORTER), ("longer", 0, LONGER))
WITHIN_CACHE = ("other", "shorter")


def observe(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    backend = case.param("backend")
    lm = zoo.load(case.model)
    first, second = (zoo.prompt_ids(case.model, p) for p in PROMPTS)
    prompts = [first, second[:, :first.shape[1]]]
    config, knobs = compile_config(backend)
    obs.add("setup", knobs)
    reset()
    try:
        got = {name: run(lm.model, prompts[p], n, config) for name, p, n in CALLS}
        eager = run(lm.model, prompts[0], NEW_TOKENS, None)
    finally:
        reset()
    obs.add("errors", {name: g.error for name, g in got.items()})
    obs.add("compiles", {name: g.compiles for name, g in got.items()})
    obs.info("compile_seconds", ", ".join(f"{name} {g.seconds:.2f} s" for name, g in got.items()),
             {name: round(g.seconds, 3) for name, g in got.items()})
    ran = {name: g for name, g in got.items() if g.error is None}
    obs.reference("compiled_as_asked", {"first call compiled": got["first"].compiles > 0}, {"first call compiled": True},
                  implementations_differ=False)
    if got["first"].error is not None or got["first"].recompiles is None:
        obs.skipped("first_call_compiles_once", "exact", "the first call raised" if got["first"].error is not None
                    else "this torch keeps no count of recompiles (torch._dynamo.utils.guard_failures)",
                    category="not-checked")
    else:
        obs.reference("first_call_compiles_once", {"guards failed during the first call": got["first"].recompiles},
                      {"guards failed during the first call": 0}, implementations_differ=False)
    steps = {n: max(got[n].eager_forwards - 1, 0) for n in ("first", *WITHIN_CACHE) if got[n].error is None}
    obs.reference("compiled_every_step", {f"{n}: eager forwards after the first": k for n, k in steps.items()},
                  {f"{n}: eager forwards after the first": 0 for n in steps}, implementations_differ=False)
    obs.reference("no_recompile_within_cache", {n: got[n].compiles for n in WITHIN_CACHE},
                  dict.fromkeys(WITHIN_CACHE, 0), implementations_differ=False)
    gap = zoo.oracle.gap(case.model)
    rows = {name: (prompts[p][0].tolist(), ran[name].tokens) for name, p, _ in CALLS if name in ran}
    if gap:
        obs.add("tokens", [t for _, t in rows.values()], kind="tokens",
                margins=[ran[n].margins for n in rows], scales=[ran[n].scales for n in rows])
        for name in ("tokens_as_engine", "steps_as_engine"):
            obs.skipped(name, "tokens", gap)
    else:
        forced = {n: teacher_forced(engine.logits_cached(zoo, case.model, [*p, *t]), len(p), t)
                  for n, (p, t) in rows.items()}
        obs.add("tokens", [t for _, t in rows.values()], kind="tokens", row_labels=list(rows),
                margins=[forced[n].gaps for n in rows], scales=[forced[n].scales for n in rows])
        ours = {n: engine.decode_cached(zoo, Case(case.model, prompt=PROMPTS[p], new_tokens=k), prompts[p][0].tolist())
                for n, p, k in CALLS if n in rows}
        obs.reference("tokens_as_engine", [t for _, t in rows.values()], [ours[n].tokens for n in rows], kind="tokens",
                      observed_extras={"row_labels": list(rows)},
                      expected_extras={"margins": [ours[n].margins for n in rows],
                                       "scales": [ours[n].scales for n in rows], "row_labels": list(rows)})
        engine.forced_reference(obs, "steps_as_engine", [x for _, t in rows.values() for x in t],
                                Forced.join([forced[n] for n in rows]),
                                [f"{n} step {i}" for n, (_, t) in rows.items() for i in range(len(t))])
    compiled = got["first"]
    if compiled.error is not None or eager.error is not None:
        why = compiled.error or eager.error
        obs.skipped("tokens_as_eager", "tokens", f"{'the compiled' if compiled.error else 'the eager'} call raised "
                    f"{why['type']}: {why['message']}")
    else:
        obs.reference("tokens_as_eager", [compiled.tokens], [eager.tokens], kind="tokens",
                      observed_extras={"margins": [compiled.margins], "scales": [compiled.scales]},
                      expected_extras={"margins": [eager.margins], "scales": [eager.scales]})
    return obs
