//! The HF → GGUF value transforms of `qwen35-architecture.md` §12, shared by the direct HF loader
//! and the GGUF converter.
//!
//! Value-head reordering: HF groups value heads by key head (`j = kh·r + i`, `r = n_v / n_k` value
//! heads per key head); GGUF tiles them (`j' = i·n_k + kh`, key head = `j' mod n_k`). For an axis of
//! `n_v` heads of `d` elements: `hf (kh·r + i)·d + e  →  gguf (i·n_k + kh)·d + e`.

/// Index map of the grouped → tiled permutation: `perm[gguf_head] = hf_head`.
pub fn tiled_from_grouped_heads(n_k: usize, n_v: usize) -> Vec<usize> {
    let r = n_v / n_k;
    (0..n_v)
        .map(|jt| {
            let (i, kh) = (jt / n_k, jt % n_k);
            kh * r + i
        })
        .collect()
}

/// Reorders `n_v` blocks of `block` consecutive values (rows of `d` heads × row length) from HF
/// grouped to GGUF tiled order. `data.len()` must be `n_v · block`.
pub fn grouped_to_tiled_blocks(data: &[f32], n_k: usize, n_v: usize) -> Vec<f32> {
    let block = data.len() / n_v;
    let perm = tiled_from_grouped_heads(n_k, n_v);
    let mut out = Vec::with_capacity(data.len());
    for &src in &perm {
        out.extend_from_slice(&data[src * block..(src + 1) * block]);
    }
    out
}

/// The inverse of [`grouped_to_tiled_blocks`] (GGUF tiled → HF grouped).
pub fn tiled_to_grouped_blocks(data: &[f32], n_k: usize, n_v: usize) -> Vec<f32> {
    let block = data.len() / n_v;
    let perm = tiled_from_grouped_heads(n_k, n_v);
    let mut out = vec![0f32; data.len()];
    for (dst, &src) in perm.iter().enumerate() {
        out[src * block..(src + 1) * block].copy_from_slice(&data[dst * block..(dst + 1) * block]);
    }
    out
}

/// Reorders the value-head *columns* of a row-major `[rows, n_v·d]` matrix (used for `ssm_out`).
pub fn grouped_to_tiled_columns(data: &[f32], rows: usize, n_k: usize, n_v: usize) -> Vec<f32> {
    let cols = data.len() / rows;
    let mut out = Vec::with_capacity(data.len());
    for row in data.chunks_exact(cols) {
        out.extend(grouped_to_tiled_blocks(row, n_k, n_v));
    }
    out
}

/// Reorders only the value rows (`rows[v_start..]`, `n_v` heads) of a q|k|v matrix or conv.
pub fn grouped_to_tiled_tail_rows(
    data: &[f32],
    row_len: usize,
    v_start_row: usize,
    n_k: usize,
    n_v: usize,
) -> Vec<f32> {
    let split = v_start_row * row_len;
    let mut out = data[..split].to_vec();
    out.extend(grouped_to_tiled_blocks(&data[split..], n_k, n_v));
    out
}

/// HF zero-centred RMSNorm weight `w` → GGUF multiplicative `1 + w`.
pub fn norm_plus_one(w: &[f32]) -> Vec<f32> {
    w.iter().map(|&x| x + 1.0).collect()
}

/// `ssm_a = −exp(A_log)` (computed in f64, rounded once).
pub fn ssm_a_from_a_log(a_log: &[f32]) -> Vec<f32> {
    a_log.iter().map(|&x| -(x as f64).exp() as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiled_order_puts_key_head_at_index_mod_n_k() {
        // n_k = 2, r = 3: HF heads [k0v0 k0v1 k0v2 k1v0 k1v1 k1v2] → tiled [k0v0 k1v0 k0v1 k1v1 k0v2 k1v2]
        assert_eq!(tiled_from_grouped_heads(2, 6), vec![0, 3, 1, 4, 2, 5]);
        for (jt, &hf) in tiled_from_grouped_heads(4, 12).iter().enumerate() {
            assert_eq!(jt % 4, hf / 3, "tiled head {jt} must read key head {} ", jt % 4);
        }
    }

    #[test]
    fn block_reorder_round_trips() {
        let x: Vec<f32> = (0..6 * 5).map(|i| i as f32).collect();
        let t = grouped_to_tiled_blocks(&x, 2, 6);
        assert_ne!(t, x);
        assert_eq!(tiled_to_grouped_blocks(&t, 2, 6), x);
    }

    #[test]
    fn column_reorder_moves_whole_head_columns() {
        // 1 row, 3 heads of 2 columns, n_k = 1 (r = 3): identity; n_k = 3 (r = 1): identity too.
        let x = vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(grouped_to_tiled_columns(&x, 1, 1, 3), x);
        // 2 heads per key head, 2 key heads: HF [a b | c d] (kh0: a b, kh1: c d) → tiled [a c b d]
        let y = vec![1.0, 2.0, 3.0, 4.0];
        assert_eq!(grouped_to_tiled_columns(&y, 1, 2, 4), vec![1.0, 3.0, 2.0, 4.0]);
    }
}
