//! Launcher of `embed` (`gpu-kernels/src/embed.rs`): token embedding rows gathered from the
//! GGUF `token_embd` table as stored (any of F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K),
//! dequantized to f32 bit for bit as `flashtree_quants` does.

use cudarc::driver::LaunchConfig;
use flashtree_quants::GgmlType;
use kernel_abi::{EmbedParams, EMBED_CHUNK, ROW_BLOCK_THREADS};

use super::error::GpuError;
use super::{ChainedLaunch, DevSpan, Gpu, Param};

/// The `embed_*` kernel of a table type, or `None` for a type without one.
pub fn embed_kernel(ty: GgmlType) -> Option<&'static str> {
    Some(match ty {
        GgmlType::F32 => "embed_f32",
        GgmlType::F16 => "embed_f16",
        GgmlType::BF16 => "embed_bf16",
        GgmlType::Q8_0 => "embed_q8_0",
        GgmlType::Q4_K => "embed_q4_k",
        GgmlType::Q5_K => "embed_q5_k",
        GgmlType::Q6_K => "embed_q6_k",
        _ => return None,
    })
}

/// `out[r, :] = dequant(table row tokens[r])` for `r < rows`, chained. `table` is the whole
/// `token_embd` tensor as stored in the GGUF file: `n_vocab` rows of `n_embd` elements of `ty`
/// (exactly `n_vocab · row_bytes(n_embd)` bytes, 4-byte aligned). `tokens` holds at least `rows`
/// ids (the engine passes the `tokens` field of its device `NodeBatch`); a token `≥ n_vocab`
/// reads nothing and gets a row of NaN. `out` holds `rows · n_embd` f32.
#[allow(clippy::too_many_arguments)]
pub fn embed_rows(
    gpu: &Gpu,
    ty: GgmlType,
    table: DevSpan<u8>,
    n_vocab: usize,
    n_embd: usize,
    tokens: DevSpan<u32>,
    rows: usize,
    out: DevSpan<f32>,
) -> Result<(), GpuError> {
    const K: &str = "embed_rows";
    let kernel = embed_kernel(ty).ok_or_else(|| {
        GpuError::shape(K, format!("no GPU embedding kernel for {ty} (have F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K)"))
    })?;
    if rows == 0 || n_vocab == 0 || n_embd == 0 {
        return Err(GpuError::shape(K, format!("empty input: {rows} rows, n_vocab {n_vocab}, n_embd {n_embd}")));
    }
    let row_bytes = ty.row_bytes(n_embd as u64).ok_or_else(|| {
        GpuError::shape(K, format!("n_embd = {n_embd} is not a multiple of {ty}'s block of {}", ty.block_size()))
    })?;
    let want = (n_vocab as u64).checked_mul(row_bytes);
    if want != Some(table.len() as u64) {
        return Err(GpuError::shape(
            K,
            format!(
                "table has {} bytes, but {n_vocab} rows of {n_embd} {ty} elements ({row_bytes} bytes each) are {}",
                table.len(),
                want.map_or("more than 2^64".to_string(), |w| w.to_string())
            ),
        ));
    }
    if !table.ptr().is_multiple_of(4) {
        return Err(GpuError::shape(K, format!("table at {:#x} is not 4-byte aligned", table.ptr())));
    }
    tokens.need(rows, K, "tokens")?;
    let need = rows.checked_mul(n_embd).ok_or_else(|| GpuError::shape(K, "rows × n_embd overflows"))?;
    out.need(need, K, &format!("out ({rows} rows × {n_embd})"))?;
    let too_big = |what: &str| GpuError::shape(K, format!("{what} too large for one launch"));
    let p = EmbedParams {
        rows: u32::try_from(rows).ok().filter(|&r| r <= i32::MAX as u32).ok_or_else(|| too_big("rows"))?,
        n_vocab: u32::try_from(n_vocab).map_err(|_| too_big("n_vocab"))?,
        n_embd: u32::try_from(n_embd).map_err(|_| too_big("n_embd"))?,
    };
    let chunks = p.n_embd.div_ceil(EMBED_CHUNK);
    if chunks > 65_535 {
        return Err(too_big("n_embd"));
    }
    let cfg = LaunchConfig { grid_dim: (p.rows, chunks, 1), block_dim: (ROW_BLOCK_THREADS, 1, 1), shared_mem_bytes: 0 };
    // Safety: the arguments match `embed_*(table, tokens, out, EmbedParams)`; the table size,
    // `tokens` and `out` are checked above and out-of-range tokens read nothing.
    unsafe { ChainedLaunch::new(gpu, kernel).span(table).span(tokens).span(out).value(Param(p)).launch(cfg) }
}
