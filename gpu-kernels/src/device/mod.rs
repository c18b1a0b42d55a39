//! Our thin cuda-std: one PTX instruction (or stdarch intrinsic) per helper.
//!
//! Every `asm!` here is `convergent` after the xtask linker's IR fix-up, so warp-synchronous
//! instructions (`shfl.sync`, `bar.sync`, `mma.sync`, `ldmatrix`) are never moved across
//! divergent control flow.

pub mod atomic;
pub mod cluster;
pub mod convert;
pub mod fence;
pub mod griddep;
pub mod half2;
pub mod index;
pub mod load;
pub mod math;
pub mod mbarrier;
pub mod mma;
pub mod shared;
pub mod sync;
pub mod unroll;
pub mod warp;
pub mod wgmma;

pub use index::*;
