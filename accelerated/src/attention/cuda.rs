//! The CUDA backend (feature `cuda`): the kernels' fused attention source
//! ([`fire_kernels::device::CUDA_SOURCE`]), compiled once per process by NVRTC and launched as a
//! candle custom op on device tensors, with the bias from [`DeviceBias`] tables (compiled FIRE,
//! or a distance table for the baselines). Evaluation and generation use it on a CUDA device,
//! so long-context FIRE evaluation never builds an `[H, N, N]` tensor there either. Forward
//! only (training on CUDA takes the candle backend).
//!
//! The kernel's algorithm and bias formula are tested on the CPU (`fire_kernels::device`); the
//! CUDA transcription is checked against the CPU by `accelerated/scripts/gpu-check.sh` on a
//! GPU. spec: [attn.logits], [attn.causal], [fire.bias]

use std::sync::OnceLock;

use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::cudarc::nvrtc;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, Shape, Tensor};
use fire_kernels::device::{DeviceBias, CUDA_ENTRY as ENTRY, CUDA_SOURCE as SOURCE};

use crate::error::Result;

/// Query rows per block (one warp each).
const ROWS_PER_BLOCK: usize = 4;
/// `MAX_PER_LANE · 32` in the source.
const MAX_HEAD_DIM: usize = 256;

/// The PTX, compiled on first use.
fn ptx() -> candle_core::Result<&'static str> {
    static PTX: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        nvrtc::compile_ptx(SOURCE)
            .map(|p| p.to_src())
            .map_err(|e| format!("NVRTC could not compile the fused attention kernel: {e:?}"))
    })
    .as_deref()
    .map_err(|e| candle_core::Error::Msg(e.clone()))
}

/// The kernel's bias arguments: the table form (`kind` 0: none, 1: compiled FIRE, 2: a
/// distance table) and every table, the unused ones pointing at a placeholder.
struct BiasArgs<'a> {
    kind: i32,
    psi: &'a [f32],
    inv: &'a [f32],
    breakpoints: &'a [f32],
    slope: &'a [f32],
    intercept: &'a [f32],
    table: &'a [f32],
    capacity: usize,
}

impl<'a> BiasArgs<'a> {
    fn new(bias: &'a DeviceBias, unused: &'a [f32]) -> Self {
        let none = BiasArgs {
            kind: 0,
            psi: unused,
            inv: unused,
            breakpoints: unused,
            slope: unused,
            intercept: unused,
            table: unused,
            capacity: 1,
        };
        match bias {
            DeviceBias::None => none,
            DeviceBias::Fire {
                psi,
                inv,
                breakpoints,
                slope,
                intercept,
            } => BiasArgs {
                kind: 1,
                psi,
                inv,
                breakpoints,
                slope,
                intercept,
                ..none
            },
            DeviceBias::Table {
                capacity, table, ..
            } => BiasArgs {
                kind: 2,
                table,
                capacity: *capacity,
                ..none
            },
        }
    }
}

struct FusedCuda {
    bias: DeviceBias,
    q0: usize,
}

fn contiguous<'a>(
    s: &'a CudaStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f32>> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(s.as_cuda_slice::<f32>()?.slice(a..b)),
        None => candle_core::bail!("fused attention (CUDA): {what} must be contiguous"),
    }
}

impl CustomOp3 for FusedCuda {
    fn name(&self) -> &'static str {
        "fire-fused-attention-cuda"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!(
            "the CUDA fused attention was given CPU tensors (use fire_kernels::fused_causal)"
        )
    }

    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (b, h, nq, d) = l1.shape().dims4()?;
        let (kb, kh, nk, kd) = l2.shape().dims4()?;
        if (kb, kh, kd) != (b, h, d) || l3.shape() != l2.shape() {
            candle_core::bail!(
                "fused attention (CUDA): q {:?}, k {:?}, v {:?}",
                l1.shape(),
                l2.shape(),
                l3.shape()
            );
        }
        if d > MAX_HEAD_DIM || nq == 0 || nk == 0 {
            candle_core::bail!("fused attention (CUDA): head dim {d} (at most {MAX_HEAD_DIM}), {nq} queries, {nk} keys");
        }
        if self.q0 + nq > self.bias.capacity() {
            candle_core::bail!(
                "fused attention (CUDA): distance {} is past the bias tables' {}",
                self.q0 + nq - 1,
                self.bias.capacity()
            );
        }
        let dev = s1.device.clone();
        let (q, k, v) = (
            contiguous(s1, l1, "q")?,
            contiguous(s2, l2, "k")?,
            contiguous(s3, l3, "v")?,
        );
        let func = dev.get_or_load_custom_func(ENTRY, "fire_fused_attention", ptx()?)?;
        let out = dev.alloc_zeros::<f32>(b * h * nq * d)?;
        // Unused tables still need a valid pointer.
        let one = [0f32];
        let BiasArgs {
            kind,
            psi,
            inv,
            breakpoints: bps,
            slope,
            intercept,
            table,
            capacity: cap,
        } = BiasArgs::new(&self.bias, &one);
        let nb = match &self.bias {
            DeviceBias::Fire { breakpoints, .. } => breakpoints.len(),
            _ => 0,
        };
        let upload = |x: &[f32]| dev.clone_htod(if x.is_empty() { &one[..] } else { x });
        let (psi, inv, bps, slope, intercept, table) = (
            upload(psi)?,
            upload(inv)?,
            upload(bps)?,
            upload(slope)?,
            upload(intercept)?,
            upload(table)?,
        );
        let as_i32 = |n: usize| {
            i32::try_from(n).map_err(|_| candle_core::Error::Msg(format!("{n} exceeds i32")))
        };
        let (hh, nqq, nkk, dd, q0, nbb, capp) = (
            as_i32(h)?,
            as_i32(nq)?,
            as_i32(nk)?,
            as_i32(d)?,
            as_i32(self.q0)?,
            as_i32(nb)?,
            as_i32(cap)?,
        );
        let scale = 1.0f32 / (d as f32).sqrt();
        let mut builder = func.builder();
        builder.arg(&q);
        builder.arg(&k);
        builder.arg(&v);
        builder.arg(&out);
        builder.arg(&hh);
        builder.arg(&nqq);
        builder.arg(&nkk);
        builder.arg(&dd);
        builder.arg(&q0);
        builder.arg(&scale);
        builder.arg(&kind);
        builder.arg(&psi);
        builder.arg(&inv);
        builder.arg(&bps);
        builder.arg(&nbb);
        builder.arg(&slope);
        builder.arg(&intercept);
        builder.arg(&table);
        builder.arg(&capp);
        let cfg = LaunchConfig {
            grid_dim: (
                u32::try_from(nq.div_ceil(ROWS_PER_BLOCK)).map_err(candle_core::Error::wrap)?,
                u32::try_from(b * h).map_err(candle_core::Error::wrap)?,
                1,
            ),
            block_dim: (32 * ROWS_PER_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's signature in order and type; every pointer is
        // a live device buffer of the length the kernel reads (q, out: b·h·nq·d; k, v: b·h·nk·d;
        // the tables checked against q0 + nq above; the kernel reads only the table of `kind`).
        #[allow(unsafe_code)]
        unsafe { builder.launch(cfg) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((b, h, nq, d)),
        ))
    }
}

/// Causal attention of queries at positions `q0..q0 + Nq` against keys `0..Nk` on CUDA:
/// `q: [B, H, Nq, d]`, `k, v: [B, H, Nk, d]`, f32 on one CUDA device; returns `[B, H, Nq, d]`.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, q0: usize, bias: DeviceBias) -> Result<Tensor> {
    let op = FusedCuda { bias, q0 };
    Ok(q.contiguous()?
        .apply_op3_no_bwd(&k.contiguous()?, &v.contiguous()?, &op)?)
}
