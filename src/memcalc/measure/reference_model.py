"""memcalc's reference decoder: GPT-2 and Llama families in one readable file (nanoGPT style).

Written so that autograd saves *the same tensors* as the Hugging Face implementation of the same
config (transformers 5.x ``modeling_gpt2.py`` / ``modeling_llama.py``): the same op sequence,
dtypes and views. That is what lets a measurement of this model check memcalc's op graph
(``graph/lower.py``) tensor by tensor, without transformers installed. Where HF's choice of op
changes what is saved, the line says so.

Recompute and offload are applied from outside (``measure/strategies.py``) by wrapping the
entries of ``Transformer.h``, exactly as they are applied to the HF model's layer list.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from memcalc.errors import MemcalcError
from memcalc.spec.model import Activation, Family, ModelSpec

IGNORE_INDEX = -100  # label value cross_entropy skips (HF pads the shifted labels with it)


@dataclass(frozen=True)
class Config:
    """The sizes of one model, resolved from a ModelSpec."""

    family: str  # "gpt2" | "llama"
    vocab_size: int
    n_embd: int  # h
    n_layer: int
    n_head: int
    n_kv_head: int
    mlp_size: int
    max_positions: int
    activation: Activation
    tied: bool
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool
    embd_pdrop: float
    attn_pdrop: float
    resid_pdrop: float
    attention: str = "sdpa"  # "eager" (matmul + softmax + matmul) | "sdpa"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @classmethod
    def from_spec(cls, spec: ModelSpec, attention: str) -> Config:
        if spec.family not in (Family.gpt2, Family.llama, Family.mistral, Family.qwen2):
            raise MemcalcError(
                "--framework reference: memcalc's reference model runs GPT-2 and Llama-style "
                "models; "
                f"{spec.name} ({spec.family.value}) needs --framework hf"
            )
        return cls(
            family="gpt2" if spec.family is Family.gpt2 else "llama",
            vocab_size=spec.vocab_size,
            n_embd=spec.hidden_size,
            n_layer=spec.num_layers,
            n_head=spec.num_heads,
            n_kv_head=spec.kv_heads,
            mlp_size=spec.mlp_size,
            max_positions=spec.max_position_embeddings,
            activation=spec.activation,
            tied=spec.tie_embeddings,
            qkv_bias=spec.qkv_bias,
            out_bias=spec.out_bias,
            mlp_bias=spec.mlp_bias,
            embd_pdrop=spec.embedding_dropout,
            attn_pdrop=spec.attention_dropout,
            resid_pdrop=spec.residual_dropout,
            attention=attention,
            norm_eps=1e-5 if spec.family is Family.gpt2 else 1e-6,
        )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# ---------------------------------------------------------------------------------------------
# Small pieces


class RMSNorm(nn.Module):
    """Llama RMSNorm, as HF writes it: upcast to fp32, so ``pow`` saves an fp32 copy of x,
    ``rsqrt`` its fp32 output (one per row) and ``weight * y.to(p)`` the p copy of y."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)  # (B, T, C) fp32 copy unless already fp32
        variance = x.pow(2).mean(-1, keepdim=True)  # (B, T, 1)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """HF NewGELUActivation (GPT-2's default), Python ops: saves x, tanh, 0.5*x, 1+tanh."""
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
    return 0.5 * x * (1.0 + torch.tanh(inner))


ACTIVATIONS: dict[Activation, Callable[[torch.Tensor], torch.Tensor]] = {
    Activation.gelu_new: gelu_new,
    Activation.gelu_pytorch_tanh: lambda x: F.gelu(x, approximate="tanh"),
    Activation.gelu: F.gelu,
    Activation.silu: F.silu,
    Activation.relu: F.relu,
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)  # neg and cat save nothing


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, nkv, T, hs) -> (B, nkv*n_rep, T, hs); the reshape of the expanded view copies."""
    if n_rep == 1:
        return x
    b, nkv, t, hs = x.shape
    return x[:, :, None, :, :].expand(b, nkv, n_rep, t, hs).reshape(b, nkv * n_rep, t, hs)


# ---------------------------------------------------------------------------------------------
# Attention and MLP


class CausalSelfAttention(nn.Module):
    """GPT-2: one fused qkv projection (``c_attn``); Llama: q/k/v projections, RoPE, GQA."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        h, kv = cfg.n_embd, cfg.n_kv_head * cfg.head_dim
        if cfg.family == "gpt2":
            self.c_attn = nn.Linear(h, 3 * h, bias=cfg.qkv_bias)
        else:
            self.q_proj = nn.Linear(h, h, bias=cfg.qkv_bias)
            self.k_proj = nn.Linear(h, kv, bias=cfg.qkv_bias)
            self.v_proj = nn.Linear(h, kv, bias=cfg.qkv_bias)
        self.c_proj = nn.Linear(h, h, bias=cfg.out_bias)
        self.scale = cfg.head_dim**-0.5

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> torch.Tensor:
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)
        cfg, hs = self.cfg, self.cfg.head_dim
        if cfg.family == "gpt2":
            q, k, v = self.c_attn(x).split(C, dim=2)  # three views of one (B, T, 3C) tensor
            q = q.view(B, T, -1, hs).transpose(1, 2)  # (B, nh, T, hs)
            k = k.view(B, T, -1, hs).transpose(1, 2)  # (B, nh, T, hs)
            v = v.view(B, T, -1, hs).transpose(1, 2)  # (B, nh, T, hs)
        else:
            q = self.q_proj(x).view(B, T, -1, hs).transpose(1, 2)  # (B, nh, T, hs)
            k = self.k_proj(x).view(B, T, -1, hs).transpose(1, 2)  # (B, nkv, T, hs)
            v = self.v_proj(x).view(B, T, -1, hs).transpose(1, 2)  # (B, nkv, T, hs)
            assert rope is not None
            cos, sin = (t.unsqueeze(1) for t in rope)  # (1, 1, T, hs)
            q = (q * cos) + (rotate_half(q) * sin)  # the muls save cos and sin (no grad)
            k = (k * cos) + (rotate_half(k) * sin)
        y = self.core(q, k, v, mask=mask)  # (B, T, nh, hs)
        y = y.reshape(B, T, -1).contiguous()  # (B, T, C), or (B, T, C/tp) on a tensor-parallel rank
        return self.c_proj(y)

    def core(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The attention core, q/k/v (B, nh|nkv, T, hs) -> (B, T, nh, hs): what selective
        recompute replays (a strategy may replace this method on the instance)."""
        cfg = self.cfg
        B, _, T, hs = q.size()
        n_rep = cfg.n_head // cfg.n_kv_head
        p_drop = cfg.attn_pdrop if self.training else 0.0
        if cfg.attention == "eager":
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, nh, T, hs)
            att = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # (B, nh, T, T)
            if mask is not None:
                att = att + mask  # additive causal mask; add saves nothing
            if cfg.family == "gpt2":
                att = F.softmax(att, dim=-1).type(v.dtype)  # saves probs in p
            else:
                att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)  # fp32 + p copy
            att = F.dropout(att, p=p_drop, training=self.training)  # bool mask, new probs
            y = torch.matmul(att, v).transpose(1, 2)  # (B, T, nh, hs)
            return y.contiguous() if cfg.family == "llama" else y
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            dropout_p=p_drop,
            scale=self.scale,
            is_causal=True,
            enable_gqa=n_rep > 1,
        )  # (B, nh, T, hs); saves q, k, v, out and the fp32 logsumexp
        return y.reshape(B, -1, T, hs).transpose(1, 2).contiguous()  # a view: (B, T, nh, hs)


class MLP(nn.Module):
    """GPT-2: c_fc -> activation -> c_proj; Llama: down(silu(gate(x)) * up(x)) (SwiGLU)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        h, m, bias = cfg.n_embd, cfg.mlp_size, cfg.mlp_bias
        self.gated = cfg.family == "llama"
        self.act = ACTIVATIONS[cfg.activation]
        if self.gated:
            self.gate_proj = nn.Linear(h, m, bias=bias)
            self.up_proj = nn.Linear(h, m, bias=bias)
            self.down_proj = nn.Linear(m, h, bias=bias)
        else:
            self.c_fc = nn.Linear(h, m, bias=bias)
            self.c_proj = nn.Linear(m, h, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))  # (B, T, C)
        return self.c_proj(self.act(self.c_fc(x)))  # (B, T, C)


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.family == "gpt2":
            self.ln_1: nn.Module = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
            self.ln_2: nn.Module = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        else:
            self.ln_1 = RMSNorm(cfg.n_embd, cfg.norm_eps)
            self.ln_2 = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = MLP(cfg)
        self.p_resid = cfg.resid_pdrop

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
        position_ids: torch.Tensor | None = None,  # unused; HF Llama layers receive it too
    ) -> torch.Tensor:
        x = F.dropout(self.attn(self.ln_1(x), mask, rope), self.p_resid, self.training) + x
        return F.dropout(self.mlp(self.ln_2(x)), self.p_resid, self.training) + x


# ---------------------------------------------------------------------------------------------
# The model


class Transformer(nn.Module):
    """Embeddings -> blocks -> final norm -> LM head -> HF's causal-LM loss."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        if cfg.family == "gpt2":
            self.wpe = nn.Embedding(cfg.max_positions, cfg.n_embd)
            self.ln_f: nn.Module = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        else:
            self.ln_f = RMSNorm(cfg.n_embd, cfg.norm_eps)
            inv_freq = 1.0 / (
                cfg.rope_theta
                ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float) / cfg.head_dim)
            )
            self.register_buffer("inv_freq", inv_freq, persistent=False)  # (hs/2,)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.lm_head = None if cfg.tied else nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def _rope(
        self, T: int, dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        position_ids = torch.arange(T, device=device).unsqueeze(0)  # (1, T)
        freqs = position_ids[..., None].float() * self.inv_freq.float()  # (1, T, hs/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (1, T, hs)
        return (emb.cos() * 1.0).to(dtype), (emb.sin() * 1.0).to(dtype)  # new (1, T, hs) each

    def _causal_mask(
        self, B: int, T: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """HF's eager mask: (B, 1, T, T) in the activation dtype, 0 or dtype-min."""
        mask = torch.full((T, T), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
        return mask[None, None].expand(B, 1, T, T).contiguous()

    def forward(self, idx: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        B, T = idx.size()
        cfg = self.cfg
        dtype = self.wte.weight.dtype
        x = self.wte(idx)  # (B, T, C); embedding saves idx
        rope = mask = None
        pos = torch.arange(T, device=idx.device).unsqueeze(0)  # (1, T)
        if cfg.family == "gpt2":
            x = F.dropout(x + self.wpe(pos), cfg.embd_pdrop, self.training)  # wpe saves pos
        else:
            rope = self._rope(T, dtype, idx.device)
        if cfg.attention == "eager":
            mask = self._causal_mask(B, T, dtype, idx.device)
        for block in self.h:
            # Call blocks as HF does: GPT-2 passes the causal mask positionally, Llama passes
            # mask and RoPE by keyword. torch.utils.checkpoint saves the positional tensors, so
            # this decides what a checkpointed block holds (strategies wrap the entries of h).
            if cfg.family == "gpt2":
                x = block(x, mask)
            else:
                x = block(x, mask=mask, rope=rope, position_ids=pos)
        x = self.ln_f(x)
        # (B, T, V); the untied head is called as a module, so a tensor-parallel plan can
        # shard it (the same F.linear either way)
        logits = F.linear(x, self.wte.weight) if self.lm_head is None else self.lm_head(x)
        return causal_lm_loss(logits, labels, cfg.vocab_size)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """HF ForCausalLMLoss: fp32 logits, labels padded by one and shifted left, mean CE.

    ``log_softmax`` saves its fp32 (B*T, V) output; ``nll_loss`` the shifted labels (a copy when
    B > 1, a view of the padded (1, T+1) tensor when B == 1) and a scalar total_weight.
    """
    logits = logits.float()
    labels = F.pad(labels, (0, 1), value=IGNORE_INDEX)
    shift_labels = labels[..., 1:].contiguous()
    return F.cross_entropy(
        logits.view(-1, vocab_size), shift_labels.view(-1), ignore_index=IGNORE_INDEX
    )
