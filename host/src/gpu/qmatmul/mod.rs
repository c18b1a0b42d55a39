//! Launchers of `qmatmul` (`gpu-kernels/src/qmatmul/`): `y = W · x` with W in its storage type.
//!
//! The tensor-core path (`qmm_*` kernels, 1…32 tokens per launch, up to `MAX_NODES` per product
//! as launches of ≤ 32 columns, Q4_K/Q5_K/Q6_K/Q8_0/F16/BF16/F32) goes
//! through a [`QWeight`]: a matrix packed for the kernels on the device, with its type, shape and
//! K split. A step converts each input once into a [`QmmWorkspace`] ([`QmmWorkspace::prepare`],
//! or [`QmmWorkspace::prepare_norm`] fused with a residual add and RMSNorm), then runs every
//! product that reads it ([`QWeight::matmul`], and [`QWeight::swiglu`] for an MLP's interleaved
//! gate/up). One file per job:
//!
//! | file | job |
//! |---|---|
//! | `format.rs` | the kernel family of a type, packed sizes, row scales, the activation pair |
//! | `pack.rs` | host packing into the lane layout, the gate/up interleave, BF16 → row-scaled f16 |
//! | `weight.rs` | [`PackedWeight`] (host) and [`QWeight`] (device), the product entry points |
//! | `workspace.rs` | [`QmmWorkspace`]: the scratch and what it holds |
//! | `prep.rs` | the activation preparation launches (`qmm_prep_x`, `qmm_prep_norm`) |
//! | `kernels.rs` | kernel names, the K split, the product launch |
//! | `accum.rs` | accumulated products: the K-split reduction left to the next norm site, exactly |
//! | `gemv.rs` | the one-token F32/BF16 GEMV kernels |

mod accum;
mod format;
mod gemv;
mod kernels;
mod pack;
mod prep;
mod weight;
mod workspace;

pub use accum::{
    accumulation_enabled, accumulator_width_fits, swiglu_tail_fits, swiglu_tail_rows, AccumPlan, QmmAccumulated,
    QmmSwigluAccumulated,
};
pub use format::{qmm_format, qmm_is_row_scaled, qmm_needs_pairs, qmm_packed_bytes, qmm_swiglu_rows, QmmFamily};
pub use gemv::{gemv_bf16, gemv_f32};
pub use pack::bf16_rows_to_scaled_f16;
pub use weight::{PackedWeight, QWeight};
pub use workspace::QmmWorkspace;
