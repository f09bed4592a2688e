"""The gated delta rule of KDA (k3-model.md 3.3 step 5) over a sequence, in two forms that compute
the same function: the per-token recurrence of the specification, and a chunked form for training.

Shapes: q, k [B, T, H, K] (normalised, q scaled), v [B, T, H, V], g [B, T, H, K] the log decay
(g <= 0; exp(g) multiplies the state's key rows), beta [B, T, H], state S [B, H, K, V].
Per head and token t, in this order:
    S = diag(exp(g_t)) S ;  pred = S^T k_t ;  S = S + beta_t k_t (v_t - pred)^T ;  o_t = S^T q_t

Chunked form. Within a chunk of C tokens that starts from state S0, let G_t = g_1 + ... + g_t
(cumulative, per key channel), Q~ = q * exp(G), K~ = k * exp(G), K^ = k * exp(-G) and
Kbar = k * exp(G_C - G). Writing each update as S_t = D_t S_{t-1} + k_t u_t^T, the pseudo-values
u_t = beta_t (v_t - (D_t S_{t-1})^T k_t) satisfy the unit lower-triangular system
    (I + diag(beta) L) U = diag(beta) (V - K~ S0),   L[t, s] = K~_t . K^_s for s < t, else 0
so U = U0 - W S0 with [W | U0] solved once per chunk from [diag(beta) K~ | diag(beta) V]. Then
    O = Q~ S0 + (Q~ K^T masked to s <= t) U        S_C = diag(exp(G_C)) S0 + Kbar^T U
which leaves a recurrence of T / C steps across chunks, each three small matrix products.
exp(-G) grows as exp(C * |lower bound|): chunk_size() keeps that below exp(80), inside float32's
(and bfloat16's) range, so no product overflows. The chunked form runs in float32 (or float64 if
given float64) whatever the autocast setting."""
import torch

MAX_LOG_RANGE = 80.0   # exp(80) = 5.5e34 and exp(-80) = 1.8e-35: normal float32 numbers


def chunk_size(lower_bound, largest=64):
    """The largest power of two C <= largest with C * |lower_bound| <= MAX_LOG_RANGE."""
    c = largest
    while c > 1 and c * abs(lower_bound) > MAX_LOG_RANGE:
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
    with _no_autocast(q.device):
        return _kda_chunked(q.to(work), k.to(work), v.to(work), g.to(work), beta.to(work),
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
    eG, emG = torch.exp(G), torch.exp(-G)
    q_dec, k_dec, k_inv = q * eG, k * eG, k * emG
    k_bar = k_inv * eG[:, :, :, -1:, :]                             # k * exp(G_C - G)
    ones = torch.ones(C, C, dtype=torch.bool, device=q.device)
    strict, incl = torch.tril(ones, -1), torch.tril(ones)
    zero = q.new_zeros(())
    L = torch.where(strict, k_dec @ k_inv.transpose(-1, -2), zero) * beta
    A_qk = torch.where(incl, q_dec @ k_inv.transpose(-1, -2), zero)
    rhs = torch.cat([beta * k_dec, beta * v], dim=-1)
    WU = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    W, U0 = WU[..., :K], WU[..., K:]
    decay_last = eG[:, :, :, -1, :].unsqueeze(-1)                   # [B, H, N, K, 1]
    S = q.new_zeros(B, H, K, V) if state is None else state
    outs = []
    for n in range(q.shape[2]):
        U = U0[:, :, n] - W[:, :, n] @ S
        outs.append(q_dec[:, :, n] @ S + A_qk[:, :, n] @ U)
        S = decay_last[:, :, n] * S + k_bar[:, :, n].transpose(-1, -2) @ U
    o = torch.stack(outs, 2).permute(0, 2, 3, 1, 4).reshape(B, -1, H, V)[:, :T]
    return o.to(out_dtype), S


class _no_autocast:
    """Disables autocast on the device's type inside (torch 1.13 and 2.x)."""

    def __init__(self, device):
        self.ctx = torch.autocast(device_type=device.type, enabled=False) if device.type in ("cuda", "cpu") else None

    def __enter__(self):
        if self.ctx:
            self.ctx.__enter__()

    def __exit__(self, *a):
        if self.ctx:
            self.ctx.__exit__(*a)
