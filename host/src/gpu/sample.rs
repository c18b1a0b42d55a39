//! Launchers of `sample` (`gpu-kernels/src/sample.rs`): argmax and top-k log-probabilities over
//! rows of logits, and seeded sampling ([`sample_rows`]). Every launch is chained ([`ChainedLaunch`]) and takes device views, so the
//! engine can graph-capture it; [`argmax`] is the owning-buffer wrapper of [`argmax_rows_span`].

use cudarc::driver::{CudaSlice, LaunchConfig};
use kernel_abi::sampling::{SampleRule, MAX_VOCAB};
use kernel_abi::{
    topk_fits, topk_scratch_words, topk_splits, ArgmaxParams, SampleParams, TopkParams, ARGMAX_SPLITS,
    ROW_BLOCK_THREADS, SAMPLE_MAX_ROWS, SAMPLE_THREADS, TOPK_MAX_K, TOPK_SEGMENT,
};

use super::error::GpuError;
use super::{ChainedLaunch, DevSpan, Gpu, Param};

/// Scratch and outputs of [`argmax`] for up to `rows` rows.
pub struct ArgmaxBuffers {
    part_val: CudaSlice<f32>,
    part_idx: CudaSlice<u32>,
    /// Index of each row's maximum (`u32::MAX` for an all-NaN row).
    pub idx: CudaSlice<u32>,
    /// Each row's maximum.
    pub val: CudaSlice<f32>,
    rows: usize,
}

impl ArgmaxBuffers {
    pub fn new(gpu: &Gpu, rows: usize) -> Result<Self, GpuError> {
        let parts = rows * ARGMAX_SPLITS as usize;
        Ok(ArgmaxBuffers {
            part_val: gpu.zeros(parts)?,
            part_idx: gpu.zeros(parts)?,
            idx: gpu.zeros(rows)?,
            val: gpu.zeros(rows)?,
            rows,
        })
    }
}

/// Argmax of each of `rows` rows of `cols` logits (lowest index wins ties; NaN never wins), as
/// [`argmax_rows_span`] into the buffers of `out`.
pub fn argmax(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    rows: usize,
    cols: usize,
    out: &mut ArgmaxBuffers,
) -> Result<(), GpuError> {
    if rows > out.rows {
        return Err(GpuError::shape("argmax", format!("{rows} rows of {cols} (buffers hold {} rows)", out.rows)));
    }
    argmax_rows_span(
        gpu,
        DevSpan::of(gpu, x),
        rows,
        cols,
        DevSpan::of(gpu, &out.part_val),
        DevSpan::of(gpu, &out.part_idx),
        DevSpan::of(gpu, &out.idx),
        DevSpan::of(gpu, &out.val),
    )
}

/// Values of each of the two argmax scratch spans (`part_val`, `part_idx`) for `rows` rows.
pub const fn argmax_scratch_len(rows: usize) -> usize {
    rows * ARGMAX_SPLITS as usize
}

/// Argmax of each of `rows` rows of `cols` logits into `idx[r]` (`u32::MAX` for an all-NaN row)
/// and `val[r]`, two chained launches (`argmax_partial`, `argmax_finish`) through the scratch
/// `part_val`, `part_idx` ([`argmax_scratch_len`]`(rows)` values each). Lowest index wins ties;
/// NaN never wins.
#[allow(clippy::too_many_arguments)]
pub fn argmax_rows_span(
    gpu: &Gpu,
    x: DevSpan<f32>,
    rows: usize,
    cols: usize,
    part_val: DevSpan<f32>,
    part_idx: DevSpan<u32>,
    idx: DevSpan<u32>,
    val: DevSpan<f32>,
) -> Result<(), GpuError> {
    const K: &str = "argmax";
    if rows == 0 || cols == 0 {
        return Err(GpuError::shape(K, format!("empty input: {rows} rows of {cols}")));
    }
    if rows > 65_535 {
        return Err(GpuError::shape(K, "at most 65535 rows per launch"));
    }
    let need = rows.checked_mul(cols).ok_or_else(|| GpuError::shape(K, "rows × cols overflows"))?;
    x.need(need, K, &format!("logits ({rows} × {cols})"))?;
    part_val.need(argmax_scratch_len(rows), K, "part_val")?;
    part_idx.need(argmax_scratch_len(rows), K, "part_idx")?;
    idx.need(rows, K, "idx")?;
    val.need(rows, K, "val")?;
    let p =
        ArgmaxParams { rows: rows as u32, cols: u32::try_from(cols).map_err(|_| GpuError::shape(K, "row too long"))? };
    let cfg = LaunchConfig {
        grid_dim: (ARGMAX_SPLITS, p.rows, 1),
        block_dim: (ROW_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // Safety: the arguments match `argmax_partial(x, part_val, part_idx, ArgmaxParams)` and
    // `argmax_finish(part_val, part_idx, idx, val, ArgmaxParams)`, sizes checked above; both
    // kernels wait on the previous grid before touching memory.
    unsafe {
        ChainedLaunch::new(gpu, "argmax_partial").span(x).span(part_val).span(part_idx).value(Param(p)).launch(cfg)?
    };
    let cfg = LaunchConfig {
        grid_dim: (p.rows.div_ceil(ROW_BLOCK_THREADS / 32), 1, 1),
        block_dim: (ROW_BLOCK_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    unsafe {
        ChainedLaunch::new(gpu, "argmax_finish")
            .span(part_val)
            .span(part_idx)
            .span(idx)
            .span(val)
            .value(Param(p))
            .launch(cfg)
    }
}

/// u32 words of the scratch of [`topk_logprobs_rows`] for `rows` rows of `vocab` logits.
pub const fn topk_scratch_len(rows: usize, vocab: usize, k: usize) -> usize {
    topk_scratch_words(rows, vocab, k)
}

/// The largest `vocab` [`topk_logprobs_rows`] takes at this `k`: `4096 · ⌊4096 / k⌋` (262 144
/// at `k = 64`).
pub const fn topk_max_vocab(k: usize) -> usize {
    if k == 0 {
        return 0;
    }
    TOPK_SEGMENT as usize * (TOPK_SEGMENT as usize / k)
}

/// Top-`k` tokens of each of `rows` rows of `vocab` f32 logits and their log-probabilities
/// `logit − logsumexp(row)`, best first: `tokens[r·k + i]`, `logprobs[r·k + i]`. Order: logit
/// descending in `f32::total_cmp` order, ties to the lower token id (exactly
/// `flashtree_reference::sample::topk_logprobs`); log-sum-exp in f32 with a fixed reduction
/// order (per 4096-logit segment, then over segments: `gpu-kernels` `sample::topk_finish`). A
/// row's result depends on that row only. Two chained launches (`topk_partial`,
/// `topk_finish`) through `scratch` ([`topk_scratch_len`]`(rows, vocab, k)` words).
/// `1 ≤ k ≤ min(64, vocab)`, `vocab ≤` [`topk_max_vocab`]`(k)`, `rows ≤ 65535`.
#[allow(clippy::too_many_arguments)]
pub fn topk_logprobs_rows(
    gpu: &Gpu,
    logits: DevSpan<f32>,
    rows: usize,
    vocab: usize,
    k: usize,
    scratch: DevSpan<u32>,
    tokens: DevSpan<u32>,
    logprobs: DevSpan<f32>,
) -> Result<(), GpuError> {
    const K: &str = "topk_logprobs_rows";
    if rows == 0 || vocab == 0 {
        return Err(GpuError::shape(K, format!("empty input: {rows} rows of {vocab}")));
    }
    if rows > 65_535 {
        return Err(GpuError::shape(K, "at most 65535 rows per launch"));
    }
    if k == 0 || k > TOPK_MAX_K as usize || k > vocab {
        return Err(GpuError::shape(K, format!("k = {k} must be in 1..={} and at most vocab = {vocab}", TOPK_MAX_K)));
    }
    if vocab > topk_max_vocab(k) {
        return Err(GpuError::shape(
            K,
            format!("vocab = {vocab} exceeds {} at k = {k} (the merge holds 4096 candidates)", topk_max_vocab(k)),
        ));
    }
    let need = rows.checked_mul(vocab).ok_or_else(|| GpuError::shape(K, "rows × vocab overflows"))?;
    logits.need(need, K, &format!("logits ({rows} × {vocab})"))?;
    scratch.need(topk_scratch_len(rows, vocab, k), K, "scratch")?;
    tokens.need(rows * k, K, "tokens")?;
    logprobs.need(rows * k, K, "logprobs")?;
    let (rows, vocab, k) = (rows as u32, vocab as u32, k as u32);
    debug_assert!(topk_fits(vocab, k));
    let p = TopkParams {
        rows,
        vocab,
        k,
        splits: topk_splits(vocab),
        vec4: (vocab.is_multiple_of(4) && logits.ptr().is_multiple_of(16)) as u32,
    };
    let cfg = LaunchConfig { grid_dim: (p.splits, rows, 1), block_dim: (ROW_BLOCK_THREADS, 1, 1), shared_mem_bytes: 0 };
    // Safety: the arguments match `topk_partial(x, scratch, TopkParams)` and
    // `topk_finish(scratch, tokens, logprobs, TopkParams)`, sizes checked above; both kernels
    // wait on the previous grid before touching memory.
    unsafe { ChainedLaunch::new(gpu, "topk_partial").span(logits).span(scratch).value(Param(p)).launch(cfg)? };
    let cfg = LaunchConfig { grid_dim: (rows, 1, 1), block_dim: (ROW_BLOCK_THREADS, 1, 1), shared_mem_bytes: 0 };
    unsafe {
        ChainedLaunch::new(gpu, "topk_finish").span(scratch).span(tokens).span(logprobs).value(Param(p)).launch(cfg)
    }
}

/// The parameters of one `sample_rows` launch, checked: `rows = positions.len()` in
/// `1..=32`, `vocab` in `1..=MAX_VOCAB`, the rule's ranges (T = 0 is the argmax, never sampled
/// here). `vec4` tells whether the logits' base is 16-byte aligned.
pub fn sample_params(
    rows: usize,
    vocab: usize,
    rule: &SampleRule,
    positions: &[u64],
    aligned: bool,
) -> Result<SampleParams, GpuError> {
    const K: &str = "sample_rows";
    if rows == 0 || rows > SAMPLE_MAX_ROWS as usize || positions.len() != rows {
        return Err(GpuError::shape(
            K,
            format!(
                "{rows} rows with {} positions (expected 1..={SAMPLE_MAX_ROWS} rows, one position each)",
                positions.len()
            ),
        ));
    }
    if vocab == 0 || vocab > MAX_VOCAB as usize {
        return Err(GpuError::shape(K, format!("vocab = {vocab}: expected 1..={MAX_VOCAB}")));
    }
    if let Some((field, value, expected)) = rule.range_error() {
        return Err(GpuError::shape(K, format!("{field} = {value}: expected {expected}")));
    }
    let mut pos = [0u64; SAMPLE_MAX_ROWS as usize];
    pos[..rows].copy_from_slice(positions);
    Ok(SampleParams {
        inv_temperature: rule.inv_temperature(),
        seed: rule.seed,
        positions: pos,
        rows: rows as u32,
        vocab: vocab as u32,
        top_k: rule.top_k.min(vocab) as u32,
        top_p: rule.top_p,
        min_p: rule.min_p,
        vec4: (vocab.is_multiple_of(4) && aligned) as u32,
    })
}

/// Samples each of `positions.len()` rows of `vocab` f32 logits with `rule` into `tokens[r]`,
/// row `r` with the random stream of `(rule.seed, positions[r])` (the absolute position the
/// picked token will occupy): exactly the token of
/// `flashtree_reference::sample::draw::sample_row`, whatever the number of rows; `u32::MAX`
/// for a row with nothing to draw (all NaN / −∞). One chained launch of `sample_rows` (a block
/// of 512 threads per row), no scratch, no host sync; at most 32 rows per call.
pub fn sample_rows(
    gpu: &Gpu,
    logits: DevSpan<f32>,
    vocab: usize,
    rule: &SampleRule,
    positions: &[u64],
    tokens: DevSpan<u32>,
) -> Result<(), GpuError> {
    const K: &str = "sample_rows";
    let rows = positions.len();
    let p = sample_params(rows, vocab, rule, positions, logits.ptr().is_multiple_of(16))?;
    logits.need(rows * vocab, K, &format!("logits ({rows} × {vocab})"))?;
    tokens.need(rows, K, "tokens")?;
    let cfg = LaunchConfig { grid_dim: (p.rows, 1, 1), block_dim: (SAMPLE_THREADS, 1, 1), shared_mem_bytes: 0 };
    // Safety: the arguments match `sample_rows(x, out, SampleParams)`, sizes checked above; the
    // kernel waits on the previous grid before touching memory.
    unsafe { ChainedLaunch::new(gpu, "sample_rows").span(logits).span(tokens).value(Param(p)).launch(cfg) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SampleRule {
        SampleRule { temperature, top_k, top_p, min_p, seed: 9 }
    }

    #[test]
    fn sample_params_check_shapes_and_ranges() {
        let p = sample_params(3, 248_320, &rule(0.7, 1_000_000, 0.9, 0.05), &[5, 6, 7], true).unwrap();
        assert_eq!((p.rows, p.vocab, p.top_k, p.vec4), (3, 248_320, 248_320, 1));
        assert_eq!(&p.positions[..4], &[5, 6, 7, 0]);
        assert_eq!(p.inv_temperature, 1.0 / 0.7f32 as f64);
        assert_eq!(sample_params(1, 10, &rule(1.0, 0, 1.0, 0.0), &[0], true).unwrap().vec4, 0, "10 % 4 ≠ 0");
        assert_eq!(sample_params(1, 12, &rule(1.0, 0, 1.0, 0.0), &[0], false).unwrap().vec4, 0, "unaligned");
        for (rows, vocab, r, pos, what) in [
            (0, 10, rule(1.0, 0, 1.0, 0.0), vec![], "rows"),
            (33, 10, rule(1.0, 0, 1.0, 0.0), vec![0; 33], "rows"),
            (2, 10, rule(1.0, 0, 1.0, 0.0), vec![0], "positions"),
            (1, 0, rule(1.0, 0, 1.0, 0.0), vec![0], "vocab"),
            (1, 1 << 20, rule(1.0, 0, 1.0, 0.0), vec![0], "vocab"),
            (1, 10, rule(0.0, 0, 1.0, 0.0), vec![0], "temperature"),
            (1, 10, rule(f32::NAN, 0, 1.0, 0.0), vec![0], "temperature"),
            (1, 10, rule(1.0, 0, 0.0, 0.0), vec![0], "top_p"),
            (1, 10, rule(1.0, 0, 1.0, 2.0), vec![0], "min_p"),
        ] {
            let e = sample_params(rows, vocab, &r, &pos, true).unwrap_err().to_string();
            assert!(e.contains(what), "{what}: {e}");
        }
    }
}
