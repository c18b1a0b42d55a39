//! The GPU suite: every kernel family against `flashtree-reference` on random inputs and shapes.
//! Skips visibly (`skipped: no CUDA driver`) on a machine without the NVIDIA driver.

mod attention;
mod copy;
mod deltanet;
mod deltanet_norm_prep;
mod demo_pair;
mod draft;
mod draft_hf;
mod embed;
mod engine;
mod engine_hf;
mod graph;
mod norm;
mod qmatmul;
mod qmm;
mod qmm_accum;
mod qmm_prep_norm;
mod qmm_swiglu;
mod qmm_swiglu_prep;
mod sample;
mod sampling;
mod serve;
mod snapshot;
