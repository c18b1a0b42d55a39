//! Reference of `sample::draw` (`sample_rows` on the device): one seeded draw from a row of
//! logits under temperature → top-k → top-p → min-p, the definition both backends use (the CPU
//! backend calls [`sample_row`]; the kernel is checked against it token for token).
//!
//! **Definition.** Drawable tokens: logits that are not NaN and not −∞ (none: an error). With
//! `l_max` the largest, each drawable token gets the fixed-point weight
//! `W = ⌊e^{(l − l_max)/T} · 2^44⌋` ([`sampling::weight`]: `1/T` as one f64 factor, the
//! exponential by [`sampling::exp`], 0 below `d = −32`; with `l_max = +∞` the +∞ entries get
//! 2^44 and the rest 0). Order: logit descending (`f32::total_cmp`), ties by token id ascending.
//! The kept set is the first `n_keep` tokens of that order, `n_keep = min(n_k, n_p, n_m)`:
//! - top-k: `n_k = min(top_k, drawable)` (`top_k = 0`: all drawable); `S_k` = their weight;
//! - top-p (`top_p < 1`): the shortest prefix whose weight is at least
//!   [`sampling::top_p_need`]`(top_p, S_k)`; `top_p = 1`: `n_k`;
//! - min-p (`min_p > 0`): the number of leading tokens with `W ≥ ⌈min_p · 2^44⌉`
//!   (`p ≥ min_p · p_max`); `min_p = 0`: all.
//!
//! The draw: `Σ` = the kept weight (≥ 2^44: the first token has weight 2^44),
//! `target = ⌊u · Σ⌋` from the 53 bits of `(seed, position)` ([`sampling::draw_target`]), and
//! the pick is the first kept token **in token-id order** whose cumulative weight exceeds
//! `target`: token `i` with probability `W_i / Σ`, exactly.
//!
//! Every quantity is an integer or a single f64 operation of [`sampling`], so the result is a
//! function of the logits' bits and `(seed, position)` only: any reduction order gives it. It
//! differs from the exact softmax filter only by the weights' rounding (tokens with
//! `p < p_max · 2^-44` are never drawn: a mass below `V · 2^-44`).
//!
//! Cost: `O(V)` weights plus a sort of the drawable tokens (of the top-k candidates with top-k).

use kernel_abi::sampling::{self, order_key};

pub use kernel_abi::sampling::SampleRule;

/// Why a row cannot be sampled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SampleError {
    #[error("sampling: {field} = {value}: expected {expected}")]
    Range { field: &'static str, value: f64, expected: &'static str },
    #[error("sampling: a row of {0} logits (expected 1..={max})", max = sampling::MAX_VOCAB)]
    Vocab(usize),
    #[error("sampling: the logits have no entry to draw (all NaN or −∞)")]
    NothingToDraw,
}

/// Checks the rule's ranges, naming the field.
pub fn validate(rule: &SampleRule) -> Result<(), SampleError> {
    match rule.range_error() {
        Some((field, value, expected)) => Err(SampleError::Range { field, value: value as f64, expected }),
        None => Ok(()),
    }
}

/// The host's fused multiply-add for [`sampling`].
#[inline]
pub fn fma(a: f64, b: f64, c: f64) -> f64 {
    a.mul_add(b, c)
}

/// The fixed-point weights of `row` (0 for tokens that cannot be drawn) and the largest logit's
/// order key; `None` when nothing can be drawn.
pub fn weights(row: &[f32], inv_t: f64) -> Option<(Vec<u64>, u32)> {
    let kmax = row.iter().map(|l| order_key(l.to_bits())).max()?;
    if kmax <= sampling::NEG_INF_KEY {
        return None;
    }
    let l_max = sampling::key_value(kmax);
    let w =
        row.iter()
            .map(|&l| {
                if order_key(l.to_bits()) > sampling::NEG_INF_KEY {
                    sampling::weight(l, l_max, inv_t, fma)
                } else {
                    0
                }
            })
            .collect();
    Some((w, kmax))
}

/// The kept tokens (in logit order, then id) and their weights, per the module's definition.
pub fn kept(row: &[f32], rule: &SampleRule) -> Result<Vec<(u32, u64)>, SampleError> {
    validate(rule)?;
    if row.is_empty() || row.len() > sampling::MAX_VOCAB as usize {
        return Err(SampleError::Vocab(row.len()));
    }
    let (w, _) = weights(row, rule.inv_temperature()).ok_or(SampleError::NothingToDraw)?;
    // Candidates as u64 whose integer order is the sampling order, descending.
    let cand = |i: usize| ((order_key(row[i].to_bits()) as u64) << 32) | !(i as u32) as u64;
    let mut order: Vec<u64> =
        (0..row.len()).filter(|&i| order_key(row[i].to_bits()) > sampling::NEG_INF_KEY).map(cand).collect();
    let n_valid = order.len();
    let n_k = if rule.top_k == 0 { n_valid } else { rule.top_k.min(n_valid) };
    if n_k < n_valid {
        order.select_nth_unstable_by(n_k - 1, |a, b| b.cmp(a));
        order.truncate(n_k);
    }
    order.sort_unstable_by(|a, b| b.cmp(a));
    let toks: Vec<(u32, u64)> = order
        .iter()
        .map(|&c| {
            let id = !(c as u32);
            (id, w[id as usize])
        })
        .collect();
    let s_k: u64 = toks.iter().map(|t| t.1).sum();
    let n_p = if rule.top_p < 1.0 {
        let need = sampling::top_p_need(rule.top_p, s_k);
        let mut acc = 0u64;
        toks.iter()
            .position(|t| {
                acc += t.1;
                acc >= need
            })
            .map_or(n_k, |i| i + 1)
    } else {
        n_k
    };
    let n_m = if rule.min_p > 0.0 {
        let thr = sampling::min_p_threshold(rule.min_p);
        toks.iter().take_while(|t| t.1 >= thr).count()
    } else {
        n_k
    };
    let mut toks = toks;
    toks.truncate(n_k.min(n_p).min(n_m));
    Ok(toks)
}

/// The token drawn from `kept` (non-empty, weights summing to ≥ 1) with the 53 random `bits`:
/// the first in token-id order whose cumulative weight exceeds `⌊u · Σ⌋`.
pub fn draw(kept: &[(u32, u64)], bits: u64) -> u32 {
    let mut by_id = kept.to_vec();
    by_id.sort_unstable_by_key(|t| t.0);
    let total: u64 = by_id.iter().map(|t| t.1).sum();
    let target = sampling::draw_target(bits, total);
    let mut acc = 0u64;
    for (id, w) in by_id {
        acc += w;
        if acc > target {
            return id;
        }
    }
    unreachable!("target {target} < total {total}")
}

/// The token `rule` draws from `row` for the absolute `position` (the position the picked token
/// will occupy): [`kept`], then [`draw`] with the stream's bits for `(seed, position)`.
pub fn sample_row(row: &[f32], rule: &SampleRule, position: u64) -> Result<u32, SampleError> {
    let kept = kept(row, rule)?;
    Ok(draw(&kept, sampling::uniform_bits(rule.seed, position)))
}

/// [`sample_row`] of each row of `logits` (`[rows, vocab]` row-major), row `r` at `positions[r]`.
pub fn sample_rows(
    logits: &[f32],
    vocab: usize,
    rule: &SampleRule,
    positions: &[u64],
) -> Result<Vec<u32>, SampleError> {
    if vocab == 0 || !logits.len().is_multiple_of(vocab) || logits.len() / vocab != positions.len() {
        return Err(SampleError::Vocab(vocab));
    }
    logits.chunks_exact(vocab).zip(positions).map(|(row, &p)| sample_row(row, rule, p)).collect()
}

#[cfg(test)]
mod kernel_model;
#[cfg(test)]
mod tests;
