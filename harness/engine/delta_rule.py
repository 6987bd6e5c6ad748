"""Gated delta-rule linear attention (Gated DeltaNet: Yang, Kautz, Hatamizadeh 2024), the token
mixer of Qwen3-Next / Qwen3.5's `linear_attention` layers, in its recurrent form.

Per layer and token t (batch 1), from the hidden state x_t:

    u_t        = W_qkv x_t                                  (channels: q | k | v)
    c_t        = silu(sum_{j<K} w_j * u_{t-K+1+j})           depthwise causal conv, kernel K
    q, k, v    = split(c_t);  q, k per key head, v per value head (key heads repeat to value heads)
    q          = l2norm(q) / sqrt(d_k);   k = l2norm(k)      l2norm(x) = x / sqrt(|x|^2 + 1e-6)
    beta_t     = sigmoid(W_b x_t)                             per value head, the write strength
    g_t        = -exp(A_log) * softplus(W_a x_t + dt_bias)    per value head, log of the decay (< 0)

    S_t        = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T
                                                              S: [d_k, d_v] per value head, S_0 = 0
    o_t        = S_t^T q_t
    y_t        = W_out( rmsnorm(o_t) * w_norm * silu(W_z x_t) )   the norm per value head

The delta rule writes v_t at key k_t after first erasing what the decayed memory already
returns for k_t, so S stays a bounded associative memory. Everything a later token needs is
the state (the last K-1 conv inputs, S): that fixed-size pair is what a `RecurrentCache` holds.
Because a state cannot be "cropped" like a KV cache, speculative decoding rolls back by
snapshot: `gated_delta_net` returns the state after every token it processed, and the cache
keeps the newest ones (see cache.RecurrentCache). transformers computes the same recurrence
(chunked over 64-token blocks for prefill, one step per token when decoding) in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LinearShape:
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    eps: float

    @property
    def channels(self) -> int:
        """Conv channels: q and k (key_heads * key_dim each) and v (value_heads * value_dim)."""
        return 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim


@dataclass(frozen=True)
class RecurrentState:
    conv: torch.Tensor  # [K - 1, channels]: the newest conv inputs (zeros before the first token)
    memory: torch.Tensor  # [value_heads, key_dim, value_dim] fp32: S

    def nbytes(self) -> int:
        return self.conv.nbytes + self.memory.nbytes


def initial_state(shape: LinearShape, dtype: torch.dtype) -> RecurrentState:
    return RecurrentState(torch.zeros(shape.conv_kernel - 1, shape.channels, dtype=dtype),
                          torch.zeros(shape.value_heads, shape.key_dim, shape.value_dim))


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
               memory: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The gated delta rule over T tokens from `memory` (fp32 throughout): q, k [T, H, d_k]
    (already normalised), v [T, H, d_v], g, beta [T, H]. Returns o [T, H, d_v] and S_t after
    each token:  S_t = e^{g_t} S_{t-1} + k_t (beta_t (v_t - e^{g_t} S_{t-1}^T k_t))^T,  o_t = S_t^T q_t."""
    out, memories = torch.empty(v.shape), []
    for i in range(q.shape[0]):
        decayed = memory * g[i].exp()[:, None, None]
        delta = beta[i, :, None] * (v[i] - torch.einsum("hkv,hk->hv", decayed, k[i]))
        memory = decayed + k[i][:, :, None] * delta[:, None, :]
        out[i] = torch.einsum("hkv,hk->hv", memory, q[i])
        memories.append(memory)
    return out, memories


def gated_delta_net(x: torch.Tensor, w, prefix: str, shape: LinearShape,
                    state: RecurrentState) -> tuple[torch.Tensor, list[RecurrentState]]:
    """y [T, hidden] for x [T, hidden] after `state`, and the state after each of the T tokens."""
    t, kh, vh, dk, dv = x.shape[0], shape.key_heads, shape.value_heads, shape.key_dim, shape.value_dim
    u = F.linear(x, w[prefix + "in_proj_qkv.weight"])  # [T, C]
    padded = torch.cat((state.conv.to(u.dtype), u))  # [K - 1 + T, C]
    kernel = w[prefix + "conv1d.weight"]  # [C, 1, K]
    c = F.silu(F.conv1d(padded.T[None].to(kernel.dtype), kernel, groups=shape.channels)[0].T).to(u.dtype)  # [T, C]
    q, k, v = c.split((kh * dk, kh * dk, vh * dv), dim=-1)
    q = q.reshape(t, kh, dk).repeat_interleave(vh // kh, dim=1).float()
    k = k.reshape(t, kh, dk).repeat_interleave(vh // kh, dim=1).float()
    v = v.reshape(t, vh, dv).float()
    q, k = l2norm(q) / dk ** 0.5, l2norm(k)
    beta = torch.sigmoid(F.linear(x, w[prefix + "in_proj_b.weight"]).float())  # [T, vh]
    g = -w[prefix + "A_log"].float().exp() * F.softplus(F.linear(x, w[prefix + "in_proj_a.weight"]).float()
                                                         + w[prefix + "dt_bias"])
    out, memories = recurrence(q, k, v, g, beta, state.memory)
    states = [RecurrentState(padded[i + 1: i + shape.conv_kernel], m) for i, m in enumerate(memories)]
    o = out.to(x.dtype)
    normed = o.float() * torch.rsqrt(o.float().pow(2).mean(-1, keepdim=True) + shape.eps)
    z = F.linear(x, w[prefix + "in_proj_z.weight"]).reshape(t, vh, dv)
    y = (w[prefix + "norm.weight"] * normed.to(x.dtype)) * F.silu(z.float())
    return F.linear(y.to(x.dtype).reshape(t, vh * dv), w[prefix + "out_proj.weight"]), states
