"""Every suite's case tables, in one namespace and one shape, and the suites registry that joins them:
`SUITES`, one row per suite module (harness/cases/registry.py `Suite`), each defined beside its
tables in harness/cases/<suite>.py (the shared roles and helpers: harness/cases/common.py). What the
rest of the harness needs of a suite - the cases it adds for a user model, the quick tier's rule,
the budget plan's rule, the preflight's cost units, the repro recipe - is read from its row.
`cases.<table>` is the table (a suite module and its table share a name: import a module's other
names as `from harness.cases.<suite> import NAME`).

A table is a function of the run's settings, ``table(run) -> list[Case]`` (run: harness/settings/run.py
`RunSettings`, or None for the zoo's rows of a default run). A suite declares it with
``@pytest.mark.cases(table=...)`` and the plugin calls it at collection, so deep mode and your own
models (``run.user_models``) reach a table through the settings - never through a global. A
`Case` (harness/schema.py) is frozen and its `id` is stable text that names the record file
``golden/records/<env-key>/<suite>/<case id>.json``; adding a model to the zoo adds its rows here,
never a test function.

    outputs(run)    every (model, path, cache, prompt, decoding) that makes sense for the zoo, then each
                    user model's (its paths x prompts x caches; one seeded sample per path)
    models(run)     one case per checkpoint (caches, backends)
    contracts(run)  API contracts, the API surface, per-model defaults, MTP checkpoints, stateful paths
    sampling(run)   sampled generate() per path x sampling setting (the default grid, or every
                    path x setting in deep mode), then each user model's
    bias(run)       one verification step per ensemble weight x context
    latency(run)    prefill, steady-state decode and generate() per path, then each user model's
    loading(run)    the load contract: every zoo model as shipped, llama-target's checkpoint variants
                    (harness/designs/loading.py `VARIANTS`), then each user model as shipped
    stopping(run)   one stopping setting per case (eos list, stop strings, length limits, min_new_tokens,
                    pad tokens in a batch of 2) on llama-target, then on each user model
    streaming(run)  TextStreamer / TextIteratorStreamer on plain and assisted generate(), and a batch of 2
                    (refused), on llama-target, then on each user model
    long_context(run) the rope-scaled fixtures (llama3, yarn) driven past original_max_position_embeddings,
                    each also from a 4.x config (`rope_scaling`), and mistral-sliding decoding past its window
                    in a left-padded batch of 2 (zoo only: a real model's pretraining length is far past a cheap run)
    batching(run)   each prompt alone vs inside a padded batch (greedy, seeded sampling, right padding,
                    assisted and prompt lookup) on llama-target, greedy on mistral-sliding and
                    gemma2-softcap, then each user model's
    continuous(run) several requests at once through generate_batch (greedy with an early eos, sampled,
                    logits processors, num_beams) on llama-target, then each user model's greedy
    compiled(run)   static-cache generate() compiled through aot_eager (and inductor in deep mode) on
                    llama-target, then each user model through aot_eager
    quantized(run)  llama-target loaded with torchao's int8 weight-only quantization (the serving extra)
    tokenizers(run) one case per distinct zoo tokenizer (the manifest's digests of its tokenizer files),
                    then each user model's own
    chats(run)      the chat-template fixture on llama-target, then each user model's own template
    beam(run)       beam search settings (num_beams, length_penalty, early_stopping, num_return_sequences,
                    a batch of 2) on llama-target, then each user model's
    beam_modes(run) the decoding modes moved out of the library (group beam, contrastive, constrained, DoLa):
                    run, refused or redirected to the hub, per version

The draft schedule is part of a case: a biased verifier's output depends on how drafts are cut
into blocks, so both transformers and the reference engine run a constant draft length
(`draft_tokens`, no confidence-threshold early stop).
"""

from __future__ import annotations

from harness.cases import registry
from harness.cases.backends import SUITE as _BACKENDS
from harness.cases.batching import *  # noqa: F403
from harness.cases.batching import SUITE as _BATCHING
from harness.cases.beam import *  # noqa: F403
from harness.cases.beam import SUITE as _BEAM
from harness.cases.bias import *  # noqa: F403
from harness.cases.bias import SUITE as _BIAS
from harness.cases.caches import SUITE as _CACHES
from harness.cases.common import *  # noqa: F403
from harness.cases.common import _deep, _p  # noqa: F401
from harness.cases.compiled import *  # noqa: F403
from harness.cases.compiled import SUITE as _COMPILED
from harness.cases.continuous import *  # noqa: F403
from harness.cases.continuous import SUITE as _CONTINUOUS
from harness.cases.contracts import API, CONTRACTS, ENTRY_POINTS, ENUM_FIELDS, STATEFUL, contract, contracts  # noqa: F401
from harness.cases.contracts import SUITE as _CONTRACTS
from harness.cases.gguf import *  # noqa: F403
from harness.cases.gguf import SUITE as _GGUF
from harness.cases.kernels import CPU_SDPA_BACKENDS, KERNEL_DTYPES, SDPA_BACKENDS, kernel_matmuls, kernels  # noqa: F401
from harness.cases.kernels import SUITE as _KERNELS
from harness.cases.latency import *  # noqa: F403
from harness.cases.latency import SUITE as _LATENCY
from harness.cases.loading import *  # noqa: F403
from harness.cases.loading import SUITE as _LOADING
from harness.cases.long_context import *  # noqa: F403
from harness.cases.long_context import SUITE as _LONG_CONTEXT
from harness.cases.outputs import *  # noqa: F403
from harness.cases.outputs import SUITE as _OUTPUTS
from harness.cases.quantized import *  # noqa: F403
from harness.cases.quantized import SUITE as _QUANTIZED
from harness.cases.sampling import *  # noqa: F403
from harness.cases.sampling import SUITE as _SAMPLING
from harness.cases.stopping import *  # noqa: F403
from harness.cases.stopping import SUITE as _STOPPING
from harness.cases.text import (  # noqa: F401
    CHAT_MODELS,
    TOKENIZER_FILES,
    ZOO_CHATS,
    chats,
    tokenizer_groups,
    tokenizers,
    zoo_chats,
    zoo_tokenizers,
)
from harness.cases.text import SUITE as _TEXT
from harness.schema import Case  # noqa: F401
from harness.settings.models import UserModel
from harness.settings.run import RunSettings

# the registry: one row per suites/test_<name>.py (tests/test_registry.py holds every row to its module)
SUITES: tuple[registry.Suite, ...] = (
    _OUTPUTS, _SAMPLING, _BIAS, _LATENCY, _LOADING, _STOPPING, _BEAM, _BATCHING, _CONTINUOUS, _COMPILED, _QUANTIZED,
    _LONG_CONTEXT, _TEXT, _CACHES, _BACKENDS, _CONTRACTS, _KERNELS, _GGUF)
BY_SUITE = registry.by_name(SUITES)


def suite(name: str) -> registry.Suite | None:
    """The registry row of suite `name` (a suite module's name without `test_`), None for a module
    the registry does not know (a project's own suite)."""
    return BY_SUITE.get(name)


def left_out(run: RunSettings | None) -> list[str]:
    """What the budget plans of the run's user models leave out, one line per (model, table)."""
    return registry.left_out(SUITES, run)


def user_work(run: RunSettings, model: UserModel) -> dict[str, int]:
    """Single-token forwards of `model` per suite under its plan (the preflight's input,
    harness/settings/preflight.py `estimate`), from each suite's row."""
    return registry.user_work(SUITES, run, model)
