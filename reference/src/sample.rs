//! Reference of `sample`: argmax, top-k log-probabilities, and the seeded sampler ([`draw`]).

pub mod draw;

/// Index of the largest value; ties go to the lowest index; NaN never wins; `u32::MAX` when
/// every value is NaN (or the row is empty). The same total order as the GPU kernel.
pub fn argmax(row: &[f32]) -> (u32, f32) {
    let mut best = (u32::MAX, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        let i = i as u32;
        if v > best.1 || (v == best.1 && i < best.0) {
            best = (i, v);
        }
    }
    best
}

/// The `k` best tokens of one row of logits with their log-probabilities
/// `x − logsumexp(row)` (logsumexp in f64: `max + ln Σ e^{x − max}`), best first. Order: logit
/// descending by `f32::total_cmp` (so `+0` before `−0`), then token id ascending — the order of
/// `flashtree::spec::topk_logprobs` (which the draft path uses on the CPU). `k` is clamped to
/// the row length. NaN logits give NaN log-probs (the GPU kernel's choice too; callers reject
/// them).
pub fn topk_logprobs(row: &[f32], k: usize) -> Vec<(u32, f64)> {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    let log_z = max + sum.ln();
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    let order = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    let k = k.min(row.len());
    // A strict total order: the best `k` are one set, whatever the selection does first.
    if k > 0 && k < idx.len() {
        idx.select_nth_unstable_by(k - 1, order);
        idx.truncate(k);
    }
    idx.sort_by(order);
    idx.truncate(k);
    idx.into_iter().map(|t| (t, row[t as usize] as f64 - log_z)).collect()
}

/// [`topk_logprobs`] of each row of `logits` (`[rows, vocab]` row-major): `rows · k` tokens and
/// log-probs, row by row.
pub fn topk_logprobs_rows(logits: &[f32], vocab: usize, k: usize) -> (Vec<u32>, Vec<f64>) {
    assert!(vocab > 0 && logits.len().is_multiple_of(vocab), "logits are not whole rows of {vocab}");
    logits.chunks_exact(vocab).flat_map(|row| topk_logprobs(row, k)).unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topk_orders_by_logit_then_id_and_normalizes() {
        let row = [1.0, 3.0, -0.0, 3.0, 0.0, f32::NEG_INFINITY, 2.0];
        let top = topk_logprobs(&row, 5);
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 6, 0, 4], "ties by id, +0 before −0");
        let z: f64 = row.iter().map(|&v| (v as f64).exp()).sum::<f64>().ln();
        assert!((top[0].1 - (3.0 - z)).abs() < 1e-12);
        // All of a row's probabilities sum to 1.
        let all = topk_logprobs(&row, 100);
        assert_eq!(all.len(), row.len());
        assert_eq!(all[6], (5, f64::NEG_INFINITY));
        assert!((all.iter().map(|t| t.1.exp()).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn uniform_row_has_log_probs_minus_ln_vocab() {
        let top = topk_logprobs(&[0.25; 1000], 3);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(top.iter().all(|t| (t.1 + (1000f64).ln()).abs() < 1e-12));
        let (tok, lp) = topk_logprobs_rows(&[0.0, 1.0, 1.0, 0.0], 2, 1);
        assert_eq!(tok, vec![1, 0]);
        assert_eq!(lp[0], lp[1]);
    }

    #[test]
    fn ties_go_to_the_lowest_index_and_nan_never_wins() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), (1, 3.0));
        assert_eq!(argmax(&[f32::NAN, 0.5, f32::NAN]), (1, 0.5));
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]).0, 0);
        assert_eq!(argmax(&[f32::NAN]).0, u32::MAX);
        assert_eq!(argmax(&[]).0, u32::MAX);
    }
}
