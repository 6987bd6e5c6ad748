"""The stopping suite's tables (suites/test_stopping.py): one stopping setting per case (eos list, stop
strings, length limits, min_new_tokens, pad tokens in a batch of 2), and TextStreamer /
TextIteratorStreamer on plain and assisted generate() - on llama-target, then on each user model."""

from __future__ import annotations

from harness.cases.common import (
    ASSISTANT,
    DRAFT_TOKENS,
    TARGET,
    _p,
    named,
)
from harness.cases.registry import Recipe, Rule, Suite, Table
from harness.schema import Case
from harness.settings.models import UserModel
from harness.settings.run import RunSettings

STOP_TOKENS = 12  # new tokens of a stopping or streaming case: a handful, the suite stays cheap
STOP_PROMPTS = ("short-0", "short-1")  # the first runs alone; a batch of 2 holds both, cut to one length
STOP_CHECKS = ("eos-list", "stop-string-hit", "stop-string-never", "max-new-tokens", "max-length",
               "max-length-and-new-tokens", "min-new-tokens", "min-new-tokens-release", "pad-batch", "pad-batch-default")
STOP_MODELS = (TARGET,)


def _stop_prompts(model: UserModel) -> tuple[str, str]:
    ids = [p.id for p in model.prompts] or list(STOP_PROMPTS)
    return (ids[0], ids[1] if len(ids) > 1 else ids[0])


def stop_cases(model: str, prompts: tuple[str, str]) -> list[Case]:
    """`<model>.stop.<check>`: one stopping setting of `STOP_CHECKS` on the model's first prompt
    (the batch checks: both prompts)."""
    return [Case(model, "plain", "dynamic", prompts[0], new_tokens=STOP_TOKENS, name=f"{model}.stop.{check}",
                 params=_p(check=check, prompts=prompts)) for check in STOP_CHECKS]


def zoo_stopping(run: RunSettings | None = None) -> list[Case]:
    """The stopping cases of the zoo's `STOP_MODELS` (each user model's: its first two prompts)."""
    return [c for m in STOP_MODELS for c in stop_cases(m, STOP_PROMPTS)]


def _user_stop_cases(model: UserModel) -> list[Case]:
    return stop_cases(model.name, _stop_prompts(model))


def stream_cases(model: str, prompts: tuple[str, str], assistant: str | None) -> list[Case]:
    """`<model>.stream.plain`, `<model>.stream.assisted` (with an assistant) and `<model>.stream.batch`
    (a batch of 2, which the streamers refuse)."""
    cases = [Case(model, "plain", "dynamic", prompts[0], new_tokens=STOP_TOKENS, name=f"{model}.stream.plain",
                  params=_p(check="stream", prompts=prompts))]
    if assistant is not None:
        cases.append(Case(model, "assisted", "dynamic", prompts[0], new_tokens=STOP_TOKENS, draft_tokens=DRAFT_TOKENS,
                          assistant=assistant, name=f"{model}.stream.assisted",
                          params=_p(check="stream", prompts=prompts)))
    cases.append(Case(model, "plain", "dynamic", prompts[0], new_tokens=STOP_TOKENS, name=f"{model}.stream.batch",
                      params=_p(check="stream-batch", prompts=prompts)))
    return cases


def zoo_streaming(run: RunSettings | None = None) -> list[Case]:
    """The streaming cases of llama-target (assisted by llama-assistant; each user model's: assisted
    where it has an assistant)."""
    return stream_cases(TARGET, STOP_PROMPTS, ASSISTANT)


def _user_stream_cases(model: UserModel) -> list[Case]:
    return stream_cases(model.name, _stop_prompts(model), model.assistant_name if "assisted" in model.paths else None)




stopping = Table("stopping", zoo_stopping, user=_user_stop_cases, plan=Rule(
    named("stop.eos-list", "stop.stop-string-hit", "stop.max-new-tokens", "stop.pad-batch"),
    "the other limits are the same stopping criteria at other values"))
streaming = Table("streaming", zoo_streaming, user=_user_stream_cases, plan=Rule(
    named("stream.plain"), "the assisted streamer and the batch refusal repeat the plain one's code"))

SUITE = Suite("stopping", (stopping, streaming), api='stopping criteria and streamers', units=(30, 30),
              repro=Recipe(of=lambda c: "stream" if c.param("check") == "stream" else None,
                           scripts=lambda case_id: case_id.endswith((".stream.plain", ".stream.assisted"))))
