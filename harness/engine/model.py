"""A minimal decoder forward for the zoo's families, written from the papers, not from transformers.

Families (config.json `model_type`): llama, mistral, qwen2, llama4_text, glm4_moe, mellum (dense MLPs),
gemma2, qwen3_5_text (hybrid: gated delta-rule linear attention + gated full attention).
One pre-norm block for all of them:

    h = x + o_proj(attn(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
    y = h + mlp(rms(h))                mlp(u) = down(silu(gate(u)) * up(u))

What differs per family is data, read from config.json into `Config`:
- attention kind per layer (full / sliding(window) / chunked(chunk)) - the visibility rule is
  `cache.visible`, stated once there;
- RoPE: rotate-half pairs (i, i + d/2) (Llama, Mistral, Qwen2, GLM, Mellum) or interleaved pairs
  (2i, 2i+1) (Llama 4); partial rotary (GLM: only the first `rotary_dim` dims rotate);
  NoPE layers (Llama 4 `no_rope_layers[i] == 0`); a theta per attention kind (Mellum:
  `rope_parameters` keyed by layer type, e.g. sliding 1e4, full 5e5); scaled frequencies for long
  context (`RopeScaling`: Llama 3.1's "llama3" and YaRN's "yarn", formulas in `scaled_inv_freq`);
- q/k/v biases (Qwen2, GLM with attention_bias), L2 q/k norm after RoPE (Llama 4 RoPE layers),
  per-head RMS q/k norm with weights before RoPE (Mellum, as Qwen3),
  attention temperature tuning on NoPE layers (Llama 4):
  q *= 1 + attn_scale * log(1 + floor((pos + 1) / floor_scale));
- MoE MLP (GLM-4.5 MTP layer): sigmoid router, top-k by score + correction bias,
  weights renormalised and scaled, plus a shared expert;
- Gemma 2: embeddings scaled by sqrt(hidden_size); RMSNorm weights applied as (1 + w); four norms
  per block ("sandwich": the attention and MLP outputs are normed before the residual add,
      h = x + rms_post_attn(attn(rms_in(x)));  y = h + rms_post_ff(mlp(rms_pre_ff(h))) );
  MLP activation gelu (tanh approximation); attention scores scaled by query_pre_attn_scalar^-1/2
  and soft-capped before the mask, s = c_a * tanh(s / c_a); final logits soft-capped,
  z = c_f * tanh(z / c_f); alternating sliding / full layers come from `layer_types`.
- Qwen3.5 (text): `linear_attention` layers replace attention by the gated delta rule
  (delta_rule.py) under the same pre-norm block; full-attention layers have an output gate,
      q, gate = per head split of q_proj(x) (2 * head_dim per head);  out = attn(...) * sigmoid(gate)
  and per-head q/k RMS norms; every RMSNorm of the model applies its weight as (1 + w) (the
  gated norm inside the delta-rule layer excepted); partial rotary (`partial_rotary_factor`).

Weights come straight from model.safetensors (safetensors only, never pickle) into `Weights`,
under their checkpoint names and no others; the fused projections built from them are kept
beside those names (a memory-mapped checkpoint, `Model.load(mapped=True)`: the file's pages in
its dtype, converted per operation, nothing kept beside them). All math runs in the checkpoint dtype except norms and softmax, which run
in fp32 like the reference implementations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from .cache import LINEAR, LayerCache, RecurrentCache, build_caches, layer_types_of, visible
from .delta_rule import LinearShape, gated_delta_net, initial_state

SUPPORTED = ("llama", "mistral", "qwen2", "llama4_text", "llama4", "glm4_moe", "mellum", "gemma2", "qwen3_5_text")


@dataclass(frozen=True)
class Config:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rotary_dim: int
    interleaved_rope: bool
    layer_types: tuple[str, ...]
    sliding_window: int | None
    chunk_size: int | None
    eps: float
    rope_layers: tuple[bool, ...]
    qk_l2_norm: bool
    temperature_tuning: bool
    floor_scale: float
    attn_scale: float
    num_mtp_layers: int = 0
    qk_norm: bool = False  # weighted per-head RMS norm of q and k before RoPE (Mellum)
    rope_theta_by_kind: tuple[tuple[str, float], ...] = ()  # (layer type, theta) where it differs per kind
    rope_scaling: RopeScaling | None = None  # scaled RoPE frequencies (long context); None: plain RoPE
    mtp_layer_types: tuple[str, ...] = ()  # attention kind of each MTP layer (Mellum); () = full attention
    # MoE (MTP layer of GLM-4.5)
    num_experts: int = 0
    first_moe_layer: int = 0  # layers >= this use the MoE MLP (when num_experts > 0)
    experts_per_token: int = 0
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0
    # Gemma 2
    embed_scale: float = 1.0  # embeddings multiplied by this (sqrt(hidden_size) for Gemma)
    norm_offset: float = 0.0  # RMSNorm weight applied as (norm_offset + w)
    sandwich_norms: bool = False  # post-attention / pre- and post-feed-forward norms
    mlp_act: str = "silu"  # "silu" | "gelu_tanh"
    attn_scale_dim: int = 0  # scores scaled by attn_scale_dim ** -0.5 (0: head_dim)
    attn_softcap: float | None = None
    final_softcap: float | None = None
    # Qwen3.5
    attn_output_gate: bool = False  # q_proj also emits a per-head gate; out *= sigmoid(gate)
    linear: LinearShape | None = None  # shape of the linear_attention (gated delta-rule) layers

    @staticmethod
    def from_dict(cfg: dict) -> Config:
        model_type = cfg["model_type"]
        if model_type not in SUPPORTED:
            raise ValueError(f"reference engine does not implement model_type {model_type!r} (supported: {SUPPORTED})")
        if model_type == "llama4":
            cfg = {**cfg, **cfg.get("text_config", {})}
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        # transformers 5 writes `rope_parameters`; 4.x configs name the same dict `rope_scaling` (type in `type`)
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        # per-kind RoPE (Mellum): {"full_attention": {...}, "sliding_attention": {...}}
        by_kind = {k: v for k, v in rope.items() if isinstance(v, dict)}
        for params in (by_kind or {"": rope}).values():
            kind = rope_type_of(params)
            if kind != "default" and (by_kind or kind not in SCALED_ROPE):
                raise ValueError(f"reference engine implements default RoPE and, for one RoPE for every layer, "
                                 f"{'/'.join(SCALED_ROPE)} scaling; got {kind!r}")
            if params.get("partial_rotary_factor", 1.0) != 1.0 and by_kind:
                raise ValueError("reference engine: partial rotary per layer kind is not implemented")
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        partial = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
        if model_type == "mellum":
            sparse = [t for t in list(cfg.get("mlp_layer_types") or ["sparse"]) + list(cfg.get("mtp_mlp_layer_types") or [])
                      if t != "dense"]
            if sparse:
                raise ValueError("reference engine implements Mellum's dense MLP layers only (mlp_layer_types / "
                                 f"mtp_mlp_layer_types contain {sorted(set(sparse))})")
        n = cfg["num_hidden_layers"]
        llama4 = model_type.startswith("llama4")
        rope_layers = tuple(bool(x) for x in cfg["no_rope_layers"]) if llama4 else (True,) * n
        return Config(
            model_type=model_type, vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"], num_layers=n,
            num_heads=heads, num_kv_heads=cfg.get("num_key_value_heads") or heads, head_dim=head_dim,
            rope_theta=float(theta), rotary_dim=int(head_dim * partial), interleaved_rope=llama4,
            layer_types=tuple(layer_types_of(cfg)), sliding_window=cfg.get("sliding_window"),
            chunk_size=cfg.get("attention_chunk_size"), eps=cfg.get("rms_norm_eps", 1e-6),
            rope_layers=rope_layers, qk_l2_norm=llama4 and cfg.get("use_qk_norm", False),
            temperature_tuning=llama4 and cfg.get("attn_temperature_tuning", False),
            floor_scale=float(cfg.get("floor_scale", 8192)), attn_scale=float(cfg.get("attn_scale", 0.1)),
            num_mtp_layers=cfg.get("num_mtp_layers") or cfg.get("num_nextn_predict_layers") or 0,
            num_experts=cfg.get("n_routed_experts") or 0, first_moe_layer=cfg.get("first_k_dense_replace", 0),
            experts_per_token=cfg.get("num_experts_per_tok", 0),
            norm_topk_prob=cfg.get("norm_topk_prob", True),
            routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
            qk_norm=model_type in ("mellum", "qwen3_5_text"),
            rope_theta_by_kind=tuple(sorted((k, float(v["rope_theta"])) for k, v in by_kind.items())),
            rope_scaling=None if by_kind else RopeScaling.from_params(rope, cfg.get("max_position_embeddings")),
            mtp_layer_types=tuple(cfg.get("mtp_layer_types") or ()),
            **(_gemma2(cfg) if model_type == "gemma2" else {}),
            **(_qwen3_5(cfg) if model_type == "qwen3_5_text" else {}),
        )

    def theta(self, kind: str) -> float:
        """The RoPE theta of a layer of attention kind `kind`."""
        return dict(self.rope_theta_by_kind).get(kind, self.rope_theta)


def _gemma2(cfg: dict) -> dict:
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"reference engine implements Gemma 2 with gelu_pytorch_tanh only, got {act!r}")
    return dict(embed_scale=float(cfg["hidden_size"]) ** 0.5, norm_offset=1.0, sandwich_norms=True,
                mlp_act="gelu_tanh", attn_scale_dim=int(cfg.get("query_pre_attn_scalar") or 0),
                attn_softcap=cfg.get("attn_logit_softcapping"), final_softcap=cfg.get("final_logit_softcapping"))


def _qwen3_5(cfg: dict) -> dict:
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"reference engine implements Qwen3.5 with silu only, got {act!r}")
    linear = LinearShape(key_heads=cfg["linear_num_key_heads"], value_heads=cfg["linear_num_value_heads"],
                         key_dim=cfg["linear_key_head_dim"], value_dim=cfg["linear_value_head_dim"],
                         conv_kernel=cfg["linear_conv_kernel_dim"], eps=cfg.get("rms_norm_eps", 1e-6))
    return dict(norm_offset=1.0, attn_output_gate=True, linear=linear)


# ----------------------------------------------------------------------------- building blocks

def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight, computed in fp32 (weight None: plain L2-style norm)."""
    if x.dtype == torch.float32:  # the same formula as one fused op
        return F.rms_norm(x, x.shape[-1:], weight, eps)
    y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    y = y.to(x.dtype)
    return y if weight is None else weight * y


SCALED_ROPE = ("llama3", "yarn")


def rope_type_of(params: Mapping) -> str:
    """The RoPE type of a rope dict: `rope_type`, else 4.x's `type`, else "default"."""
    return str(params.get("rope_type", params.get("type", "default")))


@dataclass(frozen=True)
class RopeScaling:
    """Scaled RoPE frequencies for contexts past the pretraining length `original_max` (L), by factor s.
    llama3 (Llama 3.1): low_freq_factor, high_freq_factor. yarn (YaRN): beta_fast, beta_slow, an
    explicit attention_factor (None: 0.1 ln s + 1), truncate (integer ramp bounds)."""

    rope_type: str
    factor: float
    original_max: int
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    truncate: bool = True

    @staticmethod
    def from_params(params: Mapping, max_position_embeddings: int | None = None) -> RopeScaling | None:
        """The scaling a flat rope dict asks for (None for plain RoPE). A missing
        original_max_position_embeddings is max_position_embeddings (transformers' rule); a yarn
        dict without a factor scales by max_position_embeddings / original_max (DeepSeek-V3's rule)."""
        kind = rope_type_of(params)
        if kind not in SCALED_ROPE:
            return None
        if params.get("mscale") and params.get("mscale_all_dim"):
            raise ValueError("reference engine: yarn's mscale / mscale_all_dim attention factor is not implemented")
        original = int(params.get("original_max_position_embeddings") or max_position_embeddings or 0)
        factor = params.get("factor")
        if factor is None and kind == "yarn" and max_position_embeddings and original:
            factor = max_position_embeddings / original
        if factor is None or not original:
            raise ValueError(f"reference engine: {kind} RoPE needs factor and original_max_position_embeddings")
        attention = params.get("attention_factor")
        return RopeScaling(kind, float(factor), original,
                           low_freq_factor=float(params.get("low_freq_factor", 1.0)),
                           high_freq_factor=float(params.get("high_freq_factor", 4.0)),
                           beta_fast=float(params.get("beta_fast") or 32.0), beta_slow=float(params.get("beta_slow") or 1.0),
                           attention_factor=None if attention is None else float(attention),
                           truncate=bool(params.get("truncate", True)))


def plain_inv_freq(rotary_dim: int, theta: float) -> torch.Tensor:
    """theta^(-2i/rotary_dim), i = 0 .. rotary_dim/2 - 1: RoPE's inverse frequencies."""
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))


def llama3_inv_freq(inv_freq: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    """Llama 3.1 (Meta's reference `apply_scaling`): with wavelength w = 2 pi / f of a frequency f,
    L = original_max, and the wavelength bounds w_high = L / high_freq_factor, w_low = L / low_freq_factor,
        w < w_high          f                              (fast: kept)
        w > w_low           f / factor                     (slow: interpolated)
        otherwise           (1 - g) f / factor + g f,      g = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor)
    g is 1 at w = w_high and 0 at w = w_low, so the three pieces join."""
    wavelen = 2 * math.pi / inv_freq
    high, low = s.original_max / s.high_freq_factor, s.original_max / s.low_freq_factor
    smooth = (s.original_max / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    mixed = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
    return torch.where(wavelen < high, inv_freq, torch.where(wavelen > low, inv_freq / s.factor, mixed))


def yarn_ramp(rotary_dim: int, theta: float, s: RopeScaling) -> torch.Tensor:
    """YaRN's ramp r_i in [0, 1] over the frequencies i = 0 .. d/2 - 1 (d = rotary_dim): 0 for the
    dimensions that rotate more than beta_fast times over the original context L (kept), 1 for those
    that rotate fewer than beta_slow times (interpolated), linear in i between. The dimension that
    rotates n times over L is  dim(n) = d ln(L / (2 pi n)) / (2 ln theta)  (from L theta^(-2i/d) = 2 pi n);
    the bounds are lo = floor(dim(beta_fast)), hi = ceil(dim(beta_slow)) (exact without truncate),
    clamped to [0, d - 1]; r_i = clamp((i - lo) / (hi - lo), 0, 1) (hi += 0.001 where hi == lo)."""
    def dim(n: float) -> float:
        return rotary_dim * math.log(s.original_max / (n * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = dim(s.beta_fast), dim(s.beta_slow)
    if s.truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, rotary_dim - 1)
    if lo == hi:
        hi += 0.001
    return torch.clamp((torch.arange(rotary_dim // 2, dtype=torch.float) - lo) / (hi - lo), 0, 1)


def yarn_inv_freq(rotary_dim: int, theta: float, s: RopeScaling) -> torch.Tensor:
    """YaRN (Peng et al. 2023, "NTK-by-parts"): f_i' = (1 - r_i) f_i + r_i f_i / factor, r = `yarn_ramp`."""
    inv_freq, ramp = plain_inv_freq(rotary_dim, theta), yarn_ramp(rotary_dim, theta, s)
    return inv_freq / s.factor * ramp + inv_freq * (1 - ramp)


def attention_factor(s: RopeScaling | None) -> float:
    """What cos and sin are multiplied by: YaRN's attention temperature sqrt(1/t) = 0.1 ln(factor) + 1
    (1 for factor <= 1), or the config's explicit attention_factor; 1 for llama3 and plain RoPE.
    Scaling both q and k by it scales the attention logits by its square."""
    if s is None or s.rope_type != "yarn":
        return 1.0
    if s.attention_factor is not None:
        return s.attention_factor
    return 1.0 if s.factor <= 1 else 0.1 * math.log(s.factor) + 1.0


def scaled_inv_freq(rotary_dim: int, theta: float, s: RopeScaling | None) -> torch.Tensor:
    """The inverse frequencies of a RoPE layer: plain, llama3 or yarn (`RopeScaling`)."""
    if s is None:
        return plain_inv_freq(rotary_dim, theta)
    if s.rope_type == "llama3":
        return llama3_inv_freq(plain_inv_freq(rotary_dim, theta), s)
    return yarn_inv_freq(rotary_dim, theta, s)


def rope_angles(positions: torch.Tensor, rotary_dim: int, theta: float,
                scaling: RopeScaling | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(m cos, m sin) of the angles pos * f_i, each [T, rotary_dim/2]: f = `scaled_inv_freq`,
    m = `attention_factor` (1 without YaRN)."""
    angles = positions.float()[:, None] * scaled_inv_freq(rotary_dim, theta, scaling)[None, :]
    m = attention_factor(scaling)
    return (angles.cos(), angles.sin()) if m == 1.0 else (angles.cos() * m, angles.sin() * m)


def apply_rope(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], interleaved: bool) -> torch.Tensor:
    """Rotate the first 2*cos.shape[-1] dims of x [heads, T, d]; the rest pass through.
    rotate-half pairs dim i with i + r/2; interleaved pairs 2i with 2i+1."""
    cos, sin = rope
    r = 2 * cos.shape[-1]
    rot, rest = x[..., :r].float(), x[..., r:]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    else:
        a, b = rot[..., : r // 2], rot[..., r // 2 :]
        out = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    return torch.cat((out.to(x.dtype), rest), dim=-1) if rest.shape[-1] else out.to(x.dtype)


class Weights(dict[str, torch.Tensor]):
    """A checkpoint's tensors under their names in model.safetensors, and nothing else. The
    fused projections built from them are cached beside the mapping, once per weight set (a
    Model built on the same Weights shares them); so the tensors are not to be replaced once
    loaded: a fused copy would not follow.

    With a compute `dtype` (a memory-mapped checkpoint, harness/engine/mapped.py), the tensors stay
    as stored - the file's pages, in its dtype - and each read returns them converted to `dtype`
    for the one operation that asks (bf16 / fp16 -> fp32 is exact, so the math is the same as on
    an fp32 copy); the fused projections are then built per call and never kept: one resident copy
    of the weights, the file's, plus one projection's worth at a time."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None):
        super().__init__(tensors)
        self.dtype = dtype
        self._fused: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def _as(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.dtype is None or not tensor.is_floating_point() or tensor.dtype == self.dtype:
            return tensor
        return tensor.to(self.dtype)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._as(super().__getitem__(name))

    def get(self, name: str, default: torch.Tensor | None = None) -> torch.Tensor | None:  # type: ignore[override]
        value = super().get(name)
        return default if value is None else self._as(value)

    def fused(self, prefix: str, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """([W_a; W_b; ...], [b_a; b_b; ...]): the projections' weights and biases stacked by rows
        (a missing bias as zeros), so that one matmul does len(names) small ones:
            x [W_a; W_b]^T + [b_a; b_b] = [x W_a^T + b_a, x W_b^T + b_b]"""
        key = prefix + "+".join(names)
        if key in self._fused:
            return self._fused[key]
        stored = [dict.__getitem__(self, prefix + n + ".weight") for n in names]
        biases = [self.get(prefix + n + ".bias") for n in names]
        bias = None
        if any(b is not None for b in biases):
            bias = torch.cat([b if b is not None else self._as(w.new_zeros(w.shape[0]))
                              for w, b in zip(stored, biases, strict=True)])
        if self.dtype is None:
            self._fused[key] = torch.cat(stored), bias
            return self._fused[key]
        return self._converted(stored), bias

    def matrix(self, name: str) -> torch.Tensor:
        """`self[name]` for a weight one F.linear uses at once: under a compute dtype, converted into
        the scratch buffer (valid until the next `matrix` / `fused` call)."""
        stored = dict.__getitem__(self, name)
        if self.dtype is None or stored.dtype == self.dtype or stored.dim() != 2:
            return self[name]
        return self._converted([stored])

    def _converted(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The parts stacked by rows and converted to `dtype` in one reused buffer: a fresh tensor
        per operation costs its page faults (8x the copy itself for a 64 MB projection, measured)."""
        rows, cols = sum(p.shape[0] for p in parts), parts[0].shape[1]
        if getattr(self, "_scratch", None) is None or self._scratch.numel() < rows * cols:
            self._scratch = torch.empty(rows * cols, dtype=self.dtype)
        out = self._scratch[: rows * cols].view(rows, cols)
        start = 0
        for part in parts:
            out[start:start + part.shape[0]].copy_(part)
            start += part.shape[0]
        return out


def linear(x: torch.Tensor, w: Weights, name: str) -> torch.Tensor:
    return F.linear(x, w.matrix(name + ".weight"), w.get(name + ".bias"))


def norm(x: torch.Tensor, w: Weights, name: str, cfg: Config) -> torch.Tensor:
    """rms_norm with the checkpoint's weight applied as (norm_offset + w) (Gemma: 1 + w)."""
    weight = w[name]
    return rms_norm(x, weight + cfg.norm_offset if cfg.norm_offset else weight, cfg.eps)


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(x / cap): smooth, monotone, bounded by +-cap (identity when cap is None)."""
    return x if cap is None else torch.tanh(x / cap) * cap


def mlp(x: torch.Tensor, w: Weights, prefix: str, act: str = "silu") -> torch.Tensor:
    gate, up = F.linear(x, *w.fused(prefix, ("gate_proj", "up_proj"))).chunk(2, dim=-1)
    gate = F.silu(gate) if act == "silu" else F.gelu(gate, approximate="tanh")
    return linear(gate * up, w, prefix + "down_proj")


def moe(x: torch.Tensor, w: Weights, prefix: str, cfg: Config) -> torch.Tensor:
    """Shared expert + top-k routed experts. Router: s = sigmoid(x W_r^T); experts chosen by
    top-k of (s + correction bias); weights s_topk / sum(s_topk) * scaling (single group)."""
    scores = torch.sigmoid(F.linear(x.float(), w[prefix + "gate.weight"].float()))
    choice = scores + w[prefix + "gate.e_score_correction_bias"]
    top = torch.topk(choice, cfg.experts_per_token, dim=-1).indices
    weights = scores.gather(-1, top)
    if cfg.norm_topk_prob:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    weights = (weights * cfg.routed_scaling_factor).to(x.dtype)
    out = mlp(x, w, prefix + "shared_experts.")
    for slot in range(cfg.experts_per_token):
        for e in top[:, slot].unique().tolist():
            rows = top[:, slot] == e
            out[rows] += weights[rows, slot, None] * mlp(x[rows], w, f"{prefix}experts.{e}.")
    return out


def attention(x: torch.Tensor, positions: torch.Tensor, w: Weights, prefix: str, cfg: Config,
              layer: int, kind: str, cache: LayerCache | None, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    t, hq, hkv = x.shape[0], cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    gated = 2 if cfg.attn_output_gate else 1
    q, k, v = F.linear(x, *w.fused(prefix, ("q_proj", "k_proj", "v_proj"))).split((gated * hq, hkv, hkv), dim=-1)
    if cfg.attn_output_gate:  # per head: [q_h | gate_h]
        q, gate = q.reshape(t, cfg.num_heads, 2 * cfg.head_dim).chunk(2, dim=-1)
        gate = gate.reshape(t, hq)
    q = q.reshape(t, cfg.num_heads, cfg.head_dim).transpose(0, 1)
    k = k.reshape(t, cfg.num_kv_heads, cfg.head_dim).transpose(0, 1)
    v = v.reshape(t, cfg.num_kv_heads, cfg.head_dim).transpose(0, 1)
    if cfg.qk_norm:  # per head, over head_dim, before RoPE
        q, k = norm(q, w, prefix + "q_norm.weight", cfg), norm(k, w, prefix + "k_norm.weight", cfg)
    if cfg.rope_layers[layer]:  # q and k heads rotated together
        q, k = apply_rope(torch.cat((q, k)), rope, cfg.interleaved_rope).split((cfg.num_heads, cfg.num_kv_heads))
        if cfg.qk_l2_norm:
            q, k = rms_norm(q, None, cfg.eps), rms_norm(k, None, cfg.eps)
    elif cfg.temperature_tuning:
        scale = 1.0 + cfg.attn_scale * torch.log1p(torch.floor((positions.float() + 1.0) / cfg.floor_scale))
        q = (q * scale[None, :, None]).to(q.dtype)
    if cache is not None:
        k, v, k_pos = cache.update(k, v, positions)
    else:
        k_pos = positions
    size = cfg.sliding_window if kind == "sliding_attention" else cfg.chunk_size
    # one query over a full-attention cache sees every key it holds (all are at or before it)
    mask = None if t == 1 and kind == "full_attention" else visible(kind, positions, k_pos, size)
    scale = 1.0 / math.sqrt(cfg.attn_scale_dim or cfg.head_dim)
    if cfg.attn_softcap is not None:
        out = capped_attention(q, k, v, mask, scale, cfg.attn_softcap)
    else:  # softmax(q k^T / sqrt(d) + mask) v, each query head reading kv head (head // groups)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                             enable_gqa=cfg.num_heads != cfg.num_kv_heads)
    out = out.transpose(0, 1).reshape(t, -1)
    if cfg.attn_output_gate:
        out = out * torch.sigmoid(gate)
    return linear(out, w, prefix + "o_proj")


def capped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                     scale: float, cap: float) -> torch.Tensor:
    """softmax(cap * tanh(q k^T * scale / cap) + mask) v, the softmax in fp32 (Gemma 2): the cap
    applies to the scores before the mask, so SDPA (which has no cap) cannot compute it."""
    groups = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(groups, dim=0), v.repeat_interleave(groups, dim=0)
    scores = softcap(torch.matmul(q, k.transpose(-1, -2)) * scale, cap)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores.float(), dim=-1).to(q.dtype), v)


def linear_attention(x: torch.Tensor, w: Weights, prefix: str, cfg: Config, cache: RecurrentCache | None) -> torch.Tensor:
    """The gated delta-rule mixer; the cache receives the state after every token (for rollback)."""
    state = cache.state if cache is not None and cache.state is not None else initial_state(cfg.linear, x.dtype)
    out, states = gated_delta_net(x, w, prefix, cfg.linear, state)
    if cache is not None:
        cache.update(states)
    return out


def block(x: torch.Tensor, positions: torch.Tensor, w: Weights, prefix: str, cfg: Config,
          layer: int, kind: str, cache: LayerCache | RecurrentCache | None, use_moe: bool = False,
          rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    mlp_prefix = prefix + ("feed_forward." if cfg.model_type.startswith("llama4") else "mlp.")
    h = norm(x, w, prefix + "input_layernorm.weight", cfg)
    if kind == LINEAR:
        a = linear_attention(h, w, prefix + "linear_attn.", cfg, cache)
    else:
        rope = rope if rope is not None else rope_angles(positions, cfg.rotary_dim, cfg.theta(kind), cfg.rope_scaling)
        a = attention(h, positions, w, prefix + "self_attn.", cfg, layer, kind, cache, rope)
    if cfg.sandwich_norms:  # Gemma 2: every sublayer's output is normed before its residual add
        x = x + norm(a, w, prefix + "post_attention_layernorm.weight", cfg)
        h = mlp(norm(x, w, prefix + "pre_feedforward_layernorm.weight", cfg), w, mlp_prefix, cfg.mlp_act)
        return x + norm(h, w, prefix + "post_feedforward_layernorm.weight", cfg)
    x = x + a
    h = norm(x, w, prefix + "post_attention_layernorm.weight", cfg)
    return x + (moe(h, w, mlp_prefix, cfg) if use_moe else mlp(h, w, mlp_prefix, cfg.mlp_act))


# ----------------------------------------------------------------------------- the model

@dataclass
class Output:
    logits: torch.Tensor  # [T, V] fp32
    hidden: torch.Tensor  # [T, H] final (normed) hidden states, the input of lm_head and of MTP heads


class Model:
    """Weights + config; `forward` runs tokens at given positions through per-layer caches."""

    def __init__(self, cfg: Config, weights: Mapping[str, torch.Tensor], path: Path | None = None):
        self.cfg, self.path = cfg, path
        self.w = weights if isinstance(weights, Weights) else Weights(weights)  # a Weights shares its fused cache
        prefix = "model.language_model." if any(k.startswith("model.language_model.") for k in weights) else "model."
        self.prefix = prefix

    @classmethod
    def load(cls, directory: str | Path, dtype: torch.dtype = torch.float32, mapped: bool = False) -> Model:
        """The checkpoint in `directory`: its weights read and converted to `dtype` (the zoo's), or
        (`mapped`) memory-mapped as stored and converted per operation (`Weights`; a user's
        checkpoint, whose single resident copy is the file's pages; sharded files too)."""
        from .mapped import mapped_checkpoint, weight_files

        directory = Path(directory)
        names = ["config.json"] + ([] if mapped and weight_files(directory) else ["model.safetensors"])
        for name in names:
            if not (directory / name).is_file():
                raise FileNotFoundError(f"{directory / name} is missing; rebuild the zoo: python -m harness.zoo build")
        cfg = Config.from_dict(json.loads((directory / "config.json").read_text()))
        if mapped:
            return cls(cfg, Weights(mapped_checkpoint(directory), dtype), directory)
        weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(directory / "model.safetensors").items()}
        return cls(cfg, weights, directory)

    def truncated(self, layers: int) -> Model:
        """The same weights run through their first `layers` layers, then the final norm and the head:
        an early exit (LayerSkip's drafter; drafters.py `EarlyExitDrafter`)."""
        if not 0 < layers <= self.cfg.num_layers:
            raise ValueError(f"an early exit after {layers} layers of {self.cfg.num_layers}")
        cfg = replace(self.cfg, num_layers=layers, layer_types=self.cfg.layer_types[:layers],
                      rope_layers=self.cfg.rope_layers[:layers])
        return Model(cfg, self.w, self.path)

    def new_caches(self, static_max_len: int | None = None, slack: int = 0) -> list[LayerCache | RecurrentCache]:
        return build_caches(list(self.cfg.layer_types), self.cfg.sliding_window, self.cfg.chunk_size,
                            static_max_len=static_max_len, slack=slack)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        name = self.prefix + "embed_tokens.weight"
        if self.w.dtype is not None:  # the rows looked up as stored, then converted (the same values)
            x = self.w._as(F.embedding(tokens, dict.__getitem__(self.w, name)))
        else:
            x = F.embedding(tokens, self.w[name])
        # Gemma: the scale is rounded to the embeddings' dtype before the product
        return x * torch.tensor(self.cfg.embed_scale, dtype=x.dtype) if self.cfg.embed_scale != 1.0 else x

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        name = "lm_head.weight" if "lm_head.weight" in self.w else self.prefix + "embed_tokens.weight"
        return softcap(F.linear(hidden, self.w.matrix(name)).float(), self.cfg.final_softcap)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor,
                caches: list[LayerCache | RecurrentCache] | None) -> Output:
        cfg, x = self.cfg, self.embed(tokens)
        ropes = {t: rope_angles(positions, cfg.rotary_dim, t, cfg.rope_scaling)
                 for t in {cfg.theta(k) for k in cfg.layer_types}}
        for i in range(cfg.num_layers):
            kind = cfg.layer_types[i]
            x = block(x, positions, self.w, f"{self.prefix}layers.{i}.", cfg, i, kind,
                      caches[i] if caches is not None else None,
                      use_moe=cfg.num_experts > 0 and i >= cfg.first_moe_layer, rope=ropes[cfg.theta(kind)])
        hidden = norm(x, self.w, self.prefix + "norm.weight", cfg)
        return Output(self.head(hidden), hidden)
