"""The gated delta rule of KDA (docs/MODEL.md 4.3 step 5) over a sequence, in two forms that compute
the same function: the per-token recurrence of the specification, and a chunked form for training.

Shapes: q, k [B, T, H, K] (normalised, q scaled), v [B, T, H, V], g [B, T, H, K] the log decay
(g <= 0; exp(g) multiplies the state's key rows), beta [B, T, H], state S [B, H, K, V].
Per head and token t, in this order:
    S = diag(exp(g_t)) S ;  pred = S^T k_t ;  S = S + beta_t k_t (v_t - pred)^T ;  o_t = S^T q_t

Chunked form. Within a chunk of C tokens that starts from state S0, let G_t = g_1 + ... + g_t
(cumulative, per key channel), Q~ = q * exp(G), K~ = k * exp(G) and Kbar = k * exp(G_C - G).
Writing each update as S_t = D_t S_{t-1} + k_t u_t^T, the pseudo-values
u_t = beta_t (v_t - (D_t S_{t-1})^T k_t) satisfy the unit lower-triangular system
    (I + diag(beta) L) U = diag(beta) (V - K~ S0),   L[t, s] = sum_i k_t,i k_s,i exp(G_t,i - G_s,i), s < t
so U = U0 - W S0 with [W | U0] solved once per chunk from [diag(beta) K~ | diag(beta) V]. Then
    O = Q~ S0 + A U,  A[t, s] = sum_i q_t,i k_s,i exp(G_t,i - G_s,i), s <= t;   S_C = diag(exp(G_C)) S0 + Kbar^T U
which leaves a recurrence of T / C steps across chunks, each three small matrix products.
L and A are products of k * exp(R) (or q * exp(R)) and k * exp(-R), R = G minus G at the chunk's
middle, so every factor stays below exp(C/2 * |lower bound|); chunk_size() keeps that below exp(80),
inside float32's (and bfloat16's) range. The chunked form runs in float32 (or float64 if
given float64) whatever the autocast setting."""
import contextlib

import torch

MAX_LOG_RANGE = 80.0   # exp(80) = 5.5e34 and exp(-80) = 1.8e-35: normal float32 numbers


def chunk_size(lower_bound, largest=32):
    """The largest power of two C <= largest with C/2 * |lower_bound| <= MAX_LOG_RANGE."""
    c = largest
    while c > 2 and c / 2 * abs(lower_bound) > MAX_LOG_RANGE:
        c //= 2
    return c


def kda_recurrent(q, k, v, g, beta, state=None):
    """The specification's recurrence, one token at a time. Returns (o [B, T, H, V], S)."""
    B, T, H, K = q.shape
    S = q.new_zeros(B, H, K, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        S = S * torch.exp(g[:, t]).unsqueeze(-1)
        pred = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        S = S + (beta[:, t, :, None, None] * k[:, t].unsqueeze(-1)) * (v[:, t] - pred).unsqueeze(-2)
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, 1), S


def _to_chunks(x, C):
    """[B, T, H, D] (T a multiple of C) -> [B, H, T/C, C, D]."""
    B, T, H, D = x.shape
    return x.reshape(B, T // C, C, H, D).permute(0, 3, 1, 2, 4)


def kda_chunked(q, k, v, g, beta, state=None, chunk=16):
    """The chunked form (module docstring). Returns (o [B, T, H, V] in q's dtype, final S)."""
    dtype = q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    with no_autocast(q.device):
        return _core(q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work),
                            None if state is None else state.to(work), chunk, dtype)


def _kda_chunked(q, k, v, g, beta, state, C, out_dtype):
    B, T, H, K = q.shape
    V = v.shape[-1]
    pad = -T % C
    if pad:  # padded steps change nothing: no decay (g = 0), no update (beta = 0), q = 0
        q, k, v, g = (torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = torch.nn.functional.pad(beta, (0, 0, 0, pad))
    q, k, v, g = (_to_chunks(x, C) for x in (q, k, v, g))          # [B, H, N, C, .]
    beta = beta.reshape(B, -1, C, H).permute(0, 3, 1, 2).unsqueeze(-1)
    G = torch.cumsum(g, dim=3)
    R = G - G[:, :, :, C // 2 - 1:C // 2, :]                         # relative to the chunk's middle
    eG, eR, emR = torch.exp(G), torch.exp(R), torch.exp(-R)
    q_dec, k_dec = q * eG, k * eG                                    # absolute decay (may underflow to 0)
    q_rel, k_rel, k_inv = q * eR, k * eR, k * emR                   # |R| <= 80: finite
    k_bar = k * torch.exp(G[:, :, :, -1:, :] - G)                   # k * exp(G_C - G)
    ones = torch.ones(C, C, dtype=torch.bool, device=q.device)
    strict, incl = torch.tril(ones, -1), torch.tril(ones)
    zero = q.new_zeros(())
    # entries above the diagonal may overflow (exp(R_t - R_s) up to exp(160)); where() drops them
    L = torch.where(strict, k_rel @ k_inv.transpose(-1, -2), zero) * beta
    A_qk = torch.where(incl, q_rel @ k_inv.transpose(-1, -2), zero)
    rhs = torch.cat([beta * k_dec, beta * v], dim=-1)
    WU = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    W, U0 = WU[..., :K], WU[..., K:]
    decay_last = eG[:, :, :, -1, :].unsqueeze(-1)                   # [B, H, N, K, 1]
    S = q.new_zeros(B, H, K, V) if state is None else state
    outs = []
    # unbind, not indexing: its backward is one stack, where N slices would each allocate a zero
    # gradient of the whole tensor
    for U0_n, W_n, q_n, A_n, d_n, kb_n in zip(U0.unbind(2), W.unbind(2), q_dec.unbind(2), A_qk.unbind(2),
                                              decay_last.unbind(2), k_bar.transpose(-1, -2).unbind(2)):
        U = U0_n - W_n @ S
        outs.append(q_n @ S + A_n @ U)
        S = d_n * S + kb_n @ U
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(B, -1, H, V)[:, :T]
    return o.to(out_dtype), S


_core = _kda_chunked   # what kda_chunked runs: the eager function or its compiled form


def use_compiled(on):
    """Runs the chunked form through torch.compile (torch 2.x) or eagerly."""
    global _core
    _core = torch.compile(_kda_chunked, dynamic=False) if on else _kda_chunked


@contextlib.contextmanager
def eager():
    """Inside, the chunked form runs eagerly (evaluations in other shapes and precisions than
    training's then compile nothing); the previous choice is restored on exit."""
    global _core
    saved, _core = _core, _kda_chunked
    try:
        yield
    finally:
        _core = saved


def no_autocast(device):
    """A context without autocast on the device's type (torch 1.13 and 2.x; torch.compile traces it)."""
    if device.type in ("cuda", "cpu"):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()
