"""FIRE with a hand-written backward, as a fused kernel has one: the MLP's input
x = ψ(|i − j|) / (ψ(max(i, L)) + ε) computed by a ``torch.autograd.Function`` whose backward
gives ∂/∂c and ∂/∂m by hand, the MLP through autograd. The forward is right in every class;
each subclass makes one mistake in the backward alone, so only the gradient cases can see it.
Driven through ``adapters/appendix_e.py`` by ``tests/wild_torch.rs``."""

import torch
import torch.nn as nn


class Ratio(torch.autograd.Function):
    """x[i, j] for positions 0..T−1 from c and m (L_init and ε constants)."""

    @staticmethod
    def forward(ctx, c, m, l_init, T, eps, mistake):
        p = torch.arange(T, dtype=c.dtype)
        a = (p[:, None] - p[None, :]).abs()
        L = (m * l_init).abs()
        n = torch.maximum(p, L)
        num = torch.log(c.abs() * a + 1)
        den = torch.log(c.abs() * n + 1) + eps
        ctx.save_for_backward(c, m, l_init, p, a, n, num, den)
        ctx.eps, ctx.mistake = eps, mistake
        return num / den[:, None]

    @staticmethod
    def backward(ctx, g):
        c, m, l_init, p, a, n, num, den = ctx.saved_tensors
        if ctx.mistake == "no-eps":
            den = den - ctx.eps
        sign_c = torch.ones_like(c) if ctx.mistake == "no-sign-c" else torch.sign(c)
        g_num = g / den[:, None]
        g_den = -(g * num / den[:, None] ** 2).sum(1)
        d_num = sign_c * a / (c.abs() * a + 1)
        d_den = sign_c * n / (c.abs() * n + 1)
        g_c = (g_num * d_num).sum() + (g_den * d_den).sum()
        L = (m * l_init).abs()
        # ∂max(i, L)/∂L: 1 where L > i (the spec takes ½ at a tie i = L [grad.kinks], which
        # the fire-grad/vjp cases do not hold).
        branch = (p > L) if ctx.mistake == "wrong-branch" else (L > p)
        g_L = (g_den * c.abs() / (c.abs() * n + 1) * branch.to(g.dtype)).sum()
        g_m = g_L * torch.sign(m * l_init) * l_init
        return g_c, g_m, None, None, None, None


class HandWrittenBackward(nn.Module):
    """Correct."""

    mistake = None

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.tensor(init_c))
        self.init_L = nn.Parameter(torch.tensor(init_L), requires_grad=False)
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def forward(self, x):
        ratio = Ratio.apply(self.c, self.L_multiplier, self.init_L, x.size(2), self.eps, self.mistake)
        return self.mlp(ratio.to(x.dtype).unsqueeze(-1)).permute(2, 0, 1)[None]


class BackwardWithoutSignOfC(HandWrittenBackward):
    """∂|c|/∂c taken as 1: right for c > 0, the gradient of c negated for c < 0."""

    mistake = "no-sign-c"


class BackwardWithoutEps(HandWrittenBackward):
    """The backward's normaliser without ε: off by about ε/ψ, which only a large ε shows."""

    mistake = "no-eps"


class BackwardOnTheWrongBranch(HandWrittenBackward):
    """L's gradient sent through max(i, L)'s other branch (where i > L): none where every query
    is below L."""

    mistake = "wrong-branch"
