//! `embed`: token embedding gather. `out[r, :] = dequant(table row tokens[r])` for `r < rows`,
//! the table being the GGUF bytes of `token_embd` as stored (`n_vocab` rows of
//! `n_embd / block · block_bytes` bytes), one kernel per ggml type: `embed_f32`, `embed_f16`,
//! `embed_bf16`, `embed_q8_0`, `embed_q4_k`, `embed_q5_k`, `embed_q6_k`.
//!
//! Exactness: every element is computed with the f32 operations of
//! `flashtree_reference::quant` in the same association and without contraction (`mul.rn`,
//! `sub.rn`: plain Rust `a * b - c` is never fused), and the f16/bf16/int → f32 conversions are
//! exact, so the result equals the reference dequantization bit for bit:
//! Q4_K/Q5_K `(d·sc)·q − (dmin·m)`, Q6_K `(d·sc)·q`, Q8_0 `d·q`, F16/BF16/F32 exact.
//!
//! A token `≥ n_vocab` reads nothing and gets a row of NaN (the engine validates tokens on the
//! host; NaN makes a slip visible instead of a plausible wrong answer).
//!
//! Geometry: grid `(rows, ⌈n_embd / EMBED_CHUNK⌉)`, 256 threads, thread `t` writes elements
//! `chunk·1024 + t + 256·j` (coalesced stores). Traffic: `rows·(row_bytes + 4·n_embd)` bytes.
//! Invariant: row `r` depends only on `tokens[r]` (nothing is reduced). Chainable
//! (programmatic dependent launch): the token ids may come from the previous kernel or copy.

use kernel_abi::{EmbedParams, EMBED_CHUNK};

use crate::device::convert::{bf16_to_f32, f16_to_f32};
use crate::device::griddep::{grid_dependency_wait, launch_dependents};
use crate::device::*;

/// A ggml row format: element `e` of a row that starts at byte `row`.
trait RowFormat {
    /// Elements per block.
    const BLOCK: u32;
    /// Bytes per block.
    const BYTES: u32;
    /// Dequantized element `e` of the row at `row`.
    unsafe fn element(row: *const u8, e: u32) -> f32;
}

/// Little-endian u16 at `p` (2-byte aligned: every f16 field of these formats sits at an even
/// offset of an even-sized block, and the table is 4-byte aligned).
#[inline(always)]
unsafe fn u16_at(p: *const u8) -> u16 {
    *(p as *const u16)
}

/// The f16 at `p` as f32 (exact).
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    f16_to_f32(u16_at(p))
}

/// `(sc, m)` of sub-block `j < 8` from the 12 packed scale bytes of Q4_K / Q5_K (ggml
/// `get_scale_min_k4`, as `reference::quant::k_scales::scale_min`).
#[inline(always)]
unsafe fn scale_min(q: *const u8, j: u32) -> (u32, u32) {
    let b = |i: u32| *q.add(i as usize) as u32;
    if j < 4 {
        (b(j) & 63, b(j + 4) & 63)
    } else {
        ((b(j + 4) & 0x0f) | ((b(j - 4) >> 6) << 4), (b(j + 4) >> 4) | ((b(j) >> 6) << 4))
    }
}

struct F32;
impl RowFormat for F32 {
    const BLOCK: u32 = 1;
    const BYTES: u32 = 4;
    #[inline(always)]
    unsafe fn element(row: *const u8, e: u32) -> f32 {
        f32::from_bits(*(row as *const u32).add(e as usize))
    }
}

struct F16;
impl RowFormat for F16 {
    const BLOCK: u32 = 1;
    const BYTES: u32 = 2;
    #[inline(always)]
    unsafe fn element(row: *const u8, e: u32) -> f32 {
        f16_at(row.add(2 * e as usize))
    }
}

struct Bf16;
impl RowFormat for Bf16 {
    const BLOCK: u32 = 1;
    const BYTES: u32 = 2;
    #[inline(always)]
    unsafe fn element(row: *const u8, e: u32) -> f32 {
        bf16_to_f32(u16_at(row.add(2 * e as usize)))
    }
}

/// Q8_0: `d: f16`, `qs: [i8; 32]`; `x = d·q`.
struct Q8_0;
impl RowFormat for Q8_0 {
    const BLOCK: u32 = 32;
    const BYTES: u32 = 34;
    #[inline(always)]
    unsafe fn element(row: *const u8, e: u32) -> f32 {
        let b = row.add((e / 32 * 34) as usize);
        let q = *b.add(2 + (e % 32) as usize) as i8;
        f16_at(b) * q as f32
    }
}

/// Q4_K: `d`, `dmin`, 12 scale bytes, `qs[128]`; `x = (d·sc)·q − (dmin·m)`.
struct Q4K;
impl RowFormat for Q4K {
    const BLOCK: u32 = 256;
    const BYTES: u32 = 144;
    #[inline(always)]
    unsafe fn element(row: *const u8, e: u32) -> f32 {
        let b = row.add((e / 256 * 144) as usize);
        let (s, l) = (e % 256 / 32, e % 32);
        let (sc, m) = scale_min(b.add(4), s);
        let d1 = f16_at(b) * sc as f32;
        let m1 = f16_at(b.add(2)) * m as f32;
        let q = (*b.add((16 + 32 * (s / 2) + l) as usize) as u32 >> (4 * (s % 2))) & 0x0f;
        d1 * q as f32 - m1
    }
}

/// Q5_K: `d`, `dmin`, 12 scale bytes, `qh[32]`, `qs[128]`; `x = (d·sc)·q − (dmin·m)`,
/// `q = nibble | ((qh[l] >> s) & 1) << 4`.
struct Q5K;
impl RowFormat for Q5K {
    const BLOCK: u32 = 256;
    const BYTES: u32 = 176;
    #[inline(always)]
    unsafe fn element(row: *const u8, e: u32) -> f32 {
        let b = row.add((e / 256 * 176) as usize);
        let (s, l) = (e % 256 / 32, e % 32);
        let (sc, m) = scale_min(b.add(4), s);
        let d1 = f16_at(b) * sc as f32;
        let m1 = f16_at(b.add(2)) * m as f32;
        let low = (*b.add((48 + 32 * (s / 2) + l) as usize) as u32 >> (4 * (s % 2))) & 0x0f;
        let hi = (*b.add((16 + l) as usize) as u32 >> s) & 1;
        d1 * (low | (hi << 4)) as f32 - m1
    }
}

/// Q6_K: `ql[128]`, `qh[64]`, `scales: [i8; 16]`, `d`; `x = (d·sc)·(q − 32)`.
struct Q6K;
impl RowFormat for Q6K {
    const BLOCK: u32 = 256;
    const BYTES: u32 = 210;
    #[inline(always)]
    unsafe fn element(row: *const u8, e: u32) -> f32 {
        let b = row.add((e / 256 * 210) as usize);
        let i = e % 256;
        let (h, r) = (i / 128, i % 128);
        let (t, l) = (r / 32, r % 32);
        let byte = *b.add((64 * h + 32 * (t % 2) + l) as usize) as u32;
        let low = if t < 2 { byte & 0x0f } else { byte >> 4 };
        let high = (*b.add((128 + 32 * h + l) as usize) as u32 >> (2 * t)) & 3;
        let q = (low | (high << 4)) as i32 - 32;
        let sc = *b.add((192 + i / 16) as usize) as i8;
        (f16_at(b.add(208)) * sc as f32) * q as f32
    }
}

#[inline(always)]
unsafe fn embed<F: RowFormat>(table: *const u8, tokens: *const u32, out: *mut f32, p: EmbedParams) {
    launch_dependents();
    let r = block_x();
    if r >= p.rows {
        return;
    }
    grid_dependency_wait();
    let tok = *tokens.add(r as usize);
    let o = out.add(r as usize * p.n_embd as usize);
    let start = block_y() * EMBED_CHUNK;
    let end = (start + EMBED_CHUNK).min(p.n_embd);
    let mut e = start + thread_x();
    if tok >= p.n_vocab {
        while e < end {
            *o.add(e as usize) = f32::NAN;
            e += block_dim_x();
        }
        return;
    }
    let row = table.add(tok as usize * (p.n_embd / F::BLOCK) as usize * F::BYTES as usize);
    while e < end {
        *o.add(e as usize) = F::element(row, e);
        e += block_dim_x();
    }
}

macro_rules! embed_kernel {
    ($name:ident, $fmt:ty) => {
        /// `out[r, :] = dequant(table row tokens[r])` (see the module doc).
        #[no_mangle]
        #[link_section = "nvvm:maxntid=256;minctasm=1"]
        pub unsafe extern "ptx-kernel" fn $name(table: *const u8, tokens: *const u32, out: *mut f32, p: EmbedParams) {
            embed::<$fmt>(table, tokens, out, p)
        }
    };
}

embed_kernel!(embed_f32, F32);
embed_kernel!(embed_f16, F16);
embed_kernel!(embed_bf16, Bf16);
embed_kernel!(embed_q8_0, Q8_0);
embed_kernel!(embed_q4_k, Q4K);
embed_kernel!(embed_q5_k, Q5K);
embed_kernel!(embed_q6_k, Q6K);
