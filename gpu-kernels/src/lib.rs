//! flashtree's CUDA kernels, written in Rust for `nvptx64-nvidia-cuda`.
//!
//! One module per kernel family; each family has a CPU reference in `reference/src/<family>.rs`,
//! a typed launcher in `host/src/gpu/<family>.rs`, a proptest in `tests/` and a bench in
//! `benches/`. PTX specifics live in [`device`] so the kernels read as their algorithm.
//!
//! Conventions: kernel parameters are raw pointers and plain `#[repr(C)]` structs from
//! `kernel-abi` (never references: every thread gets a copy); no bounds-checked indexing in hot
//! loops (a panic is a `trap`, seen by the host as a launch failure).
#![no_std]
#![feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, core_float_math, stmt_expr_attributes)]
#![allow(clippy::missing_safety_doc)]

pub mod device;

pub mod attention;
pub mod copy;
pub mod deltanet;
pub mod embed;
pub mod norm;
pub mod qmatmul;
pub mod sample;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    unsafe { core::arch::nvptx::trap() }
}
