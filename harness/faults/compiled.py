"""Catalogue faults of compiled static-cache decoding: generate()'s auto-compile gate and the static
cache it compiles against (suites/test_compiled.py: every call against the engine's decode, whether
the first call compiled, and what a call that fits the cache recompiles).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it is
modelled on; harness/faults/catalogue.py joins every family's `FAULTS`. The edits are of 5.24's
generate() (generation/utils.py)."""

from __future__ import annotations

from harness.faults.patches import Catch, Fault, edit
from harness.faults.targets import CACHE, GEN

FAULTS: tuple[Fault, ...] = (
    Fault("compile-gate-ignores-all-devices", "compile",
          "generate()'s auto-compile gate no longer reads CompileConfig._compile_all_devices: on the CPU a "
          "static-cache call asked to compile runs eager, silently (the same tokens, none of the speed)",
          Catch("compiled", "llama-target.compiled.*", "compiled_as_asked"),
          (edit(GEN, "GenerationMixin._valid_auto_compile_criteria",
                ("generation_config.compile_config is not None and generation_config.compile_config._compile_all_devices",
                 "False")),),
          notes="the class of transformers PR #44757 (\"Add Neuron to auto-compile hardware list\": "
                "`_valid_auto_compile_criteria` gated compilation on a device list, so \"torch.compile never "
                "triggers automatically on Neuron even when StaticCache is used\", #44742) - a gate that leaves a "
                "device out; only whether the call compiled shows it, the tokens are eager's"),
    Fault("static-cache-step-guarded", "compile",
          "the static cache's layer keeps the length it has filled as a Python int the decode step reads: dynamo "
          "guards on it, so every step of the first compiled call recompiles until its limit sends the rest eager",
          Catch("compiled", "llama-target.compiled.*", "first_call_compiles_once"),
          (edit(CACHE, "StaticLayer.update",
                ("self.cumulative_length.add_(kv_length)",
                 "self.cumulative_length.add_(kv_length)\n"
                 "    self._filled = getattr(self, '_filled', 0) + kv_length\n"
                 "    if self._filled < 0:\n"
                 "        key_states = key_states + 0")),),
          notes="transformers #44609 (Gemma 2 / Gemma 3's sliding-window static cache: the layer's length a Python "
                "int dynamo guards on, 7 graphs for 8 tokens, every decode step recompiling until the limit) on a "
                "full-attention layer; the tokens stay right and the calls that fit the cache compile nothing "
                "new, so only the first call's own recompiles show it"),
    Fault("compiled-forward-first-step-only", "compile",
          "the decode loop runs the compiled forward for its first step and the eager forward afterwards: the "
          "same tokens, one graph compiled, none of the speed after step one",
          Catch("compiled", "llama-target.compiled.*", "compiled_every_step"),
          (edit(GEN, "GenerationMixin._sample",
                ("outputs = model_forward(**model_inputs, return_dict=True)\n",
                 "outputs = model_forward(**model_inputs, return_dict=True)\n"
                 "                model_forward = self.__call__\n")),),
          notes="the class of transformers #30055 (\"No speed-up of model.generate() with StaticCache + "
                "torch.compile in 4.39.3\": the right tokens from a decode loop that was not running the compiled "
                "forward as asked) and of PR #34923 (\"Automatic compilation in generate: do not rely on inner "
                "function\": which forward the loop calls decided per call from state the model keeps); the tokens "
                "and the compile counts are the clean run's, only the eager forwards counted show it"),
    Fault("static-cache-length-not-kept", "compile",
          "each static-cache generate() call allocates its cache at its own length instead of the longest an "
          "earlier call used: a shorter call after a longer one gets a cache of another shape and recompiles "
          "the decode step",
          Catch("compiled", "llama-target.compiled.*", "no_recompile_within_cache"),
          (edit(GEN, "GenerationMixin._prepare_static_cache",
                ("effective_length = max(max_cache_len, previous_max_len)", "effective_length = max_cache_len")),),
          notes="the class of transformers #46424 (the static cache's max_cache_len not kept and the cache "
                "reallocated: 27 s against 2.7 s, every call recompiling) and of the recompile storms of #37908 - "
                "what 5.x's `_previous_max_cache_length` exists to prevent (\"To avoid recompilation, the new "
                "cache will use the maximum between the current max_cache_len and the potential previous "
                "value\"); the tokens stay right, only the compile count shows it"),
)
