"""Triton sources: the bit-exact FP8 rounding helper, a quantize kernel, and the
forward attention kernel with the P-cast contract.

:mod:`kernels.triton_attention` launches these compiled on a GPU and through
Triton's interpreter on CPU, so callers never set ``TRITON_INTERPRET`` by hand.

Why a hand-written rounding: Triton's interpreter converts float32 to
``tl.float8e4nv`` wrongly (it truncates subnormals, drops mantissa carries and
turns overflow into garbage), so the kernel rounds with integer/float ops that
behave the same interpreted and compiled. See :mod:`kernels.rounding` for the
algorithm; the two are tested bit-identical.
"""

import triton
import triton.language as tl


@triton.jit
def fp8_round(x, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_FINITE: tl.constexpr):
    """Round float32 ``x`` to the FP8 grid: nearest-even, satfinite, NaN kept.

    MAN_BITS: stored mantissa bits of the format (3 for E4M3, 2 for E5M2).
    EMIN: unbiased exponent of the smallest normal (-6 for E4M3FN).
    MAX_FINITE: largest finite value (448.0 for E4M3FN); larger magnitudes saturate.
    """
    xbits = x.to(tl.int32, bitcast=True)
    a = tl.minimum(tl.abs(x), MAX_FINITE)
    bits = a.to(tl.int32, bitcast=True)
    e = (bits >> 23) - 127  # unbiased fp32 exponent (-127 for zero / fp32 subnormals)
    t = tl.maximum(e, EMIN)  # exponent of the target binade (subnormals share EMIN)
    shift = tl.minimum(23 - MAN_BITS + (t - e), 25)  # low significand bits to drop
    mant = (bits & 0x7FFFFF) | 0x800000  # 24-bit significand with the implicit bit
    q = (mant + ((1 << (shift - 1)) - 1) + ((mant >> shift) & 1)) >> shift  # round half to even
    step = ((t - MAN_BITS + 127) << 23).to(tl.float32, bitcast=True)  # 2^(t - MAN_BITS)
    mag = q.to(tl.float32) * step
    out = (mag.to(tl.int32, bitcast=True) | (xbits & -2147483648)).to(tl.float32, bitcast=True)  # copysign
    return tl.where(x != x, x, out)


@triton.jit
def _quantize_kernel(X, Y, N,
                     MAN_BITS: tl.constexpr,  # format: stored mantissa bits
                     EMIN: tl.constexpr,  # format: exponent of the smallest normal
                     MAX_FINITE: tl.constexpr,  # format: saturation value
                     BLOCK: tl.constexpr,  # elements per program
                     ):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Y + offs, fp8_round(x, MAN_BITS, EMIN, MAX_FINITE), mask=mask)


@triton.jit
def _builtin_cast_kernel(X, Y, N, BLOCK: tl.constexpr):
    """Triton's own float32 -> float8e4nv -> float32 conversion (for documenting its behaviour)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Y + offs, x.to(tl.float8e4nv).to(tl.float32), mask=mask)


@triton.jit
def _attn_fwd(Q, K, V, Out, Diag,
              stride_qz, stride_qh, stride_qm,  # Q strides: batch, head, row (last dim contiguous)
              stride_kz, stride_kh, stride_kn,  # K strides
              stride_vz, stride_vh, stride_vn,  # V strides
              stride_oz, stride_oh, stride_om,  # Out strides
              H, N_Q, N_K,  # heads, query length, key length
              sm_scale,  # score scale, usually 1/sqrt(d)
              p_scale,  # S: P is multiplied by S before the FP8 cast
              KSINK,  # keys at positions < KSINK count as sinks in the diagnostics
              HEAD_D: tl.constexpr,  # head dimension (power of two, 16..256)
              BLOCK_M: tl.constexpr,  # query rows per program
              BLOCK_N: tl.constexpr,  # keys per KV block
              REVERSE: tl.constexpr,  # visit KV blocks last to first
              CAUSAL: tl.constexpr,  # top-left causal mask: key j visible to query i iff j <= i
              QUANT: tl.constexpr,  # round p*S to the FP8 grid (False: no rounding)
              MAN_BITS: tl.constexpr,  # FP8 format: stored mantissa bits
              EMIN: tl.constexpr,  # FP8 format: exponent of the smallest normal
              MAX_FINITE: tl.constexpr,  # FP8 format: saturation value
              ROWSUM_ROUNDED: tl.constexpr,  # l sums p_q / S instead of the unrounded p
              ):
    """One program computes BLOCK_M query rows of one (batch, head), walking all KV blocks.

    Diag is int32 [5, B*H, N_Q]: underflow, underflow_sink, saturated, terms, terms_sink.
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    z = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_m < N_Q
    q = tl.load(Q + z * stride_qz + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    n_underflow = tl.zeros([BLOCK_M], tl.int32)
    n_underflow_sink = tl.zeros([BLOCK_M], tl.int32)
    n_saturated = tl.zeros([BLOCK_M], tl.int32)
    n_terms = tl.zeros([BLOCK_M], tl.int32)
    n_terms_sink = tl.zeros([BLOCK_M], tl.int32)

    n_blocks = tl.cdiv(N_K, BLOCK_N)
    for i in range(0, n_blocks):
        if REVERSE:
            blk = n_blocks - 1 - i
        else:
            blk = i
        offs_n = blk * BLOCK_N + tl.arange(0, BLOCK_N)
        key_ok = offs_n < N_K
        kT = tl.load(K + z * stride_kz + h * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None],
                     mask=key_ok[None, :], other=0.0)
        v = tl.load(V + z * stride_vz + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :],
                    mask=key_ok[:, None], other=0.0)
        # 1. scores in fp32 with exact products (no TF32)
        s = tl.dot(q, kT, input_precision="ieee") * sm_scale
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))
        # 2. running max and probabilities
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen no key yet
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        # 3. the P cast
        x = p * p_scale
        if QUANT:
            pq = fp8_round(x, MAN_BITS, EMIN, MAX_FINITE)
        else:
            pq = x
        # 4. row sum and accumulation
        if ROWSUM_ROUNDED:
            l_blk = tl.sum(pq, 1) / p_scale
        else:
            l_blk = tl.sum(p, 1)
        l_i = l_i * alpha + l_blk
        acc = acc * alpha[:, None] + tl.dot(pq, v, input_precision="ieee")
        m_i = m_new
        # 5. diagnostics
        sink = (offs_n < KSINK)[None, :]
        pos = p > 0.0
        under = pos & (pq == 0.0)
        n_underflow += tl.sum((under & ~sink).to(tl.int32), 1)
        n_underflow_sink += tl.sum((under & sink).to(tl.int32), 1)
        n_terms += tl.sum((pos & ~sink).to(tl.int32), 1)
        n_terms_sink += tl.sum((pos & sink).to(tl.int32), 1)
        if QUANT:
            n_saturated += tl.sum((visible & (x > MAX_FINITE)).to(tl.int32), 1)

    out = acc / (l_i * p_scale)[:, None]
    tl.store(Out + z * stride_oz + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :], out,
             mask=row_ok[:, None])
    plane = tl.num_programs(1) * N_Q
    dbase = Diag + pid_bh * N_Q + offs_m
    tl.store(dbase, n_underflow, mask=row_ok)
    tl.store(dbase + plane, n_underflow_sink, mask=row_ok)
    tl.store(dbase + 2 * plane, n_saturated, mask=row_ok)
    tl.store(dbase + 3 * plane, n_terms, mask=row_ok)
    tl.store(dbase + 4 * plane, n_terms_sink, mask=row_ok)
