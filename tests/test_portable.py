"""The zoo's config and tokenizer files in the form transformers 4.57 and 5.x both read
(harness/zoo/portable.py): keys added under 4.57's names, no value changed."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.zoo.portable import PORTABLE_TOKENIZER_CLASS, portable_config, portable_files
from harness.zoo.specs import MODELS_DIR, SPECS

ROPE = {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5}

CASES = [  # (config, keys the portable form adds with their values)
    ({"model_type": "llama", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, {"rope_theta": 1e4}),
    ({"model_type": "glm4_moe", "rope_parameters": ROPE}, {"rope_theta": 5e5, "partial_rotary_factor": 0.5}),
    ({"model_type": "gpt_neox", "rope_parameters": ROPE},
     {"rope_theta": 5e5, "partial_rotary_factor": 0.5, "rotary_emb_base": 5e5, "rotary_pct": 0.5}),
    ({"model_type": "mellum", "rope_parameters": {"full_attention": ROPE, "sliding_attention": ROPE}}, {}),
    ({"model_type": "gpt_bigcode"}, {}),
    ({"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 4.0,
                                                 "original_max_position_embeddings": 32}},
     {"rope_theta": 1e4, "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": 32}}),
]


@pytest.mark.parametrize(("config", "added"), CASES, ids=[c["model_type"] for c, _ in CASES])
def test_portable_config_adds_the_4_57_names_and_changes_no_value(config, added):
    out = portable_config(config)
    assert {k: v for k, v in out.items() if k not in config} == added
    assert {k: out[k] for k in config} == config


def test_portable_files_is_idempotent_and_the_committed_zoo_is_portable(tmp_path):
    for spec in SPECS:
        copy = tmp_path / spec.name
        shutil.copytree(MODELS_DIR / spec.name, copy)
        assert portable_files(copy) == [], spec.name
        assert json.loads((copy / "tokenizer_config.json").read_text())["tokenizer_class"] == PORTABLE_TOKENIZER_CLASS


def test_a_v5_saved_directory_is_rewritten(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CASES[0][0]))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))
    assert portable_files(tmp_path) == ["config.json", "tokenizer_config.json"]
    assert portable_files(tmp_path) == []
