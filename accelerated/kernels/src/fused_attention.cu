// Fused causal attention with the bias computed on the fly, for CUDA (compiled at run time by
// NVRTC; see accelerated/src/attention/cuda.rs). The algorithm is `device::attend_rowwise` of
// fire-kernels, line for line, and the bias is `device::DeviceBias::value`; both are tested
// against the CPU
// kernels, and accelerated/scripts/gpu-check.sh compares this kernel with the CPU on a GPU.
//
// One warp per query row: lane t holds head dims t, t + 32, … of the query and of the output
// accumulator; keys are visited in order, the score is a warp-reduced dot product, and the
// softmax is online, so nothing of size N × N exists. Queries are positions q0 .. q0 + nq,
// keys 0 .. nk (a whole sequence, or a KV cache and the new rows).
//
// kind 0: no bias; 1: compiled FIRE (psi, inv, breakpoints, slope, intercept);
// 2: distance table ([H, cap]).

#define MAX_PER_LANE 8 // head dimensions up to 256

extern "C" __global__ void fire_fused_attention_f32(
    const float* __restrict__ q,   // [BH, nq, d]
    const float* __restrict__ k,   // [BH, nk, d]
    const float* __restrict__ v,   // [BH, nk, d]
    float* __restrict__ out,       // [BH, nq, d]
    const int heads, const int nq, const int nk, const int d, const int q0,
    const float scale, const int kind,
    const float* __restrict__ psi,         // FIRE: ψ(n), n < cap
    const float* __restrict__ inv,         // FIRE: 1 / normaliser, per query row
    const float* __restrict__ breakpoints, // FIRE: [nb]
    const int nb,
    const float* __restrict__ slope,       // FIRE: [H, nb + 1]
    const float* __restrict__ intercept,   // FIRE: [H, nb + 1]
    const float* __restrict__ table,       // table: [H, cap]
    const int cap)
{
    const int warps_per_block = blockDim.x / 32;
    const int r = blockIdx.x * warps_per_block + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const long long bh = blockIdx.y;
    const int h = (int)(bh % heads);
    if (r >= nq) {
        return;
    }
    const int per = (d + 31) / 32;
    const long long i = (long long)q0 + r;
    const float* qr = q + (bh * nq + r) * d;
    float qv[MAX_PER_LANE];
    float acc[MAX_PER_LANE];
    for (int t = 0; t < MAX_PER_LANE; ++t) {
        const int c = lane + 32 * t;
        qv[t] = (t < per && c < d) ? qr[c] : 0.0f;
        acc[t] = 0.0f;
    }
    float m = __int_as_float(0xff800000); // −∞ (no math headers under NVRTC)
    float l = 0.0f;
    const float inv_r = kind == 1 ? inv[r] : 0.0f;
    const long long last = i < (long long)nk - 1 ? i : (long long)nk - 1;
    for (long long j = 0; j <= last; ++j) {
        const float* kr = k + (bh * nk + j) * d;
        float s = 0.0f;
        for (int t = 0; t < per; ++t) {
            const int c = lane + 32 * t;
            if (c < d) {
                s += qv[t] * scale * kr[c];
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, o);
        }
        const long long n = i - j;
        if (kind == 1) {
            const float x = psi[n] * inv_r;
            int lo = 0;
            int hi = nb;
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                if (breakpoints[mid] <= x) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            const int at = h * (nb + 1) + lo;
            s += slope[at] * x + intercept[at];
        } else if (kind == 2) {
            s += table[(long long)h * cap + n];
        }
        const float mn = fmaxf(m, s);
        const float alpha = expf(m - mn);
        const float p = expf(s - mn);
        l = l * alpha + p;
        const float* vr = v + (bh * nk + j) * d;
        for (int t = 0; t < per; ++t) {
            const int c = lane + 32 * t;
            if (c < d) {
                acc[t] = acc[t] * alpha + p * vr[c];
            }
        }
        m = mn;
    }
    float* o = out + (bh * nq + r) * d;
    for (int t = 0; t < per; ++t) {
        const int c = lane + 32 * t;
        if (c < d) {
            o[c] = acc[t] / l;
        }
    }
}
