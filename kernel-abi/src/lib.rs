//! Launch parameters and geometry constants shared by `gpu-kernels` (nvptx64) and the host.
//!
//! Everything here is `#[repr(C)]` plain data or a `const`, so that both sides agree on layout
//! by construction. The crate is `no_std` and dependency-free so it builds for both targets.
#![no_std]

pub mod qmm_stream;
pub mod sampling;

/// Threads per block of the row-wise reductions (`norm`, `sample::argmax`).
pub const ROW_BLOCK_THREADS: u32 = 256;

/// Threads per block of the GEMV kernels (`qmatmul::*_n1`): 8 warps, one output row per warp.
pub const GEMV_BLOCK_THREADS: u32 = 256;
/// Warps per block of the GEMV kernels.
pub const GEMV_WARPS_PER_BLOCK: u32 = GEMV_BLOCK_THREADS / 32;

/// Blocks per row of the first argmax pass; each writes one `(value, index)` partial.
/// Fixed (never derived from the batch) so every row's reduction order is the same
/// whatever the number of rows.
pub const ARGMAX_SPLITS: u32 = 64;

/// Parameters of `rms_norm_rows`, `rms_norm_heads` and `add_rms_norm_rows` (which first adds
/// `a` to the rows `h` in place and normalizes the sums).
///
/// `y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * w[c]` over `rows` rows of `cols` values;
/// row `r` of `x` starts at `r * cols`, and the weight has `cols` values (shared by all rows).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormParams {
    pub rows: u32,
    pub cols: u32,
    pub eps: f32,
}

/// Parameters of the GEMV kernels: `y[o] = sum_i W[o, i] * x[i]`, `W` row-major `[out, in]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemvParams {
    pub out_features: u32,
    pub in_features: u32,
    /// Warps per output row (1, 2, 4 or 8): a function of `[out, in]` only.
    pub split: u32,
}

/// Warps per output row of the GEMV kernels for a `[out, in]` matrix: the smallest power of two
/// that gives at least 16 384 warps (enough to cover every warp slot of a 132-SM GPU twice),
/// capped so that every warp keeps at least 8 chunk loads per lane, and at 8.
pub const fn gemv_split(out_features: u32, in_features: u32) -> u32 {
    let mut split = 1;
    while split < 8
        && (out_features as u64) * (split as u64) < 16_384
        && (in_features as u64) / (split as u64 * 2) >= 32 * 8 * 8
    {
        split *= 2;
    }
    split
}

/// Parameters of the argmax kernels over `rows` rows of `cols` f32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArgmaxParams {
    pub rows: u32,
    pub cols: u32,
}

/// Elements of one row written by one block of the `embed_*` kernels (grid `(rows, ⌈n_embd /
/// this⌉)`, [`ROW_BLOCK_THREADS`] threads: 4 elements per thread).
pub const EMBED_CHUNK: u32 = 1024;

/// Parameters of the `embed_*` kernels: `out[r, :] = dequant(table row tokens[r])` for
/// `r < rows`, the table being `n_vocab` rows of `n_embd` elements in the kernel's ggml type
/// (row `t` starts at byte `t · n_embd / block · block_bytes`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbedParams {
    pub rows: u32,
    pub n_vocab: u32,
    pub n_embd: u32,
}

/// Most candidates one `topk_*` launch returns per row.
pub const TOPK_MAX_K: u32 = 64;
/// Items each thread of the `topk_*` kernels holds in registers.
pub const TOPK_ITEMS: u32 = 16;
/// Logits one block of `topk_partial` scans: one segment of a row
/// ([`ROW_BLOCK_THREADS`] × [`TOPK_ITEMS`]). Fixed, so a row's segments (and with them every
/// reduction order) depend on `vocab` only.
pub const TOPK_SEGMENT: u32 = ROW_BLOCK_THREADS * TOPK_ITEMS;

/// Segments of a row of `vocab` logits (`grid.x` of `topk_partial`).
pub const fn topk_splits(vocab: u32) -> u32 {
    vocab.div_ceil(TOPK_SEGMENT)
}

/// Whether `topk_finish` can merge a row of `vocab` logits at this `k`: its block holds
/// `splits · k` candidates in registers, at most [`TOPK_SEGMENT`] (with `k = 64`: `vocab ≤ 262 144`).
pub const fn topk_fits(vocab: u32, k: u32) -> bool {
    k >= 1 && k <= TOPK_MAX_K && k <= vocab && (topk_splits(vocab) as u64) * (k as u64) <= TOPK_SEGMENT as u64
}

/// 32-bit words of the `topk_*` scratch for `rows` rows: per row and segment `k` candidate keys,
/// `k` candidate ids, the segment's maximum key and its f32 sum of `exp(x − max)` (see
/// [`TopkParams`] for the layout).
pub const fn topk_scratch_words(rows: usize, vocab: usize, k: usize) -> usize {
    let segs = rows * vocab.div_ceil(TOPK_SEGMENT as usize);
    2 * segs * k + 2 * segs
}

/// Parameters of `topk_partial` and `topk_finish` over `rows` rows of `vocab` f32 logits.
///
/// Scratch layout (u32 words, `S = rows · splits`): `cand_key[S·k]`, `cand_id[S·k]`,
/// `seg_max[S]` (an order key, see `gpu-kernels` `sample::order_key`), `seg_sum[S]` (f32 bits);
/// segment `s` of row `r` is entry `r · splits + s`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TopkParams {
    pub rows: u32,
    pub vocab: u32,
    pub k: u32,
    /// [`topk_splits`]`(vocab)`.
    pub splits: u32,
    /// Non-zero: rows start 16-byte aligned (`vocab % 4 == 0` and an aligned base), so
    /// `topk_partial` loads 16 bytes at a time. Changes the loads only, never the result.
    pub vec4: u32,
}

/// Threads per block of `sample_rows` (one block per row).
pub const SAMPLE_THREADS: u32 = 512;
/// Rows one `sample_rows` launch samples (its parameters carry one position per row).
pub const SAMPLE_MAX_ROWS: u32 = 32;

/// Parameters of `sample_rows`: row `r < rows` of `vocab` f32 logits is sampled with the rule
/// below and the random stream of `(seed, positions[r])` (definition:
/// `flashtree_reference::sample::draw`; arithmetic: [`sampling`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleParams {
    /// `1 / f64(temperature)`, temperature > 0.
    pub inv_temperature: f64,
    pub seed: u64,
    /// The absolute position each row's picked token will occupy.
    pub positions: [u64; SAMPLE_MAX_ROWS as usize],
    pub rows: u32,
    /// `1..=`[`sampling::MAX_VOCAB`].
    pub vocab: u32,
    /// Keep the `top_k` most likely tokens; 0 = all.
    pub top_k: u32,
    /// In (0, 1]; 1 = no nucleus cut.
    pub top_p: f32,
    /// In [0, 1]; 0 = no min-p cut.
    pub min_p: f32,
    /// Non-zero: rows start 16-byte aligned (`vocab % 4 == 0` and an aligned base): 16-byte
    /// loads. Changes the loads only, never the result.
    pub vec4: u32,
}

/// Warps per block of the tensor-core `qmm_*` kernels; each warp owns 16 output rows.
pub const QMM_WARPS: u32 = 8;
/// Output rows per warp of the `qmm_*` kernels (the `m16` of `mma.m16n8k16`).
pub const QMM_ROWS_PER_WARP: u32 = 16;
/// Output rows per block of the `qmm_*` kernels.
pub const QMM_ROWS_PER_BLOCK: u32 = QMM_WARPS * QMM_ROWS_PER_WARP;
/// Most token columns one `qmm_*` launch takes (4 tiles of `n8`).
pub const QMM_MAX_N: u32 = 32;

/// 32-element units of K whose x the multi-tile `qmm_*` kernels that stage x (see
/// [`qmm_stages_x`]) keep in shared memory at a time (1280 elements: five K-quant blocks).
pub const QMM_XS_CHUNK_UNITS: u32 = 40;

/// Whether the multi-tile (`n > 8`) warp-level (`mma.sync`) `qmm_*` kernels of a format stage x
/// in shared memory, per format (measured, nvidia-h200, docs/perf/qmatmul.md session 5): Q6_K (it
/// then fits two blocks per SM: n = 22 on 5120→17408 0.229 → 0.273 of copy) and Q8_0 (+3–8 % on
/// the large shapes). Q4_K/Q5_K (still one block per SM, or spills at two) and F16 were slower
/// with it; F32 reads two x planes and does not stage (BF16 did not either; since it is packed as
/// row-scaled f16 it is F16's kernel). The warpgroup kernels ([`qmm_wgmma`]) always stage x
/// (their B operand is read from shared memory).
pub mod qmm_stages_x {
    pub const Q4_K: bool = false;
    pub const Q5_K: bool = false;
    pub const Q6_K: bool = true;
    pub const Q8_0: bool = true;
    pub const F16: bool = false;
    pub const BF16: bool = false;
    pub const F32: bool = false;
}

/// Which multi-tile `qmm_*` kernels are Hopper warpgroup products (`wgmma.mma_async`,
/// `gpu-kernels` `qmatmul::tile_wg`) rather than warp-level `mma.sync` (`qmatmul::tile`): per
/// format, bit `tiles` set for the kernel of `tiles` tiles (see [`qmm_is_wgmma`]). Chosen per
/// kernel by measurement (nvidia-h200, docs/perf/qmatmul.md sessions 9–12: every Q4_K/Q5_K
/// multi-tile kernel since their super-block product fits 128 registers, Q6_K nt4 and Q8_0 since
/// session 11, F16/BF16 nt3/nt4 since session 12 — their nt2 measured 2–5 % slower as a warpgroup
/// kernel on most shapes — so [`qmm_stages_x`] only matters for a kernel outside these masks).
/// Both kinds give the same bits on the same operands, so this never changes a result. Warpgroup
/// kernels use [`qmm_xs_smem_bytes`]`(tiles, true)` as two x buffers of half that many units each.
pub mod qmm_wgmma {
    pub const Q4_K: u32 = 1 << 2 | 1 << 3 | 1 << 4;
    pub const Q5_K: u32 = 1 << 2 | 1 << 3 | 1 << 4;
    pub const Q6_K: u32 = 1 << 2 | 1 << 3 | 1 << 4;
    pub const Q8_0: u32 = 1 << 2 | 1 << 3 | 1 << 4;
    pub const F16: u32 = 1 << 3 | 1 << 4;
    pub const BF16: u32 = 1 << 3 | 1 << 4;
    pub const F32: u32 = 0;
}

/// Whether the kernel of `tiles` tiles of a format with [`qmm_wgmma`] mask `mask` is a warpgroup
/// kernel.
pub const fn qmm_is_wgmma(mask: u32, tiles: u32) -> bool {
    tiles >= 2 && tiles < 32 && mask & (1 << tiles) != 0
}

/// Bytes of a warpgroup kernel's group-sum buffer: the K-quant super-blocks (8 units each) of
/// one x buffer (`QMM_XS_CHUNK_UNITS / 2` units), each one k16 step of B for all `QMM_MAX_N`
/// columns (the group-major plane of `gpu-kernels` `qmatmul::prep::group_sum_slot`: 1 KiB).
pub const QMM_XS_SUMS_BYTES: u32 = QMM_XS_CHUNK_UNITS / 2 / 8 * QMM_MAX_N * 32;

/// Dynamic shared memory of a `qmm_*` kernel with `tiles` tiles of 8 columns: the x chunk
/// (`QMM_XS_CHUNK_UNITS` units × `8·tiles` columns × 32 f16) and two group-sum buffers
/// ([`QMM_XS_SUMS_BYTES`] each) when the format stages x and `tiles ≥ 2`, else 0.
pub const fn qmm_xs_smem_bytes(tiles: u32, stages_x: bool) -> u32 {
    if tiles >= 2 && stages_x {
        QMM_XS_CHUNK_UNITS * 8 * tiles * 64 + 2 * QMM_XS_SUMS_BYTES
    } else {
        0
    }
}

/// Parameters of the tensor-core `qmm_*` kernels: `y[c, o] = Σ_i W[o, i] · x[c, i]` for
/// `c < n`, `o < out_features`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QmmParams {
    pub out_features: u32,
    pub in_features: u32,
    /// Token columns computed (≤ [`QMM_MAX_N`], the column pitch of every activation and
    /// partial-sum buffer).
    pub n: u32,
    /// Splits of the K dimension of the split row blocks (a function of the shape and the device
    /// only, never of `n`: [`qmm_split_plan`], [`qmm_ksplit_pow2`]).
    pub ksplit: u32,
    /// Leading row blocks (of 128 rows) computed with K unsplit; the rest run `ksplit` splits.
    /// The grid is 1-D, [`qmm_grid_blocks`] blocks, decoded by [`qmm_block_work`].
    pub full_row_blocks: u32,
    /// 0: split row blocks reduce through global memory (the last block of a row block to finish
    /// adds the partials). Otherwise (only with `full_row_blocks = 0` and `2 ≤ ksplit ≤`
    /// [`QMM_MAX_CLUSTER`]) the launch is a grid of thread-block clusters of `ksplit` blocks, one
    /// cluster per row block, split `s` = the block's cluster rank, and the splits add their
    /// partials through distributed shared memory, in the same split order ([`qmm_block_work`],
    /// [`qmm_cluster_plan`]).
    pub cluster: u32,
    /// 0: plain product, `y[c, o]` for `o < out_features` (pitch `out_features`). Otherwise the
    /// fused SwiGLU epilogue over `ff = swiglu_ff` features: W holds gate and up interleaved by
    /// 8 rows (rows `16b + j` = gate row `8b + j`, rows `16b + 8 + j` = up row `8b + j`, `j < 8`,
    /// so `out_features = 16·⌈ff/8⌉`), and `y[c, f] = silu(g_f) · u_f` for `f < ff` (pitch `ff`).
    pub swiglu_ff: u32,
    /// Global-memory reduction only (`cluster = 0`), block formats: 0 — the last split of a row
    /// block to finish adds every partial; 1 — every split, once all of its row block's splits
    /// have published their partials, adds the partials of the columns `c ≡ split (mod ksplit)`
    /// (the same adds in the same order, so the same bits). A split waits for its row block's
    /// other splits, so the host sets 1 only when every split block of the launch fits the device
    /// at once (then the waiting blocks cannot hold the slots the others need):
    /// [`qmm_spread_reduction`].
    pub reduce_spread: u32,
}

/// Bytes of the packed blocks of a `[out_features, in_features]` matrix of a `qmm_*` format with
/// `elems` elements in `bytes` bytes per block: `⌈out/128⌉·128` rows (whole kernel blocks; the
/// rows past `out` are zero). Row-scaled formats ([`qmm_row_scaled`]) store one f32 per packed
/// row right after them.
pub const fn qmm_block_bytes(out_features: u32, in_features: u32, elems: u32, bytes: u32) -> u64 {
    let rows = out_features.div_ceil(QMM_ROWS_PER_BLOCK) as u64 * QMM_ROWS_PER_BLOCK as u64;
    rows * (in_features / elems) as u64 * bytes as u64
}

/// Which `qmm_*` formats are stored as f16 values `ŵ` with one power-of-two scale `s_r` per row
/// (`W[r, i] = s_r·ŵ[r, i]`): BF16, whose 8-bit significands fit f16's 11 once each row is
/// scaled into f16's range, so its products run at F16's cost (one f16 tensor-core product per
/// step and the f16 activations) instead of two bf16 products against a hi + lo pair of x. The
/// packed matrix is the F16 layout of `ŵ`, then the `⌈out/128⌉·128` row scales as f32
/// ([`qmm_block_bytes`] bytes in); the kernels multiply each output by its row's `s_r` (exact).
pub mod qmm_row_scaled {
    pub const BF16: bool = true;
}

/// `(elements, bytes, blocks per stage)` of each weight format of the `qmm_*` kernels.
pub mod qmm_format {
    pub const Q4_K: (u32, u32, u32) = (256, 144, 1);
    pub const Q5_K: (u32, u32, u32) = (256, 176, 1);
    pub const Q6_K: (u32, u32, u32) = (256, 210, 1);
    pub const Q8_0: (u32, u32, u32) = (32, 34, 4);
    pub const F16: (u32, u32, u32) = (32, 64, 2);
    pub const BF16: (u32, u32, u32) = (32, 64, 2);
    pub const F32: (u32, u32, u32) = (32, 128, 1);
}

/// Where each byte of a 16-row group's weight block sits in the packed layout of the `qmm_*`
/// kernels (`host::gpu::qmatmul::PackedWeight::pack`), so that lane `l = 4g + t` of a warp loads
/// exactly the bytes it multiplies, with coalesced 16-byte loads:
///
/// * **Private bytes** — the listed pieces of rows `g` and `g + 8`, concatenated in list order
///   (`PRIVATE` bytes per lane, a multiple of 16), are the lane's `PRIVATE / 16` chunks; chunk
///   `j` of lane `l` sits at `512·j + 16·l` (load `j` of the warp reads 512 contiguous bytes).
/// * **Shared bytes** — the listed per-row fields (headers, scales) that all four lanes of a
///   quad need, stored once: field `f` of row `r` at `32·PRIVATE + Σ_{f' < f} 16·len(f') +
///   r·len(f)`.
///
/// Every byte of the 16 rows' blocks appears exactly once (`16·BYTES` in all), so each packed
/// group has the raw size (the host pads the matrix with zero rows to whole 128-row blocks). A
/// piece is `(row, offset at t = 0, length, t stride)`: lane `t` takes the row's bytes
/// `offset + t·stride .. + length`.
pub mod qmm_lanes {
    /// `(row: 0 = g, 1 = g + 8, offset, length, t stride)`.
    pub type Piece = (u8, u16, u8, u8);
    /// `(offset, length)` of a per-row field shared by a quad.
    pub type Field = (u16, u8);

    /// Q4_K: per row the four 32-byte nibble groups' bytes `8t .. 8t+8`; shared: the 16-byte
    /// header (`d`, `dmin`, 12 scale bytes).
    pub const Q4_K: (&[Piece], &[Field]) = (
        &[
            (0, 16, 8, 8),
            (0, 48, 8, 8),
            (0, 80, 8, 8),
            (0, 112, 8, 8),
            (1, 16, 8, 8),
            (1, 48, 8, 8),
            (1, 80, 8, 8),
            (1, 112, 8, 8),
        ],
        &[(0, 16)],
    );
    /// Q5_K: per row qh bytes `8t .. +8`, then the four nibble groups as Q4_K; shared: header.
    pub const Q5_K: (&[Piece], &[Field]) = (
        &[
            (0, 16, 8, 8),
            (0, 48, 8, 8),
            (0, 80, 8, 8),
            (0, 112, 8, 8),
            (0, 144, 8, 8),
            (1, 16, 8, 8),
            (1, 48, 8, 8),
            (1, 80, 8, 8),
            (1, 112, 8, 8),
            (1, 144, 8, 8),
        ],
        &[(0, 16)],
    );
    /// Q6_K: per row and half `hf`: ql bytes `64hf + 8t`, `64hf + 32 + 8t`, qh bytes
    /// `128 + 32hf + 8t` (8 each); shared: the 16 scales, then `d`.
    pub const Q6_K: (&[Piece], &[Field]) = (
        &[
            (0, 0, 8, 8),
            (0, 32, 8, 8),
            (0, 128, 8, 8),
            (0, 64, 8, 8),
            (0, 96, 8, 8),
            (0, 160, 8, 8),
            (1, 0, 8, 8),
            (1, 32, 8, 8),
            (1, 128, 8, 8),
            (1, 64, 8, 8),
            (1, 96, 8, 8),
            (1, 160, 8, 8),
        ],
        &[(192, 16), (208, 2)],
    );
    /// Q8_0: per row quant bytes `8t .. +8`; shared: `d`.
    pub const Q8_0: (&[Piece], &[Field]) = (&[(0, 2, 8, 8), (1, 2, 8, 8)], &[(0, 2)]);
    /// F16 / BF16 (32-element blocks of 64 bytes): per row elements `8t .. +8`.
    pub const HALF: (&[Piece], &[Field]) = (&[(0, 0, 16, 16), (1, 0, 16, 16)], &[]);
    /// F32 (32-element blocks of 128 bytes): per row elements `8t .. +8`.
    pub const F32: (&[Piece], &[Field]) = (&[(0, 0, 32, 32), (1, 0, 32, 32)], &[]);

    /// Private bytes per lane of a layout.
    pub const fn private_bytes(l: (&[Piece], &[Field])) -> u32 {
        let mut s = 0;
        let mut i = 0;
        while i < l.0.len() {
            s += l.0[i].2 as u32;
            i += 1;
        }
        s
    }

    /// Byte offset of shared field `f` (of row 0) in a packed 16-row block.
    pub const fn field_offset(l: (&[Piece], &[Field]), f: usize) -> u32 {
        let mut o = 32 * private_bytes(l);
        let mut i = 0;
        while i < f {
            o += 16 * l.1[i].1 as u32;
            i += 1;
        }
        o
    }
}

/// Records of the `chain-trace` experiment build (`gpu-kernels` feature): the `FLASHTREE_TRACE`
/// global holds `CHAIN_TRACE_CAP` records of [`CHAIN_TRACE_WORDS`] u64 each, filled in the order
/// the kernels' blocks `(0, 0, 0)` return from `griddepcontrol.wait` (the chain's order), counted
/// by the u32 global `FLASHTREE_TRACE_COUNT` (which keeps counting past the capacity).
pub const CHAIN_TRACE_CAP: u32 = 16384;

/// Words of one chain-trace record: `%globaltimer` (ns) when block 0 reached the wait, when the
/// wait returned (the previous kernel had completed and its writes were visible), and the grid
/// `x | y << 32 | z << 48`.
pub const CHAIN_TRACE_WORDS: usize = 3;

/// Parameters of `qmm_prep_x`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QmmPrepParams {
    pub n: u32,
    pub in_features: u32,
    /// Non-zero: also write the bf16 hi + lo pair (F32 weights need it).
    pub pairs: u32,
    /// `qmm_prep_x` only (the other prep kernels ignore it). 0: scan each column for its
    /// `max |x|`. `m > 0`: the column's max is the max of the `m` words `ymax[c·m .. c·m + m]`
    /// (bits of `|x|`, as published by the fused SwiGLU epilogue for the `y` being prepared:
    /// one word per row group of that product, `m` = its row groups), with no scan.
    pub max_parts: u32,
}

/// The norm part of `qmm_prep_norm` (the prep part is [`QmmPrepParams`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QmmPrepNormParams {
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Non-zero: add `a` to `h` first and store the sum to `h_out`.
    pub add: u32,
}

/// Accumulated `qmm` products (`qmm_<format>_accum_nt<T>`): the K-split reduction left to the
/// consumer, exactly. Every block adds its split's raw sums `P` (before the column's x scale) to
/// an i64 accumulator per output as the fixed-point integer `round(P · 2^FRAC_BITS)`
/// (`red.global.add.u64`): integer adds commute, so the total does not depend on the order the
/// splits land in, and no split waits for another. The consumer (`qmm_prep_norm_accum`) reads
/// `a = f32(Σ) · 2^-FRAC_BITS · s_c`. The column's scale word holds `max(bits(s_c), NaN bits if a
/// partial was not finite)`, so a non-finite product still reaches the consumer as NaN.
pub mod qmm_accum {
    /// Fractional bits of the fixed-point partial sums. The raw sums are in units of the
    /// prepared x̂ (`max |x̂| < 2^15`), so `|P| ≥ 1` except under cancellation; a partial clamps
    /// at `|P| ≥ 2^39` (`2^63 / 2^24`).
    pub const FRAC_BITS: i32 = 24;
    /// The widest rows `qmm_prep_norm_accum` takes (its register path: 256 threads × 24).
    pub const MAX_IN: u32 = 6144;
    /// The most rows (gate and up interleaved) of a fused SwiGLU product's accumulated split
    /// tail: every block of `qmm_prep_swiglu_accum` computes the tail's features for the column
    /// max (≤ 4 per thread).
    pub const MAX_SWIGLU_TAIL_ROWS: u32 = 2048;
    /// Formats with accumulating kernels: the block formats but Q5_K (its four-tile
    /// accumulating kernel spills at 128 registers).
    pub const Q4_K: bool = true;
    pub const Q5_K: bool = false;
    pub const Q6_K: bool = true;
    pub const Q8_0: bool = true;
}

/// The split tail of a fused SwiGLU product for `qmm_prep_swiglu_accum` (`qmm_accum`): the
/// product's unsplit row blocks `full` (their features `0 .. 64·full` are in `y`, their row
/// maxima the first `full` of each column's `QmmPrepParams::max_parts` words), and the tail's
/// rows `tail_rows` (the accumulators' column pitch; gate and up interleaved by 8).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmmSwigluTail {
    pub full: u32,
    pub tail_rows: u32,
}

/// Elements of one column written by one block of `qmm_prep_x` (grid `(n, ⌈in / this⌉)`).
pub const QMM_PREP_CHUNK: u32 = 1024;

/// K splits of the `qmm_*` kernels of the float formats (F16, BF16, F32): the smallest power of
/// two giving ≥ 512 blocks of 128 rows, at most 16, and keeping at least 2 weight blocks per split.
/// (The wave model of [`qmm_ksplit`] was fitted on the block formats; applied to the float
/// formats it measured up to 29 % slower at n = 32, whose multi-tile kernels keep fewer blocks
/// resident than the one-tile kernel: docs/perf/qmatmul.md, session 8.) Depends on the shape
/// only.
pub const fn qmm_ksplit_pow2(out_features: u32, blocks_per_row: u32) -> u32 {
    let row_blocks = out_features.div_ceil(QMM_ROWS_PER_BLOCK) as u64;
    let mut s = 1u32;
    while s < 16 && row_blocks * (s as u64) < 512 && (blocks_per_row as u64) >= 4 * s as u64 {
        s *= 2;
    }
    s
}

/// Per-block overhead of a `qmm_*` launch (its pipeline fill and epilogue, the split's share of
/// the reduction) in hundredths of one whole-K block's time: fitted on nvidia-h200 (session 8 of
/// docs/perf/qmatmul.md: a K-split sweep over seven 27B shapes).
pub const QMM_SPLIT_OVERHEAD_PCT: u64 = 8;

/// K splits of the block formats' `qmm_*` kernels (Q4_K, Q5_K, Q6_K, Q8_0) for `out_features`
/// rows of `blocks_per_row` weight blocks on a device that keeps `slots` blocks resident at once (SMs × resident blocks per SM of the
/// format's one-tile kernel): the `s ≤ 16` (keeping at least 2 weight blocks per split) that
/// minimizes the wave model `⌈row_blocks·s / slots⌉ · (1/s + QMM_SPLIT_OVERHEAD_PCT/100)` —
/// whole waves of blocks, each block `1/s` of the K work plus a fixed overhead; ties go to fewer
/// splits. Depends on the shape and the device only (never on the token count), so a column's
/// summation order is the same for every batch size.
pub const fn qmm_ksplit(out_features: u32, blocks_per_row: u32, slots: u32) -> u32 {
    let row_blocks = out_features.div_ceil(QMM_ROWS_PER_BLOCK) as u64;
    let slots = if slots == 0 { 1 } else { slots as u64 };
    // cost(s) = waves(s)·(100 + c·s)/s, compared cross-multiplied in integers.
    let (mut best, mut best_num, mut best_den) = (1u32, 0u64, 1u64);
    let mut s = 1u32;
    while s <= 16 && (s == 1 || blocks_per_row as u64 >= 2 * s as u64) {
        let waves = (row_blocks * s as u64).div_ceil(slots);
        let (num, den) = (waves * (100 + QMM_SPLIT_OVERHEAD_PCT * s as u64), s as u64);
        if s == 1 || num * best_den < best_num * den {
            (best, best_num, best_den) = (s, num, den);
        }
        s += 1;
    }
    best
}

/// A `qmm_*` launch's K-split plan: the first `full` row blocks (of 128 rows) unsplit, the other
/// `row_blocks − full` in `ksplit` splits each ([`QmmParams::full_row_blocks`], `ksplit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmmSplitPlan {
    pub full: u32,
    pub ksplit: u32,
}

/// The split plan of the block formats' `qmm_*` kernels for `out_features` rows of
/// `blocks_per_row` weight blocks on a device that keeps `slots` blocks resident: [`qmm_ksplit`]'s
/// uniform split, unless the matrix has more row blocks than `slots` and "whole waves unsplit,
/// the remainder split" costs less under the same wave model — `⌊row_blocks / slots⌋` waves of
/// unsplit blocks (`100 + c` each, `c = QMM_SPLIT_OVERHEAD_PCT`), then the `R` remaining row
/// blocks in `s` splits (`⌈R·s / slots⌉ · (100 + c·s)/s`, `s ≤ 16`, at least 2 weight blocks per
/// split). The 27B's fused gate/up (272 row blocks on 264 slots) is 1.03 waves: uniformly split
/// it costs 5 waves of quarter blocks; planned, one wave of whole blocks and 8 row blocks in 10
/// splits. A function of the shape and the device only, so a column's summation order is the
/// same for every batch size.
pub const fn qmm_split_plan(out_features: u32, blocks_per_row: u32, slots: u32) -> QmmSplitPlan {
    let uniform = qmm_ksplit(out_features, blocks_per_row, slots);
    let row_blocks = out_features.div_ceil(QMM_ROWS_PER_BLOCK) as u64;
    let slots64 = if slots == 0 { 1 } else { slots as u64 };
    let waves = row_blocks / slots64;
    let rest = row_blocks - waves * slots64;
    if waves == 0 || rest == 0 {
        return QmmSplitPlan { full: 0, ksplit: uniform };
    }
    let c = QMM_SPLIT_OVERHEAD_PCT;
    // Costs in hundredths of a whole-K block, as fractions `num / den` (cross-multiplied).
    let u = uniform as u64;
    let (u_num, u_den) = ((row_blocks * u).div_ceil(slots64) * (100 + c * u), u);
    let full_cost = waves * (100 + c);
    let (mut best_s, mut best_num, mut best_den) = (0u64, 0u64, 1u64);
    let mut s = 1u64;
    while s <= 16 && (s == 1 || blocks_per_row as u64 >= 2 * s) {
        let num = full_cost * s + (rest * s).div_ceil(slots64) * (100 + c * s);
        if best_s == 0 || num * best_den < best_num * s {
            (best_s, best_num, best_den) = (s, num, s);
        }
        s += 1;
    }
    if best_num * u_den < u_num * best_den {
        QmmSplitPlan { full: (waves * slots64) as u32, ksplit: best_s as u32 }
    } else {
        QmmSplitPlan { full: 0, ksplit: uniform }
    }
}

/// Most blocks of a `qmm_*` thread-block cluster (one cluster per split row block: the largest
/// K split of [`qmm_split_plan`]; clusters past 8 blocks need the kernel's non-portable cluster
/// size attribute, which sm_90 allows up to 16).
pub const QMM_MAX_CLUSTER: u32 = 16;

/// Whether a plan's split row blocks can reduce through a thread-block cluster
/// ([`QmmParams::cluster`]): every row block split (`full = 0`) in `2..=QMM_MAX_CLUSTER` splits.
pub const fn qmm_cluster_plan(full: u32, ksplit: u32) -> bool {
    full == 0 && ksplit >= 2 && ksplit <= QMM_MAX_CLUSTER
}

/// Time model of a split `qmm_*` launch for choosing between the global-memory reduction and a
/// cluster plan ([`qmm_cluster_ksplit`]), in nanoseconds at n = 1 and n = 22 (index 0, 1): a
/// launch costs `waves · (fixed + units_per_split · per_unit)`, where a unit is 256 weights of a
/// row. `fixed` differs by reduction (the cluster's adds through distributed shared memory
/// replace the partials' round trip through L2, the counter and the lone last block);
/// `per_unit` is the format's. Fitted on nvidia-h200 from a K-split sweep of Q4_K 6144→5120,
/// 17408→5120 and Q6_K 17408→5120 with both reductions (docs/perf/qmatmul.md, session 14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QmmSplitCost {
    pub fixed_global_ns: [u64; 2],
    pub fixed_cluster_ns: [u64; 2],
    pub per_unit_ns: [u64; 2],
}

/// [`QmmSplitCost`] of Q4_K (the fit's `per_unit` for that format).
pub const QMM_SPLIT_COST_Q4_K: QmmSplitCost =
    QmmSplitCost { fixed_global_ns: [6400, 11_900], fixed_cluster_ns: [5300, 7300], per_unit_ns: [870, 1150] };
/// [`QmmSplitCost`] of Q6_K.
pub const QMM_SPLIT_COST_Q6_K: QmmSplitCost =
    QmmSplitCost { fixed_global_ns: [6400, 11_900], fixed_cluster_ns: [5300, 7300], per_unit_ns: [1370, 1600] };

/// The K split of a cluster plan for a matrix whose [`qmm_split_plan`] splits every row block
/// (`plan.full = 0`), or 0 to keep `plan` with the global-memory reduction. Candidates: splits
/// `s ≥ 2` keeping at least 2 units per split whose clusters all fit at once
/// (`resident[s] ≥ row_blocks`: `cuOccupancyMaxActiveClusters` of the one-tile kernel, clusters
/// of `s`), costed as one wave; `plan` costs `⌈row_blocks·ksplit / slots⌉` waves. The cost is the
/// sum of the n = 1 and n = 22 models, so one plan serves AR steps and tree verifies (a plan must
/// not depend on n). Ties keep `plan`; among clusters the larger split. On nvidia-h200 the 27B's
/// Q4_K 6144→5120 goes from 6 global splits to clusters of 5 (measured n = 1 / 22: 9.9 → 9.4 /
/// 15.8 → 12.9 µs) and its 40-row-block Q6_K down projection stays global (clusters of 6 do not
/// fit: 39 resident).
pub fn qmm_cluster_ksplit(
    row_blocks: u32,
    units_per_row: u32,
    plan: QmmSplitPlan,
    slots: u32,
    resident: &[u32; QMM_MAX_CLUSTER as usize + 1],
    m: QmmSplitCost,
) -> u32 {
    if plan.full != 0 || plan.ksplit < 2 || row_blocks == 0 {
        return 0;
    }
    let units = units_per_row as u64;
    // Cost times `den` for a per-split unit count `units / k`, summed over the two n.
    let cost = |waves: u64, fixed: [u64; 2], k: u64| -> u64 {
        waves * ((fixed[0] + fixed[1]) * k + units * (m.per_unit_ns[0] + m.per_unit_ns[1])) / k
    };
    let slots = if slots == 0 { 1 } else { slots as u64 };
    let waves = (row_blocks as u64 * plan.ksplit as u64).div_ceil(slots);
    let mut best = cost(waves, m.fixed_global_ns, plan.ksplit as u64);
    let mut best_k = 0u32;
    let mut k = 2u32;
    while k <= QMM_MAX_CLUSTER && units >= 2 * k as u64 {
        if resident[k as usize] >= row_blocks {
            let c = cost(1, m.fixed_cluster_ns, k as u64);
            if c < best || (c == best && best_k != 0) {
                (best, best_k) = (c, k);
            }
        }
        k += 1;
    }
    best_k
}

/// Whether a `qmm_*` launch of `tiles` tiles whose plan splits row blocks `full .. row_blocks` in
/// `ksplit` reduces them spread over the splits ([`QmmParams::reduce_spread`]) on a device that
/// keeps `resident` of its blocks at once: past one tile (at one the last-block reduction measured
/// faster), and only when every split block can be resident together — a spread split waits for
/// its row block's other splits, so this bound is what makes the wait deadlock-free (the full
/// row blocks never wait, and no later kernel takes a slot before every block of the launch has
/// started). Formats without the block-format epilogue never spread (the caller's check).
pub const fn qmm_spread_reduction(tiles: u32, ksplit: u32, full: u32, row_blocks: u32, resident: u32) -> bool {
    if tiles < 2 || ksplit < 2 || full >= row_blocks {
        return false;
    }
    (row_blocks - full) as u64 * ksplit as u64 <= resident as u64
}

/// Blocks of a `qmm_*` launch over `row_blocks` row blocks: `full + (row_blocks − full)·ksplit`.
pub const fn qmm_grid_blocks(row_blocks: u32, full: u32, ksplit: u32) -> u32 {
    let full = if full > row_blocks { row_blocks } else { full };
    full + (row_blocks - full) * if ksplit == 0 { 1 } else { ksplit }
}

/// Row block and weight-block range `b0 .. b1` (of `blocks_per_row`) of block `b` of a `qmm_*`
/// launch: split `s` of `k` covers `s·bpr/k .. (s+1)·bpr/k` ([`qmm_block_work`]).
pub const fn qmm_block_range(
    b: u32,
    row_blocks: u32,
    full: u32,
    ksplit: u32,
    cluster: u32,
    blocks_per_row: u32,
) -> (u32, u32, u32) {
    let (rb, s, k) = qmm_block_work(b, row_blocks, full, ksplit, cluster);
    (rb, s * blocks_per_row / k, (s + 1) * blocks_per_row / k)
}

/// What block `b` of a `qmm_*` launch computes: `(row block, split, splits of that row block)`.
/// Blocks `0 .. full` are the unsplit row blocks in order; then split `s` of the remaining
/// `R = row_blocks − full` row blocks is blocks `full + s·R ..` (row block fastest, as a 2-D grid
/// `(R, ksplit)` would order them). A cluster launch (`cluster ≠ 0`, [`QmmParams::cluster`]:
/// `full = 0`) orders the splits fastest instead — block `b` is split `b mod ksplit` of row block
/// `b / ksplit`, so a row block's splits are one cluster and the split is the cluster rank.
pub const fn qmm_block_work(b: u32, row_blocks: u32, full: u32, ksplit: u32, cluster: u32) -> (u32, u32, u32) {
    if cluster != 0 && ksplit != 0 {
        return (b / ksplit, b % ksplit, ksplit);
    }
    let full = if full > row_blocks { row_blocks } else { full };
    if b < full {
        return (b, 0, 1);
    }
    let rest = row_blocks - full;
    if rest == 0 {
        return (row_blocks, 0, 1); // past the grid: the caller's row block is out of range
    }
    let r = b - full;
    (full + r % rest, r / rest, if ksplit == 0 { 1 } else { ksplit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qmm_spread_reduction_only_where_every_split_block_fits() {
        // The 27B gate/up at n = 22 on nvidia-h200: 264 unsplit row blocks, 8 split 10 ways, 264 slots.
        assert!(qmm_spread_reduction(3, 10, 264, 272, 264));
        // One tile keeps the last-block reduction; so do unsplit plans.
        assert!(!qmm_spread_reduction(1, 10, 264, 272, 264));
        assert!(!qmm_spread_reduction(3, 1, 0, 40, 264));
        assert!(!qmm_spread_reduction(3, 10, 272, 272, 264));
        // 136 row blocks × 3 splits = 408 split blocks > 264 resident: never.
        assert!(!qmm_spread_reduction(3, 3, 0, 136, 264));
        // The bound itself, exhaustively over small grids: spread ⇒ all split blocks resident at once.
        for tiles in 1..5u32 {
            for ksplit in 0..18u32 {
                for row_blocks in 0..40u32 {
                    for full in 0..=row_blocks + 1 {
                        for resident in [0u32, 1, 7, 64, 264] {
                            if qmm_spread_reduction(tiles, ksplit, full, row_blocks, resident) {
                                assert!(tiles >= 2 && ksplit >= 2 && full < row_blocks);
                                assert!((row_blocks - full) * ksplit <= resident);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn qmm_ksplit_follows_the_wave_model_and_keeps_two_blocks_per_split() {
        // nvidia-h200, K-quant one-tile kernels: 132 SMs × 2 blocks. The session-8 sweep's best
        // measured splits: 5120→17408 (136 row blocks): 3; 17408→5120 (40, 68 blocks of K): 6;
        // 5120→10240 (80): 3; 5120→12288 (96): 4 … 3; the LM head (1940): 1.
        let slots = 264;
        assert_eq!(qmm_ksplit(17408, 20, slots), 3);
        assert_eq!(qmm_ksplit(5120, 68, slots), 6);
        assert_eq!(qmm_ksplit(10240, 20, slots), 3);
        assert_eq!(qmm_ksplit(248_320, 20, slots), 1);
        // One row block: as many splits as K allows (2 blocks each), at most 16.
        assert_eq!(qmm_ksplit(100, 3, slots), 1);
        assert_eq!(qmm_ksplit(100, 4, slots), 2);
        assert_eq!(qmm_ksplit(100, 544, slots), 16);
        for out in [1u32, 100, 5120, 17408, 248_320] {
            for bpr in [1u32, 2, 3, 20, 68, 544] {
                for slots in [0u32, 1, 132, 264, 396] {
                    let s = qmm_ksplit(out, bpr, slots);
                    assert!((1..=16).contains(&s));
                    assert!(s == 1 || bpr >= 2 * s, "{out} {bpr} {s}");
                }
            }
        }
    }

    #[test]
    fn qmm_split_plan_takes_whole_waves_unsplit_when_the_model_says_so() {
        let slots = 264;
        // 27B fused gate/up (34816 rows, 20 super-blocks): one wave unsplit, 8 row blocks split.
        assert_eq!(qmm_split_plan(34_816, 20, slots), QmmSplitPlan { full: 264, ksplit: 10 });
        // The LM head (1940 row blocks): 7 waves unsplit, 92 row blocks in 5 splits (2 waves).
        assert_eq!(qmm_split_plan(248_320, 20, slots), QmmSplitPlan { full: 1848, ksplit: 5 });
        // Fewer row blocks than slots: the uniform split.
        assert_eq!(qmm_split_plan(17_408, 20, slots), QmmSplitPlan { full: 0, ksplit: 3 });
        assert_eq!(qmm_split_plan(5120, 68, slots), QmmSplitPlan { full: 0, ksplit: 6 });
        // Whole waves exactly: nothing to split.
        assert_eq!(qmm_split_plan(264 * 128, 20, slots), QmmSplitPlan { full: 0, ksplit: 1 });
        for out in [1u32, 100, 5120, 17408, 34_816, 248_320] {
            for bpr in [1u32, 2, 3, 4, 20, 68, 544] {
                for slots in [0u32, 1, 132, 264, 396] {
                    let pl = qmm_split_plan(out, bpr, slots);
                    let rb = out.div_ceil(QMM_ROWS_PER_BLOCK);
                    assert!((1..=16).contains(&pl.ksplit) && pl.full <= rb, "{out} {bpr} {slots} {pl:?}");
                    assert!(pl.ksplit == 1 || bpr >= 2 * pl.ksplit, "{out} {bpr} {pl:?}");
                }
            }
        }
    }

    #[test]
    fn qmm_block_work_covers_every_row_block_split_once() {
        for (rb, full, ks) in [(272u32, 264u32, 10u32), (1940, 1848, 2), (40, 0, 6), (7, 0, 1), (5, 5, 3)] {
            let blocks = qmm_grid_blocks(rb, full, ks);
            let mut seen = [false; 2048 * 16];
            for b in 0..blocks {
                let (r, s, k) = qmm_block_work(b, rb, full, ks, 0);
                assert!(r < rb && s < k, "{rb} {full} {ks}: block {b} -> {r} {s} {k}");
                assert_eq!(k, if r < full { 1 } else { ks });
                assert!(!seen[(r * 16 + s) as usize]);
                seen[(r * 16 + s) as usize] = true;
            }
            let want: u32 = (0..rb).map(|r| if r < full { 1 } else { ks }).sum();
            assert_eq!(seen.iter().filter(|&&x| x).count() as u32, want);
        }
    }

    /// A cluster launch covers the same (row block, split) pairs, each row block's splits in one
    /// run of `ksplit` consecutive blocks (one cluster) with the split as the rank in that run.
    #[test]
    fn qmm_cluster_blocks_are_a_row_blocks_splits_in_rank_order() {
        for (rb, ks) in [(40u32, 6u32), (129, 2), (8, 10), (104, 5), (1, 16)] {
            assert!(qmm_cluster_plan(0, ks));
            let blocks = qmm_grid_blocks(rb, 0, ks);
            assert_eq!(blocks, rb * ks);
            let mut seen = [false; 1024];
            for b in 0..blocks {
                let (r, s, k) = qmm_block_work(b, rb, 0, ks, 1);
                assert_eq!((r, s, k), (b / ks, b % ks, ks));
                assert!(!seen[(r * ks + s) as usize]);
                seen[(r * ks + s) as usize] = true;
                let (r2, b0, b1) = qmm_block_range(b, rb, 0, ks, 1, 20);
                let (_, c0, c1) = qmm_block_range(r + s * rb, rb, 0, ks, 0, 20);
                assert_eq!((r2, b0, b1), (r, c0, c1), "the same K range as the global-memory order");
            }
            assert_eq!(seen.iter().filter(|&&x| x).count() as u32, blocks);
        }
        assert!(!qmm_cluster_plan(264, 10) && !qmm_cluster_plan(0, 1) && !qmm_cluster_plan(0, 17));
    }

    /// The cluster plan on nvidia-h200's measured residency of the Q4_K one-tile kernel (clusters
    /// of 2 … 16 resident at once: 132, 79, 62, 47, 39, 32, 30, 23, 21, 16, 16, 14, 14, 14, 14;
    /// docs/perf/engine-2026-11-25/s7/r12-cluster-residency), for the 27B's split shapes.
    #[test]
    fn qmm_cluster_ksplit_picks_what_the_sweep_measured() {
        let mut resident = [0u32; QMM_MAX_CLUSTER as usize + 1];
        let measured = [132, 79, 62, 47, 39, 32, 30, 23, 21, 16, 16, 14, 14, 14, 14];
        for (k, r) in measured.into_iter().enumerate() {
            resident[k + 2] = r;
        }
        let slots = 264;
        let pick = |out: u32, units: u32, m: QmmSplitCost| {
            qmm_cluster_ksplit(out / 128, units, qmm_split_plan(out, units, slots), slots, &resident, m)
        };
        // Q4_K 6144→5120: 6 global splits → clusters of 5; 17408→5120 → clusters of 5 (even at n = 1,
        // ahead at n = 22); attention q + k 5120→13312: 5 global splits in two waves → clusters of 2.
        assert_eq!(pick(5120, 24, QMM_SPLIT_COST_Q4_K), 5);
        assert_eq!(pick(5120, 68, QMM_SPLIT_COST_Q4_K), 5);
        assert_eq!(pick(13_312, 20, QMM_SPLIT_COST_Q4_K), 2);
        // Q6_K 17408→5120 stays global: its longer per-unit time outweighs the cheaper reduction.
        assert_eq!(pick(5120, 68, QMM_SPLIT_COST_Q6_K), 0);
        // Mixed plans (whole waves unsplit) and unsplit matrices keep their plan.
        assert_eq!(pick(34_816, 20, QMM_SPLIT_COST_Q4_K), 0);
        assert_eq!(pick(5120, 1, QMM_SPLIT_COST_Q4_K), 0);
        // Never a split below 2 units, nor a cluster that does not fit.
        for units in [2u32, 3, 4, 7, 24, 68] {
            for out in [128u32, 1024, 5120, 12_288, 20_480] {
                let k = pick(out, units, QMM_SPLIT_COST_Q4_K);
                assert!(k == 0 || (units >= 2 * k && resident[k as usize] >= out / 128), "{out} {units} -> {k}");
            }
        }
    }

    #[test]
    fn qmm_ksplit_pow2_depends_on_shape_and_keeps_two_blocks_per_split() {
        assert_eq!(qmm_ksplit_pow2(248_320, 20), 1);
        assert_eq!(qmm_ksplit_pow2(5120, 20), 8);
        assert_eq!(qmm_ksplit_pow2(5120, 68), 16);
        assert_eq!(qmm_ksplit_pow2(17408, 20), 4);
        for out in [1u32, 100, 5120, 17408, 248_320] {
            for bpr in [1u32, 2, 3, 20, 68, 544] {
                let s = qmm_ksplit_pow2(out, bpr);
                assert!(s.is_power_of_two() && s <= 16);
                assert!(s == 1 || bpr >= 2 * s, "{out} {bpr} {s}");
            }
        }
    }

    #[test]
    fn topk_geometry_depends_on_vocab_only_and_fits_the_merge() {
        assert_eq!(topk_splits(248_320), 61);
        assert_eq!(topk_splits(4096), 1);
        assert_eq!(topk_splits(4097), 2);
        assert!(topk_fits(248_320, 64) && topk_fits(262_144, 64) && !topk_fits(262_145, 64));
        assert!(topk_fits(1, 1) && !topk_fits(1, 2) && !topk_fits(100, 0) && !topk_fits(100, 65));
        // 15 rows × 61 segments × (k keys + k ids + max + sum).
        assert_eq!(topk_scratch_words(15, 248_320, 8), 15 * 61 * 18);
    }

    #[test]
    fn gemv_split_depends_on_shape_and_stays_in_range() {
        assert_eq!(gemv_split(28672, 4096), 1);
        assert_eq!(gemv_split(17408, 5120), 1);
        assert_eq!(gemv_split(5120, 17408), 4);
        assert_eq!(gemv_split(8, 100_000), 8);
        assert_eq!(gemv_split(10, 1000), 1);
        for out in [1u32, 7, 100, 5000, 20000] {
            for inp in [1u32, 300, 4096, 17408, 1 << 20] {
                let s = gemv_split(out, inp);
                assert!(matches!(s, 1 | 2 | 4 | 8), "{out}x{inp} → {s}");
            }
        }
    }
}

/// Most nodes one target forward takes (a tree verify, a prefill chunk, or one AR token): the
/// width of the `u64` ancestor masks. Buffers with one row per node are sized for it; the
/// kernels' shared memory is sized for the launch's node count (graphs are captured per count),
/// so a forward of `n ≤ 32` nodes costs what it did when this was 32. Products of more than
/// [`QMM_MAX_N`] columns run as column chunks (each reads all the weights).
pub const MAX_NODES: u32 = 64;

/// One forward's batch of nodes, kept in **device memory** (kernels take a pointer to it), so a
/// captured step replays with new values: the host rewrites this struct, never the launches.
///
/// Node `i` (`i < n`) has token `tokens[i]`, parent `parent[i]` (−1 = the last committed token,
/// else an earlier node: `parent[i] < i`), `depth[i]` (0 for a child of the committed tokens),
/// position `n_past + depth[i]`, and sees the committed tokens `0..n_past` plus the nodes whose
/// bits are set in `anc[i]` (its ancestors and itself). A node's scratch rows (KV slot
/// `n_past + i`, recurrent inputs, conv inputs) are indexed by `i`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeBatch {
    /// Tokens already in the caches (KV rows `0..n_past`).
    pub n_past: u32,
    /// Nodes in this batch, `1..=MAX_NODES`.
    pub n: u32,
    pub tokens: [u32; MAX_NODES as usize],
    pub parent: [i32; MAX_NODES as usize],
    pub depth: [u32; MAX_NODES as usize],
    /// Bit `j` of `anc[i]`: node `j` is node `i` or one of its ancestors.
    pub anc: [u64; MAX_NODES as usize],
}

// No padding: `n_past`, `n`, three `u32`/`i32` arrays, then the `u64` masks at an 8-byte offset,
// the same on the host and the device.
const _: () = assert!(
    core::mem::size_of::<NodeBatch>() == 8 + 12 * MAX_NODES as usize + 8 * MAX_NODES as usize
        && core::mem::offset_of!(NodeBatch, anc) == 8 + 12 * MAX_NODES as usize
        && core::mem::offset_of!(NodeBatch, anc) % 8 == 0
);

impl NodeBatch {
    /// An empty batch at `n_past` (no nodes).
    pub const fn empty(n_past: u32) -> Self {
        NodeBatch {
            n_past,
            n: 0,
            tokens: [0; MAX_NODES as usize],
            parent: [-1; MAX_NODES as usize],
            depth: [0; MAX_NODES as usize],
            anc: [0; MAX_NODES as usize],
        }
    }
}

/// The accepted path of the last forward, in **device memory**: `nodes[0..len]` are node
/// indices of that forward's [`NodeBatch`], root first, each the parent of the next
/// (so strictly increasing). Commit kernels keep exactly these nodes' effects: KV rows move from
/// slot `n_past + nodes[p]` to `n_past + p`, the recurrent state advances through the path's
/// updates in order, the conv window shifts in the path's inputs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitPath {
    /// `NodeBatch::n_past` of the forward being committed.
    pub n_past: u32,
    /// Nodes kept, `0..=MAX_NODES`.
    pub len: u32,
    pub nodes: [u32; MAX_NODES as usize],
}

/// Value columns one lane group of the `gdn_*` recurrence kernels covers per warp: a warp is 8
/// columns × 4 row slices (lane `l`: column `l mod 8`, slice `l / 8`), so each state row read is
/// one whole 32-byte sector.
pub const GDN_COLS_PER_WARP: u32 = 8;
/// Lanes sharing one value column (each holds `d_k / 4` consecutive key rows of it).
pub const GDN_LANES_PER_COL: u32 = 4;
/// Warps per block of `gdn_recur_*` and `gdn_commit_*` (`2 · 8 = 16` value columns per block).
pub const GDN_RECUR_WARPS: u32 = 2;
/// Value columns per block of `gdn_recur_*` and `gdn_commit_*`.
pub const GDN_COLS_PER_BLOCK: u32 = GDN_RECUR_WARPS * GDN_COLS_PER_WARP;
/// Saved node states (besides the root) a one-program `gdn_recur_*` block keeps in shared
/// memory: the branch points of the depth-first replay schedule ([`gdn_replay`]) whose later
/// children still need their state. Only speed depends on it: every node's state is the same
/// chain of per-token updates from the root whatever the schedule.
pub const GDN_SLOTS: u32 = 4;
/// Most programs of a `gdn_recur_*` block: program `p` is warps `2p, 2p + 1` (the block's 16
/// value columns), running its own part of the replay schedule ([`GdnReplay::start`]). Three
/// and four (one slot each) measured slower than two on nvidia-h200 at 22 nodes: their blocks
/// fit two per SM, not three (docs/perf/deltanet.md v1.10).
pub const GDN_MAX_PROGRAMS: u32 = 2;
/// Most nodes a forward splits over several programs ([`gdn_programs_for`]): beyond it one
/// program, so [`gdn_replay_max_ops`] keeps its single-program bound. At `d_k = 128` two programs
/// of 24 nodes still fit three blocks per SM (74 KB each; 25 nodes would not).
pub const GDN_PROGRAMS_MAX_NODES: u32 = 24;
/// Fewest nodes a forward splits over two programs by default ([`gdn_programs`]). On
/// nvidia-h200 the 27B's 8-node forward measured 0.7 ms faster with two programs and the 5-, 6-
/// and 7-node ones 0.4–0.5 ms slower (4 nodes: equal) — through every matmul of the chain
/// running ≈ 7 % faster or slower, not through the replay's own time (docs/perf/deltanet.md
/// v1.10).
pub const GDN_PROGRAMS_MIN_NODES: u32 = 8;

/// Programs a `gdn_recur_*` launch of `n` nodes runs by default: two for
/// `GDN_PROGRAMS_MIN_NODES..=GDN_PROGRAMS_MAX_NODES` nodes, else one. A block's threads are
/// `64 · programs` ([`GDN_RECUR_THREADS`] per program).
pub const fn gdn_programs(n: u32) -> u32 {
    gdn_programs_for(n, 2)
}

/// `requested` programs (clamped to `1..=GDN_MAX_PROGRAMS`) where `n` allows several
/// (`GDN_PROGRAMS_MIN_NODES..=GDN_PROGRAMS_MAX_NODES`), else one.
pub const fn gdn_programs_for(n: u32, requested: u32) -> u32 {
    if n < GDN_PROGRAMS_MIN_NODES || n > GDN_PROGRAMS_MAX_NODES || requested <= 1 {
        1
    } else if requested > GDN_MAX_PROGRAMS {
        GDN_MAX_PROGRAMS
    } else {
        requested
    }
}

/// Saved-state slots per program besides its root copy in a forward of `n` nodes over
/// `programs` programs ([`gdn_replay`] uses no more, and [`gdn_recur_smem_words`] sizes no
/// more): none below 3 nodes (no branch point is possible, and the committed state is never
/// reloaded), else `GDN_SLOTS` for one program, 2 each for two, 1 each for more. A slot is
/// `d_k/4 · 64` floats of shared memory per block (8 KB at `d_k = 128`), which the kernels
/// chained after the replay can use instead: on nvidia-h200 the 27B's AR step went from
/// 135.9/135.6 to 140.9/141.5 tok/s without the five slots it had reserved at one node. Fewer
/// slots would do for small trees too (below `2^(s+2) − 1` nodes no branch point nests deeper
/// than `s` pending ones, see [`gdn_replay_max_ops`]), but 3 slots at 22 nodes chained
/// 0.15–0.18 ms slower in one program (docs/perf/deltanet.md v1.4).
pub const fn gdn_slots(n: u32, programs: u32) -> u32 {
    if n < 3 {
        0
    } else if programs <= 1 {
        GDN_SLOTS
    } else if programs == 2 {
        2
    } else {
        1
    }
}

/// State slots of a `gdn_recur_*` block: `programs · (1 + gdn_slots)` (each program's root copy
/// and saved branch points), none below 3 nodes.
pub const fn gdn_slot_count(n: u32, programs: u32) -> u32 {
    if n < 3 {
        0
    } else {
        programs * (1 + gdn_slots(n, programs))
    }
}

/// Most operations of a [`GdnReplay`] (any node count; [`gdn_replay_max_ops`] per count).
pub const GDN_REPLAY_MAX_OPS: usize = 768;

/// Most operations [`gdn_replay`] emits for `n` nodes over `programs` programs. One program:
/// `n` computed nodes, at most `n` saves and `n` loads, one save of the committed state, and
/// replays only at a branch point nested deeper than `GDN_SLOTS` pending ones. Only a node with
/// two or more inner (non-leaf) children is a branch point that needs its state again; its inner
/// children are visited smallest first, so a pending branch point's current child holds at most
/// `(s − 1)/2` of its `s` nodes, and a branch point has at least 3: the 5th nested one needs
/// `n ≥ 63` — below that every node costs one computation. From 63 on, at most `n · n / 8`
/// replayed updates (such a branch point's nearest saved ancestor roots at most `n / 8` nodes):
/// 705 operations at `n = 64`. Several programs (only up to `GDN_PROGRAMS_MAX_NODES` nodes): each
/// computes at most `n` nodes (its own and their ancestors) with no replay — a split that would
/// replay falls back to one program with every slot — so at most `programs · (3n + 1)`.
/// `gdn_recur_*` stages this many in shared memory.
pub const fn gdn_replay_max_ops(n: u32, programs: u32) -> u32 {
    let replays = if n < (1 << (GDN_SLOTS + 2)) - 1 { 0 } else { n * n / (1 << (GDN_SLOTS - 1)) };
    let one = 3 * n + 1 + replays;
    let several = if programs > 1 { programs * (3 * n + 1) } else { 0 };
    let ops = if several > one { several } else { one };
    if ops > GDN_REPLAY_MAX_OPS as u32 {
        GDN_REPLAY_MAX_OPS as u32
    } else {
        ops
    }
}

/// Kinds of a [`GdnReplay`] operation (bits 6–8, [`GDN_OP_KIND`]; bits 0–5 are its node or
/// slot): load the registers from slot `x`, save them to slot `x` (a program's first slot holds
/// the committed state once its schedule has saved it there, the others saved branch points),
/// apply node `x`'s update, write node `x`'s output and apply its update, write node `x`'s
/// output and leave the registers as they are (a leaf: its output needs only its parent's
/// state, which the registers hold). A node's output is the same function of its parent's state
/// in both output kinds.
pub const GDN_OP_LOAD: u16 = 0;
pub const GDN_OP_SAVE: u16 = 1 << 6;
pub const GDN_OP_STEP: u16 = 2 << 6;
pub const GDN_OP_OUT: u16 = 3 << 6;
pub const GDN_OP_LEAF: u16 = 4 << 6;
/// The kind bits of a [`GdnReplay`] operation.
pub const GDN_OP_KIND: u16 = 7 << 6;

/// The order in which a `gdn_recur_*` block computes a tree's states, built on the host from the
/// node batch by [`gdn_replay`]: program `p` of every block runs operations
/// `start[p] .. start[p + 1]` (`GDN_OP_*`), starting with the committed state in its registers.
/// Each node's output is written by exactly one program; each node's state is the chain of
/// per-token updates along its ancestors whatever the schedule, so the schedule changes only
/// the work, never a bit.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnReplay {
    /// Operations used, `≤ GDN_REPLAY_MAX_OPS`.
    pub len: u32,
    /// First operation of each program; `start[p] = len` for programs past the last used.
    pub start: [u16; GDN_MAX_PROGRAMS as usize + 2],
    pub ops: [u16; GDN_REPLAY_MAX_OPS],
}

/// Relative costs of a schedule's operations (tenths of an inner node's output and update),
/// for choosing how to split a tree over programs: the warp's serial chain per operation.
const COST_OUT: u32 = 10;
const COST_LEAF: u32 = 7;
const COST_STEP: u32 = 9;
const COST_SLOT: u32 = 2;

/// The one-program replay schedule of `nb` ([`gdn_replay_programs`] with one program).
pub fn gdn_replay(nb: &NodeBatch) -> Option<GdnReplay> {
    gdn_replay_programs(nb, 1)
}

/// The replay schedule of `nb`'s nodes (parents before children, as a `NodeBatch` holds them) for a launch of
/// `programs` programs ([`gdn_programs_for`] of the node count: the caller launches that many). With several, the nodes
/// are split into subtrees by a greedy cost model (`ReplayTree::split`: each split moves the subtrees that most lower
/// the costliest program's cost); a program computes the states of its nodes' ancestors it does not own
/// (`GDN_OP_STEP`). If a split program would replay a branch point, or no split lowers the costliest program's cost,
/// the whole tree goes to program 0 with all of the block's slots.
///
/// Each program's schedule: depth first from the committed state, each node computed once from
/// its parent's state — a leaf's output without touching the registers (`GDN_OP_LEAF`, its
/// parent's leaves first), an inner node's output and state (`GDN_OP_OUT`; `GDN_OP_STEP` for an
/// ancestor the program does not own), inner children in ascending subtree size (the largest
/// last, so nested branch points stay few); a node with two or more inner children saves its
/// state in a free slot before its first inner child and reloads it before each later one (the
/// slot is freed before the last). A branch point that finds no free slot is recomputed from its
/// nearest saved ancestor (or the committed state) with `GDN_OP_STEP`s. The committed state is
/// saved to the program's first slot as its first operation if the program reloads it. `None`
/// only if the schedule would pass [`gdn_replay_max_ops`] (not possible for a valid batch, see
/// there) or a parent does not precede its child.
pub fn gdn_replay_programs(nb: &NodeBatch, programs: u32) -> Option<GdnReplay> {
    const M: usize = MAX_NODES as usize;
    let n = (nb.n as usize).min(M);
    let programs = gdn_programs_for(n as u32, programs) as usize;
    let t = ReplayTree::new(nb, n)?;
    let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    let total_slots = gdn_slot_count(n as u32, programs as u32) as usize;
    let mut r = GdnReplay { len: 0, start: [0; GDN_MAX_PROGRAMS as usize + 2], ops: [0; GDN_REPLAY_MAX_OPS] };
    if programs > 1 {
        let owned = t.split(all, programs);
        if owned[1] != 0 {
            let region = total_slots / programs;
            let mut ok = true;
            for (p, &o) in owned.iter().enumerate().take(programs) {
                r.start[p] = r.len as u16;
                ok &= o == 0 || t.build(&mut r, o, p * region, region, false);
            }
            if ok && r.len <= gdn_replay_max_ops(n as u32, programs as u32) {
                for s in &mut r.start[programs..] {
                    *s = r.len as u16;
                }
                return Some(r);
            }
            r.len = 0;
        }
    }
    r.start = [0; GDN_MAX_PROGRAMS as usize + 2];
    let ok = t.build(&mut r, all, 0, total_slots.max(1), true);
    for s in &mut r.start[1..] {
        *s = r.len as u16;
    }
    if ok && r.len <= gdn_replay_max_ops(n as u32, programs as u32) {
        Some(r)
    } else {
        None
    }
}

/// A node batch's tree as [`gdn_replay_programs`] walks it: parents, children and subtrees as
/// bit masks of node indices.
struct ReplayTree {
    n: usize,
    /// Parent per node (`ROOT` for the committed state).
    parent: [usize; MAX_NODES as usize],
    /// Children of each node, and of the root at index `MAX_NODES`.
    kids: [u64; MAX_NODES as usize + 1],
    /// Each node and its descendants.
    desc: [u64; MAX_NODES as usize],
    /// Each node and its ancestors.
    anc: [u64; MAX_NODES as usize],
}

impl ReplayTree {
    const ROOT: usize = MAX_NODES as usize;

    fn new(nb: &NodeBatch, n: usize) -> Option<Self> {
        let mut t = ReplayTree {
            n,
            parent: [Self::ROOT; MAX_NODES as usize],
            kids: [0; MAX_NODES as usize + 1],
            desc: [0; MAX_NODES as usize],
            anc: [0; MAX_NODES as usize],
        };
        let mut i = 0;
        while i < n {
            let p = nb.parent[i];
            t.anc[i] = 1 << i;
            if p >= 0 {
                if p as usize >= i {
                    return None;
                }
                t.parent[i] = p as usize;
                t.anc[i] |= t.anc[p as usize];
            }
            t.kids[t.parent[i]] |= 1 << i;
            i += 1;
        }
        let mut i = n;
        while i > 0 {
            i -= 1;
            t.desc[i] |= 1 << i;
            if t.parent[i] != Self::ROOT {
                t.desc[t.parent[i]] |= t.desc[i];
            }
        }
        Some(t)
    }

    /// The nodes a program owning `owned` computes: `owned` and all their ancestors.
    fn closure(&self, owned: u64) -> u64 {
        let mut r = 0;
        let mut k = owned;
        while k != 0 {
            r |= self.anc[k.trailing_zeros() as usize];
            k &= k - 1;
        }
        r
    }

    /// The cost model of a program owning `owned` (`COST_*` per operation, ignoring replays): an
    /// owned node with children in the program is an output and update, one without a leaf, a
    /// node not owned an update; a node (or the root) with `c ≥ 2` inner children `c` slot
    /// operations.
    fn cost(&self, owned: u64) -> u32 {
        let r = self.closure(owned);
        // Nodes of the program with a child in it.
        let mut inner = 0u64;
        let mut k = r;
        while k != 0 {
            let x = k.trailing_zeros() as usize;
            k &= k - 1;
            if self.parent[x] != Self::ROOT {
                inner |= 1 << self.parent[x];
            }
        }
        let mut c = COST_OUT * (owned & inner).count_ones()
            + COST_LEAF * (owned & !inner).count_ones()
            + COST_STEP * (r & !owned).count_ones();
        let mut k = inner;
        loop {
            let kids = if k == 0 { self.kids[Self::ROOT] } else { self.kids[k.trailing_zeros() as usize] };
            let branches = (kids & inner).count_ones();
            if branches >= 2 {
                c += COST_SLOT * branches;
            }
            if k == 0 {
                break;
            }
            k &= k - 1;
        }
        c
    }

    /// Owned node sets of `programs` programs (bit masks, program 0 first): starting from one
    /// program owning every node, each further program takes the part of the costliest
    /// program's nodes — one subtree, or the subtrees of one node's first `k` children — that
    /// most lowers the larger of the two programs' costs; empty where none lowers it.
    fn split(&self, all: u64, programs: usize) -> [u64; GDN_MAX_PROGRAMS as usize] {
        let mut owned = [0u64; GDN_MAX_PROGRAMS as usize];
        let mut cost = [0u32; GDN_MAX_PROGRAMS as usize];
        owned[0] = all;
        cost[0] = self.cost(all);
        let mut p = 1;
        while p < programs {
            let mut q = 0;
            let mut j = 1;
            while j < p {
                if cost[j] > cost[q] {
                    q = j;
                }
                j += 1;
            }
            let (mut best, mut best_move, mut best_costs) = (cost[q], 0u64, (0, 0));
            let mut consider = |moved: u64| {
                if moved != 0 && moved != owned[q] {
                    let (a, b) = (self.cost(owned[q] & !moved), self.cost(moved));
                    if a.max(b) < best {
                        (best, best_move, best_costs) = (a.max(b), moved, (a, b));
                    }
                }
            };
            // One subtree, or the first children's subtrees of one node (siblings together).
            let mut v = 0;
            while v <= self.n {
                let node = if v == self.n { Self::ROOT } else { v };
                if v < self.n {
                    consider(self.desc[v] & owned[q]);
                }
                let mut moved = 0;
                let mut k = self.kids[node];
                while k != 0 {
                    moved |= self.desc[k.trailing_zeros() as usize] & owned[q];
                    k &= k - 1;
                    if k != 0 {
                        consider(moved);
                    }
                }
                v += 1;
            }
            if best_move == 0 {
                break;
            }
            owned[q] &= !best_move;
            owned[p] = best_move;
            (cost[q], cost[p]) = best_costs;
            p += 1;
        }
        owned
    }

    /// Appends the schedule of a program owning `owned` to `r`, with slots `first ..
    /// first + count` (the first for the committed state); `false` if it would pass the operation
    /// array or (unless `replay_ok`) recompute a branch point.
    fn build(&self, r: &mut GdnReplay, owned: u64, first: usize, count: usize, replay_ok: bool) -> bool {
        const MAX_SLOTS: usize = (GDN_MAX_PROGRAMS * (1 + GDN_SLOTS)) as usize;
        let count = count.clamp(1, MAX_SLOTS);
        let in_r = self.closure(owned);
        let mut size = [0u32; MAX_NODES as usize];
        let mut i = self.n;
        while i > 0 {
            i -= 1;
            if in_r >> i & 1 == 1 {
                size[i] += 1;
                if self.parent[i] != Self::ROOT {
                    size[self.parent[i]] += size[i];
                }
            }
        }
        let start = r.len as usize;
        // One operation kept free for the committed state's save, inserted at the start.
        let mut b = ReplayBuilder {
            r,
            end: GDN_REPLAY_MAX_OPS - 1,
            tree: self,
            in_r,
            owned,
            size,
            slot_node: [ReplayBuilder::FREE; MAX_SLOTS],
            first,
            count,
            cur: Self::ROOT,
            root_loaded: false,
            replayed: false,
            ok: true,
        };
        b.slot_node[0] = Self::ROOT;
        b.children(Self::ROOT);
        let (ok, root_loaded, replayed) = (b.ok, b.root_loaded, b.replayed);
        if !ok || (replayed && !replay_ok) {
            return false;
        }
        if root_loaded {
            let end = r.len as usize;
            r.ops.copy_within(start..end, start + 1);
            r.ops[start] = GDN_OP_SAVE | first as u16;
            r.len += 1;
        }
        true
    }
}

/// State of [`ReplayTree::build`]'s depth-first walk of one program.
struct ReplayBuilder<'a> {
    r: &'a mut GdnReplay,
    /// Operations the walk may fill (`r.ops[..end]`).
    end: usize,
    tree: &'a ReplayTree,
    /// Nodes the program computes (owned ones and their ancestors), and the owned ones.
    in_r: u64,
    owned: u64,
    /// Subtree sizes within `in_r`.
    size: [u32; MAX_NODES as usize],
    /// Node whose state each of the program's slots holds (slot `first + i` at `i`): the
    /// first the root (`ROOT`, the committed state), the others a saved branch point or `FREE`.
    slot_node: [usize; (GDN_MAX_PROGRAMS * (1 + GDN_SLOTS)) as usize],
    first: usize,
    count: usize,
    /// Node whose state the registers hold.
    cur: usize,
    root_loaded: bool,
    replayed: bool,
    ok: bool,
}

impl ReplayBuilder<'_> {
    /// A slot holding no state.
    const FREE: usize = usize::MAX;

    /// The program's slot (absolute index) holding node `v`'s state.
    fn slot_of(&self, v: usize) -> Option<usize> {
        self.slot_node[..self.count].iter().position(|&x| x == v).map(|i| self.first + i)
    }

    fn emit(&mut self, op: u16) {
        if (self.r.len as usize) < self.end {
            self.r.ops[self.r.len as usize] = op;
            self.r.len += 1;
        } else {
            self.ok = false;
        }
    }

    /// Brings node `v`'s state (or the root's) into the registers.
    fn restore(&mut self, v: usize) {
        if self.cur == v {
            return;
        }
        // The nearest ancestor-or-self with a saved state (the root always has one).
        let mut path = [0usize; MAX_NODES as usize];
        let mut len = 0;
        let mut a = v;
        let slot = loop {
            if let Some(s) = self.slot_of(a) {
                break s;
            }
            path[len] = a;
            len += 1;
            a = self.tree.parent[a];
        };
        if slot == self.first {
            self.root_loaded = true;
        }
        self.replayed |= len > 0;
        self.emit(GDN_OP_LOAD | slot as u16);
        while len > 0 {
            len -= 1;
            self.emit(GDN_OP_STEP | path[len] as u16);
        }
        self.cur = v;
    }

    /// Visits the children of `v` within the program (the registers hold `v`'s state): its
    /// leaves, then its inner children smallest subtree first.
    fn children(&mut self, v: usize) {
        let mut kids = [0usize; MAX_NODES as usize];
        let mut k = 0;
        let mut m = self.tree.kids[v] & self.in_r;
        while m != 0 {
            kids[k] = m.trailing_zeros() as usize;
            m &= m - 1;
            k += 1;
        }
        // Insertion sort by (size, index): the largest subtree last.
        let mut i = 1;
        while i < k {
            let x = kids[i];
            let mut j = i;
            while j > 0 && (self.size[kids[j - 1]], kids[j - 1]) > (self.size[x], x) {
                kids[j] = kids[j - 1];
                j -= 1;
            }
            kids[j] = x;
            i += 1;
        }
        // Leaves (subtree size 1, sorted first; always owned) read the registers without
        // changing them.
        let mut leaves = 0;
        while leaves < k && self.size[kids[leaves]] == 1 {
            self.ok &= self.owned >> kids[leaves] & 1 == 1;
            self.emit(GDN_OP_LEAF | kids[leaves] as u16);
            leaves += 1;
        }
        let inner = k - leaves;
        // A branch point keeps its state for its later inner children in a free slot, if any.
        if v != ReplayTree::ROOT && inner >= 2 {
            let mut s = 1;
            while s < self.count {
                if self.slot_node[s] == Self::FREE {
                    self.slot_node[s] = v;
                    self.emit(GDN_OP_SAVE | (self.first + s) as u16);
                    break;
                }
                s += 1;
            }
        }
        let mut j = leaves;
        while j < k {
            if j > leaves {
                self.restore(v);
            }
            if j + 1 == k && v != ReplayTree::ROOT {
                if let Some(s) = self.slot_of(v) {
                    self.slot_node[s - self.first] = Self::FREE;
                }
            }
            let c = kids[j];
            let kind = if self.owned >> c & 1 == 1 { GDN_OP_OUT } else { GDN_OP_STEP };
            self.emit(kind | c as u16);
            self.cur = c;
            self.children(c);
            j += 1;
        }
    }
}

/// Threads per block of `gdn_prep` (one channel per thread, looping past 128).
pub const GDN_PREP_THREADS: u32 = 128;
/// Nodes per block of `gdn_prep_pairs` (grid `⌈n / 2⌉` along x); `gdn_prep` takes one.
pub const GDN_PREP_NODES_PER_BLOCK: u32 = 2;
/// Longest causal conv kernel the `gdn_*` kernels take.
pub const GDN_MAX_CONV_KERNEL: u32 = 8;
/// Most value heads `gdn_norm_prep_*` takes (its long-row path keeps one `1/rms` per head in
/// the block's 6144-float staging row).
pub const GDN_NORM_PREP_MAX_HEADS: u32 = 6144;

/// Shapes of one Gated DeltaNet layer as the `gdn_*` kernels take them.
///
/// Channels of `mixed`/`conv_state`: `q [n_k·d_k] | k [n_k·d_k] | v [n_v·d_v]`
/// (`conv_ch = 2·n_k·d_k + n_v·d_v`); value head `j` reads key head `j mod n_k`. `eps` is the
/// gated RMSNorm's. `layers` (commit only): layers in the arenas; the per-layer strides are
/// `n_v·d_k·d_v` (state), `(K−1)·conv_ch` (conv window), `MAX_NODES·mixed_stride` (mixed) and
/// [`gdn_scratch_len`] (scratch). `mixed_stride` (forward and commit): the row stride (f32) of
/// `mixed`, at least `conv_ch` (larger when the rows are the first columns of a wider product,
/// the engine's `[mixed | z | beta | alpha]`). `z_stride`, `a_stride`, `b_stride` (forward only): the row
/// strides (f32) of the forward's inputs `z` (node `i`'s row at `i·z_stride`, `n_v·d_v` wide),
/// `a` and `b` (`n_v` wide), at least the widths — larger when they are column ranges of one
/// wider product (the engine's `[z | beta | alpha]` rows).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GdnParams {
    pub n_k: u32,
    pub n_v: u32,
    pub d_k: u32,
    pub d_v: u32,
    pub conv_kernel: u32,
    pub conv_ch: u32,
    pub eps: f32,
    pub layers: u32,
    pub mixed_stride: u32,
    pub z_stride: u32,
    pub a_stride: u32,
    pub b_stride: u32,
    /// Node rows of the dynamic shared memory of `gdn_recur_*` ([`gdn_recur_smem_words`]) and
    /// `gdn_commit_*` ([`gdn_commit_smem_words`]), `1..=MAX_NODES`: the launch's node count
    /// (recur) or a bound on the path's length (commit). The kernels take at most this many
    /// nodes (the shared arrays' row count and stride), so shared memory follows the batch
    /// rather than `MAX_NODES`.
    pub smem_nodes: u32,
}

/// Offsets (in f32) of the per-node rows in one layer's `gdn` scratch, `MAX_NODES` (`M`) rows
/// each, row `i` = node `i` of the forward:
/// `q [M][n_k·d_k]` (L2-normalised, scaled by `1/√d_k`), `k [M][n_k·d_k]` (L2-normalised),
/// `v [M][n_v·d_v]` (after conv + SiLU), `alpha [M][n_v]` (`e^g`), `beta [M][n_v]`,
/// `o [M][n_v·d_v]` (recurrence output, before the gated norm); `len` floats in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnScratch {
    pub q: usize,
    pub k: usize,
    pub v: usize,
    pub alpha: usize,
    pub beta: usize,
    pub o: usize,
    pub len: usize,
}

/// The scratch layout of a layer with `n_k` key heads, `n_v` value heads and head dims
/// `d_k`, `d_v`: `len = MAX_NODES·(2·n_k·d_k + 2·n_v·d_v + 2·n_v)` floats.
pub const fn gdn_scratch(n_k: usize, n_v: usize, d_k: usize, d_v: usize) -> GdnScratch {
    let m = MAX_NODES as usize;
    let (kd, vd) = (n_k * d_k, n_v * d_v);
    let q = 0;
    let k = q + m * kd;
    let v = k + m * kd;
    let alpha = v + m * vd;
    let beta = alpha + m * n_v;
    let o = beta + m * n_v;
    GdnScratch { q, k, v, alpha, beta, o, len: o + m * vd }
}

/// Floats of one layer's `gdn` scratch ([`gdn_scratch`]`.len`).
pub const fn gdn_scratch_len(n_k: usize, n_v: usize, d_k: usize, d_v: usize) -> usize {
    gdn_scratch(n_k, n_v, d_k, d_v).len
}

/// Threads per block of `gdn_commit_*`, and per program of `gdn_recur_*` (a block of `p`
/// programs has `p · GDN_RECUR_THREADS`).
pub const GDN_RECUR_THREADS: u32 = GDN_RECUR_WARPS * 32;

// `gdn_recur_*` and `gdn_commit_*` stage one node's masks / α / β per thread.
const _: () = assert!(MAX_NODES <= GDN_RECUR_THREADS && MAX_NODES <= 64 && MAX_NODES.is_power_of_two());

/// Dynamic shared memory of `gdn_recur_*` for key head dim `d_k`, `n` node rows
/// ([`GdnParams::smem_nodes`], the launch's node count) and `programs` programs (4-byte words):
/// `k [n][d_k]`, `q [n][d_k]`, `v [n][16 columns]`, `alpha [n]`, `beta [n]`, `kᵀq [n]`, the
/// replay schedule's operations ([`gdn_replay_max_ops`]`(n, programs)` u16), then
/// [`gdn_slot_count`]`(n, programs)` state slots of `d_k/4 · 64` floats (each program's root
/// copy and saved branch points; word `r·64 + t` of a slot is row `r` of the program's thread
/// `t`'s slice). At `d_k = 128`: 1.1 KB for one node, 65 KB for 22 in one program, 74 KB for 22
/// in two, 110 KB for 64.
pub const fn gdn_recur_smem_words(d_k: u32, n: u32, programs: u32) -> u32 {
    n * (2 * d_k + GDN_COLS_PER_BLOCK + 3)
        + gdn_replay_max_ops(n, programs).div_ceil(2)
        + gdn_slot_count(n, programs) * (d_k / GDN_LANES_PER_COL) * GDN_RECUR_THREADS
}
pub const fn gdn_commit_smem_words(d_k: u32, n: u32) -> u32 {
    n * (d_k + GDN_COLS_PER_BLOCK + 2)
}

/// Threads per block of the `attention` kernels (8 warps).
pub const ATTN_THREADS: u32 = 256;
/// Keys per tile of `attn_tree_split`: scores, softmax and the value pass run tile by tile.
pub const ATTN_TILE_KEYS: u32 = 64;
/// Largest head dimension of the `attention` kernels (a power of two in `32..=256`).
pub const ATTN_MAX_HEAD_DIM: u32 = 256;
/// Largest GQA group (query heads per KV head) of `attn_tree_split`.
pub const ATTN_MAX_GROUP: u32 = 8;
/// Fewest keys per split of `attn_tree_split` (before rounding to whole tiles).
pub const ATTN_MIN_SPLIT_KEYS: u32 = 128;
/// Most key splits of one node's attention (flash-decoding partials per node and head). 32, not
/// 64: past 4,096 keys longer splits beat more blocks (22-node tree at 8K −0.85 ms, at 24K
/// −1.28 ms; AR +1.4 %: `docs/perf/attention.md`).
pub const ATTN_MAX_SPLITS: u32 = 32;

/// Nodes per 16-row tensor-core tile of `attn_tree_mma_hd*` for `group` query heads per KV head
/// (rows are (node, head) pairs; a node's rows never straddle two tiles): `max(1, 16 / group)`.
pub const fn attn_mma_nodes_per_tile(group: u32) -> u32 {
    if group >= 16 || group == 0 {
        1
    } else {
        16 / group
    }
}

/// Nodes per block of `attn_tree_mma_hd*` (4 row tiles): the grid's `z` is `⌈n / this⌉`.
pub const fn attn_mma_nodes_per_block(group: u32) -> u32 {
    4 * attn_mma_nodes_per_tile(group)
}

/// Rows of each of the K and V regions of `attn_tree_mma_hd*` for a launch of `n` nodes: two
/// tiles (the committed tiles are double-buffered), or the tail's last committed rows and every
/// node's row (`< 64 + n`), whichever is more.
pub const fn attn_mma_region_rows(n: u32) -> u32 {
    if 64 + n > 128 {
        64 + n
    } else {
        128
    }
}

/// Dynamic shared memory of `attn_tree_mma_hd*` for head dim `hd` and a launch of `n` nodes:
/// the f16 Q plane of 64 rows, and the K and V regions ([`attn_mma_region_rows`]).
pub const fn attn_mma_smem_bytes(hd: u32, n: u32) -> u32 {
    (64 + 2 * attn_mma_region_rows(n)) * hd * 2
}

/// Keys per split for a node that sees `keys` keys: `⌈keys / s⌉` rounded up to whole
/// [`ATTN_TILE_KEYS`] tiles, where `s = clamp(⌈keys / ATTN_MIN_SPLIT_KEYS⌉, 1, ATTN_MAX_SPLITS)`.
/// A function of the key count only (never of the batch or the tree), so a node's reduction
/// order is the same whatever else is in the batch.
pub const fn attn_split_len(keys: u32) -> u32 {
    attn_split_len_min(keys, ATTN_MIN_SPLIT_KEYS)
}

/// [`attn_split_len`] with `min_keys` (≥ 1; 0 reads as [`ATTN_MIN_SPLIT_KEYS`]) instead of
/// [`ATTN_MIN_SPLIT_KEYS`]: fewer, longer splits for a caller that does not need the target's
/// rule (the DFlash draft's block, whose 16 nodes would otherwise launch one short block per
/// 128 context keys each).
pub const fn attn_split_len_min(keys: u32, min_keys: u32) -> u32 {
    let min_keys = if min_keys == 0 { ATTN_MIN_SPLIT_KEYS } else { min_keys };
    let mut s = keys.div_ceil(min_keys);
    if s > ATTN_MAX_SPLITS {
        s = ATTN_MAX_SPLITS;
    }
    if s == 0 {
        s = 1;
    }
    let len = keys.div_ceil(s).div_ceil(ATTN_TILE_KEYS) * ATTN_TILE_KEYS;
    if len == 0 {
        ATTN_TILE_KEYS
    } else {
        len
    }
}

/// Non-empty splits of a node that sees `keys` keys (`⌈keys / attn_split_len(keys)⌉`; 0 for 0).
pub const fn attn_splits(keys: u32) -> u32 {
    attn_splits_min(keys, ATTN_MIN_SPLIT_KEYS)
}

/// [`attn_splits`] under [`attn_split_len_min`].
pub const fn attn_splits_min(keys: u32, min_keys: u32) -> u32 {
    keys.div_ceil(attn_split_len_min(keys, min_keys))
}

/// First committed key a node sees under a sliding `window` (0 = no window): a query at position
/// `p = n_past + depth` sees keys at positions `> p − window`, so committed rows
/// `attn_window_lo(..) .. n_past` (`max(0, p + 1 − window)`, at most `n_past`). With
/// `window > depth` (the launchers take windows of at least the launch's node count, which
/// exceeds every depth) every tree key — an ancestor at a depth `≥ 0 > depth − window` — stays
/// visible, so the window only ever trims committed rows.
pub const fn attn_window_lo(n_past: u32, depth: u32, window: u32) -> u32 {
    if window == 0 {
        return 0;
    }
    let end = n_past as u64 + depth as u64 + 1;
    if end <= window as u64 {
        0
    } else {
        let lo = end - window as u64;
        if lo > n_past as u64 {
            n_past
        } else {
            lo as u32
        }
    }
}

/// Split slots per (node, head) that a launch over a cache of `ctx` rows provides (the grid's
/// `x` and the scratch stride): `clamp(⌈ctx / ATTN_MIN_SPLIT_KEYS⌉, 1, ATTN_MAX_SPLITS)`, which
/// bounds [`attn_splits`]`(keys)` for every `keys ≤ ctx`.
pub const fn attn_split_slots(ctx: u32) -> u32 {
    attn_split_slots_min(ctx, ATTN_MIN_SPLIT_KEYS)
}

/// [`attn_split_slots`] under [`attn_split_len_min`].
pub const fn attn_split_slots_min(ctx: u32, min_keys: u32) -> u32 {
    let min_keys = if min_keys == 0 { ATTN_MIN_SPLIT_KEYS } else { min_keys };
    let s = ctx.div_ceil(min_keys);
    if s > ATTN_MAX_SPLITS {
        ATTN_MAX_SPLITS
    } else if s == 0 {
        1
    } else {
        s
    }
}

/// Parameters of `attn_prep` (per-head q/k RMSNorm + partial NeoX RoPE, KV cache write).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnPrepParams {
    /// Nodes of the launch's grid (`≤ MAX_NODES`); nodes `≥ NodeBatch::n` are skipped too.
    pub n: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Rotated dims per head (even, `≤ head_dim`).
    pub n_rot: u32,
    /// Rows of each KV cache plane: rows `≥ ctx` are never written.
    pub ctx: u32,
    /// Positions in the RoPE table: a node at `pos ≥ max_pos` gets NaN queries and no KV write.
    pub max_pos: u32,
    pub eps: f32,
    /// 1: the query input holds `[q | gate]` per head (`2·head_dim` values, the qwen35 target's
    /// gated attention) and the gate is copied out; 0: plain `q` per head (`head_dim` values,
    /// the DFlash draft), no gate.
    pub gated: u32,
    /// Values from node `i`'s query input row to node `i + 1`'s (`≥ n_head·2·head_dim` gated,
    /// `≥ n_head·head_dim` plain); likewise for the k and v inputs (`≥ n_head_kv·head_dim`).
    /// Dense rows have the widths; a merged `[q | k | v]` product has one stride for all three.
    pub q_stride: u32,
    pub k_stride: u32,
    pub v_stride: u32,
}

/// Parameters of `attn_tree_split` and `attn_tree_combine`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttnTreeParams {
    /// Nodes of the launch's grid (`≤ MAX_NODES`, the row count of the scratch partials).
    pub n: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Rows of each KV cache plane; a batch with `n_past + NodeBatch::n > ctx` gives NaN outputs.
    pub ctx: u32,
    /// Split slots per (node, head): [`attn_split_slots`]`(ctx)`.
    pub slots: u32,
    /// `log2(e) / √head_dim` (scores are kept in the base-2 domain).
    pub scale_log2: f32,
    /// 1: outputs are multiplied by `sigmoid(gate)` (the qwen35 target); 0: no gate (the draft).
    pub gated: u32,
    /// The split rule's fewest keys per split ([`attn_split_len_min`]): [`ATTN_MIN_SPLIT_KEYS`]
    /// for the target (its batch-invariant rule), larger for the draft.
    pub min_split_keys: u32,
    /// Sliding window (0 = none, else `≥ n`, above every depth): node `i` sees committed rows
    /// [`attn_window_lo`]`(n_past, depth_i, window) .. n_past` (the DFlash draft's sliding layers).
    pub window: u32,
    /// Blocks `r` that share the `G = n_head / n_head_kv` query heads of one KV head in
    /// `attn_tree_split` (`r | G`; kernel `attn_tree_split_g{G/r}`, grid `y = n_head_kv · r`):
    /// block `y` serves KV head `y / r` and query heads `y·G/r .. (y+1)·G/r`. Each query head's
    /// arithmetic is the same for every `r`, so its output bits do not depend on it.
    pub head_groups: u32,
}

/// Parameters of `kv_commit`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvCommitParams {
    /// KV planes compacted (`2 · attention layers`).
    pub planes: u32,
    /// f16 values per cache row (`n_head_kv · head_dim`, a multiple of 2).
    pub row_elems: u32,
    /// Rows per plane.
    pub ctx: u32,
    pub _pad: u32,
    /// f16 values from one plane's start to the next's.
    pub plane_stride: u64,
}

#[cfg(test)]
mod attn_tests {
    use super::*;

    #[test]
    fn attn_splits_cover_the_keys_in_whole_tiles_within_the_slots() {
        for keys in (1u32..5000).chain([8192, 8193, 32768, 32769, 100_000, 1 << 20]) {
            let len = attn_split_len(keys);
            let s = attn_splits(keys);
            assert!(len.is_multiple_of(ATTN_TILE_KEYS) && len > 0);
            assert!((1..=ATTN_MAX_SPLITS).contains(&s), "{keys}: {s}");
            assert!((s - 1) * len < keys && s * len >= keys, "{keys}: {s} × {len}");
            for ctx in [keys, keys + 1, keys * 2] {
                assert!(s <= attn_split_slots(ctx));
            }
        }
        assert_eq!(attn_splits(0), 0);
        assert_eq!(attn_split_len(4096), 128);
        assert_eq!(attn_splits(4096), 32);
        assert_eq!(attn_split_len(8192), 256);
        assert_eq!(attn_splits(8192), 32);
        assert_eq!(attn_splits(513), 5);
    }

    #[test]
    fn the_window_trims_committed_rows_only() {
        assert_eq!(attn_window_lo(100, 0, 0), 0);
        // p = 100 + 3 = 103 sees positions > 103 − 64 = 39: rows 40..100.
        assert_eq!(attn_window_lo(100, 3, 64), 40);
        assert_eq!(attn_window_lo(10, 3, 64), 0);
        assert_eq!(attn_window_lo(63, 0, 64), 0);
        assert_eq!(attn_window_lo(64, 0, 64), 1);
        assert_eq!(attn_window_lo(u32::MAX, 31, 32), u32::MAX);
        assert_eq!(attn_window_lo(u32::MAX, 0, 32), u32::MAX - 31);
        for n_past in [0u32, 1, 31, 32, 33, 1000] {
            for depth in 0..MAX_NODES {
                for w in [MAX_NODES, MAX_NODES + 1, 100, 2048] {
                    let lo = attn_window_lo(n_past, depth, w);
                    assert!(lo <= n_past);
                    // Visible committed keys plus the node's ancestors never exceed the window.
                    assert!(((n_past - lo) as u64 + depth as u64) < w as u64, "{n_past} {depth} {w}");
                }
            }
        }
    }

    #[test]
    fn gdn_shared_memory_follows_the_node_count() {
        // sm_90: 227 KiB per block at most; 228 KiB per SM, 1 KiB of it reserved per block.
        let (block_max, sm) = (227 * 1024, 228 * 1024);
        for d_k in [16u32, 32, 64, 128] {
            for n in 1..=MAX_NODES {
                for p in 1..=GDN_MAX_PROGRAMS {
                    let (p, p1) = (gdn_programs_for(n, p), gdn_programs_for(n + 1, p));
                    if p == p1 {
                        assert!(gdn_recur_smem_words(d_k, n, p) < gdn_recur_smem_words(d_k, n + 1, p));
                    }
                    assert!(gdn_recur_smem_words(d_k, n, p) * 4 <= block_max, "d_k {d_k}, {n} nodes");
                }
                assert!(gdn_commit_smem_words(d_k, n) * 4 <= block_max);
            }
        }
        // The 27B's d_k = 128: one or two nodes reserve no state slots (the root is never
        // reloaded), trees keep 3 blocks per SM up to 32 nodes (two programs up to 24), 2 at 64.
        let blocks = |n: u32| sm / (gdn_recur_smem_words(128, n, gdn_programs(n)) * 4 + 1024);
        assert_eq!(
            (blocks(1), blocks(2), blocks(3), blocks(22), blocks(24), blocks(25), blocks(32), blocks(64)),
            (109, 72, 5, 3, 3, 3, 3, 2)
        );
        assert_eq!(gdn_recur_smem_words(128, 32, 1) * 4, 76_356);
        assert_eq!((gdn_replay_max_ops(31, 1), gdn_replay_max_ops(62, 1), gdn_replay_max_ops(64, 1)), (94, 187, 705));
        assert_eq!((gdn_replay_max_ops(22, 2), gdn_replay_max_ops(32, 4)), (134, 388));
    }

    #[test]
    fn longer_split_rules_cover_the_keys_within_their_slots() {
        for min in [0u32, 1, 128, 256, 1024, 4096] {
            for keys in (1u32..3000).chain([8192, 8193, 32768, 100_000]) {
                let (len, s) = (attn_split_len_min(keys, min), attn_splits_min(keys, min));
                assert!(len.is_multiple_of(ATTN_TILE_KEYS) && len > 0);
                assert!((1..=ATTN_MAX_SPLITS).contains(&s), "{keys}/{min}: {s}");
                assert!((s - 1) * len < keys && s * len >= keys, "{keys}/{min}: {s} × {len}");
                for ctx in [keys, keys + 1, keys * 2] {
                    assert!(s <= attn_split_slots_min(ctx, min));
                }
            }
        }
        // The target's rule is the 128-key instance; 0 reads as it.
        for keys in [1u32, 700, 8192, 40_000] {
            assert_eq!(attn_split_len_min(keys, ATTN_MIN_SPLIT_KEYS), attn_split_len(keys));
            assert_eq!(attn_split_len_min(keys, 0), attn_split_len(keys));
        }
        assert_eq!(attn_splits_min(8192, 1024), 8);
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;

    fn batch(parents: &[i32]) -> NodeBatch {
        let mut b = NodeBatch::empty(0);
        b.n = parents.len() as u32;
        for (i, &p) in parents.iter().enumerate() {
            b.parent[i] = p;
        }
        b
    }

    /// A simulated state: the nodes whose updates it holds, in order, and their count.
    type Chain = ([u8; 64], usize);

    /// Runs each program of `r` from the committed state on chains of node indices (a "state" is
    /// the list of updates applied from the root), with `slots` shared slots; returns each node's
    /// state when its output was written, and each program's number of updates.
    fn simulate(r: &GdnReplay, n: usize, slots: usize) -> ([Option<Chain>; 64], [usize; GDN_MAX_PROGRAMS as usize]) {
        let mut out = [None; 64];
        let mut slot = [None::<Chain>; 64];
        // The program that uses each slot: programs run concurrently, so they must not share one.
        let mut owner = [None::<usize>; 64];
        let mut updates = [0; GDN_MAX_PROGRAMS as usize];
        for (p, u) in updates.iter_mut().enumerate() {
            let (a, b) = (r.start[p] as usize, r.start[p + 1] as usize);
            assert!(a <= b && b <= r.len as usize, "program {p}: {a}..{b} of {}", r.len);
            let mut cur = ([0u8; 64], 0usize);
            for &op in &r.ops[a..b] {
                let x = (op & 63) as usize;
                if op & GDN_OP_KIND == GDN_OP_LOAD || op & GDN_OP_KIND == GDN_OP_SAVE {
                    assert_eq!(*owner[x].get_or_insert(p), p, "slot {x} used by two programs");
                }
                match op & GDN_OP_KIND {
                    GDN_OP_LOAD => {
                        assert!(x < slots, "slot {x} of {slots}");
                        cur = slot[x].unwrap_or_else(|| panic!("slot {x} loaded before any save"));
                    }
                    GDN_OP_SAVE => {
                        assert!(x < slots, "slot {x} of {slots}");
                        slot[x] = Some(cur);
                    }
                    GDN_OP_LEAF => {
                        // The output of the registers' state plus the node's update; the registers stay.
                        assert!(x < n);
                        let mut leaf = cur;
                        leaf.0[leaf.1] = x as u8;
                        leaf.1 += 1;
                        *u += 1;
                        assert!(out[x].is_none(), "node {x} written twice");
                        out[x] = Some(leaf);
                    }
                    kind => {
                        assert!(kind == GDN_OP_STEP || kind == GDN_OP_OUT, "unknown kind {kind:#x}");
                        assert!(x < n);
                        cur.0[cur.1] = x as u8;
                        cur.1 += 1;
                        *u += 1;
                        if kind == GDN_OP_OUT {
                            assert!(out[x].is_none(), "node {x} written twice");
                            out[x] = Some(cur);
                        }
                    }
                }
            }
        }
        (out, updates)
    }

    /// Checks the schedule of `parents` for `programs` programs (every node written once with
    /// its ancestors' chain, slots within the block's); returns each program's updates.
    fn check_programs(parents: &[i32], programs: u32) -> [usize; GDN_MAX_PROGRAMS as usize] {
        let n = parents.len();
        let p = gdn_programs_for(n as u32, programs);
        let r = gdn_replay_programs(&batch(parents), programs).expect("a schedule");
        assert!(r.len <= gdn_replay_max_ops(n as u32, p), "{} operations for {n} nodes", r.len);
        assert!(r.start[p as usize..].iter().all(|&s| s as u32 == r.len), "{:?}", r.start);
        let (out, updates) = simulate(&r, n, gdn_slot_count(n as u32, p) as usize);
        for (i, got) in out.iter().enumerate().take(n) {
            // The state must be exactly the ancestors' updates from the root, in depth order.
            let mut chain = [0u8; 64];
            let mut len = 0;
            let mut a = i as i32;
            while a >= 0 {
                chain[len] = a as u8;
                len += 1;
                a = parents[a as usize];
            }
            chain[..len].reverse();
            let (got, got_len) = got.unwrap_or_else(|| panic!("node {i} not written ({parents:?})"));
            assert_eq!(&got[..got_len], &chain[..len], "node {i} of {parents:?}");
        }
        updates
    }

    fn check(parents: &[i32]) -> usize {
        check_programs(parents, 1)[0]
    }

    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn every_node_gets_its_ancestor_chain_and_chains_cost_one_update_per_node() {
        let chain: [i32; 22] = core::array::from_fn(|i| i as i32 - 1);
        assert_eq!(check(&chain), 22);
        assert_eq!(gdn_replay(&batch(&chain)).unwrap().len, 22);
        // A forest of roots (each from the committed state) and a star.
        assert_eq!(check(&[-1, -1, -1]), 3);
        assert_eq!(check(&[-1, 0, 0, 0, 0, 0, 0, 0]), 8);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for n in 1..=64usize {
            for _ in 0..50 {
                let parents: [i32; 64] =
                    core::array::from_fn(|i| if i == 0 { -1 } else { (rng(&mut seed) % i as u64) as i32 });
                let updates = check(&parents[..n]);
                // Below 63 nodes no branch point nests deeper than the slots: one update per node.
                if n < 63 {
                    assert_eq!(updates, n, "{:?}", &parents[..n]);
                }
            }
        }
    }

    #[test]
    fn one_or_two_nodes_need_no_slot() {
        assert_eq!([1, 2, 3, 22, 64].map(|n| gdn_slots(n, 1)), [0, 0, GDN_SLOTS, GDN_SLOTS, GDN_SLOTS]);
        assert_eq!([1, 2, 3, 22].map(|n| gdn_slot_count(n, 2)), [0, 0, 6, 6]);
        for parents in [&[-1][..], &[-1, 0], &[-1, -1]] {
            let r = gdn_replay(&batch(parents)).unwrap();
            let kinds = r.ops[..r.len as usize].iter().map(|&op| op & GDN_OP_KIND);
            assert!(kinds.clone().all(|k| k != GDN_OP_SAVE && k != GDN_OP_LOAD));
            assert_eq!(check(parents), parents.len());
        }
    }

    #[test]
    fn leaves_leave_the_registers_so_siblings_need_no_reload() {
        // A star: the root's output and state, then seven leaves from it; no save, no load.
        let r = gdn_replay(&batch(&[-1, 0, 0, 0, 0, 0, 0, 0])).unwrap();
        assert_eq!(
            &r.ops[..r.len as usize],
            [
                GDN_OP_OUT,
                GDN_OP_LEAF | 1,
                GDN_OP_LEAF | 2,
                GDN_OP_LEAF | 3,
                GDN_OP_LEAF | 4,
                GDN_OP_LEAF | 5,
                GDN_OP_LEAF | 6,
                GDN_OP_LEAF | 7
            ]
        );
        // One node (the AR step) is a leaf of the committed state.
        let r = gdn_replay(&batch(&[-1])).unwrap();
        assert_eq!(&r.ops[..r.len as usize], [GDN_OP_LEAF]);
        // Two inner children of node 0 (1 → 3, 2 → 4) and a leaf (5): the leaf first, then a save
        // before the first inner child and a load before the second.
        let r = gdn_replay(&batch(&[-1, 0, 0, 1, 2, 0])).unwrap();
        let ops = &r.ops[..r.len as usize];
        assert_eq!(
            ops,
            [
                GDN_OP_OUT,
                GDN_OP_LEAF | 5,
                GDN_OP_SAVE | 1,
                GDN_OP_OUT | 1,
                GDN_OP_LEAF | 3,
                GDN_OP_LOAD | 1,
                GDN_OP_OUT | 2,
                GDN_OP_LEAF | 4
            ]
        );
        check(&[-1, 0, 0, 1, 2, 0]);
    }

    #[test]
    fn programs_split_a_tree_and_each_node_is_written_once() {
        // Every program count on random trees: outputs exact, slots within the block's.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for programs in 1..=GDN_MAX_PROGRAMS + 1 {
            for n in 1..=64usize {
                for _ in 0..40 {
                    let parents: [i32; 64] = core::array::from_fn(|i| {
                        if i == 0 || rng(&mut seed).is_multiple_of(16) {
                            -1
                        } else {
                            (rng(&mut seed) % i as u64) as i32
                        }
                    });
                    check_programs(&parents[..n], programs);
                }
            }
        }
        // Node 0 with two chains of 10: one chain per program, the second recomputing node 0.
        let mut two: [i32; 21] = core::array::from_fn(|i| i as i32 - 1);
        two[11] = 0;
        assert_eq!(check_programs(&two, 2)[..2], [11, 11]);
        // A chain: the second program recomputes the first's nodes as plain updates (cheaper
        // than outputs) before its own.
        let chain: [i32; 22] = core::array::from_fn(|i| i as i32 - 1);
        let u = check_programs(&chain, 2);
        assert!(u[0] < 22 && u[1] == 22, "{u:?}");
        // A star of 21 leaves under node 0: siblings split about evenly, node 0 recomputed.
        let star: [i32; 22] = core::array::from_fn(|i| if i == 0 { -1 } else { 0 });
        assert_eq!(check_programs(&star, 2)[..2], [11, 12]);
        // Past `GDN_PROGRAMS_MAX_NODES` nodes, and below `GDN_PROGRAMS_MIN_NODES`, one program.
        assert_eq!(
            (gdn_programs(1), gdn_programs(7), gdn_programs(8), gdn_programs(24), gdn_programs(25)),
            (1, 1, 2, 2, 1)
        );
        let long: [i32; 40] = core::array::from_fn(|i| i as i32 - 1);
        assert_eq!(check_programs(&long, 4)[..2], [40, 0]);
    }

    #[test]
    fn the_deepest_nesting_fits_the_operation_bound() {
        // Binary trees nest a branch point at every level: 63 nodes, depth 6, then 64.
        for n in [63usize, 64] {
            let parents: [i32; 64] = core::array::from_fn(|i| if i == 0 { -1 } else { ((i - 1) / 2) as i32 });
            check(&parents[..n]);
            assert!(gdn_replay(&batch(&parents[..n])).unwrap().len <= gdn_replay_max_ops(n as u32, 1));
        }
        // A parent after its child is refused.
        let mut b = batch(&[-1, 2, 0]);
        b.n = 3;
        assert!(gdn_replay(&b).is_none());
    }
}
