//! Pearson's chi-square test of sampled counts against exact probabilities, shared by the CPU
//! (`spec_sampling`) and GPU (`gpu/sampling`) distribution tests.
//!
//! Threshold: the 0.999 quantile of χ²(df), df = cells − 1, by the Wilson–Hilferty
//! approximation `df · (1 − 2/(9 df) + z √(2/(9 df)))³` with z = 3.0902 (above the table value
//! by < 2 % for df ≥ 3 and < 0.5 % for df ≥ 15: 16.55 vs 16.27 at df = 3, 37.8 vs 37.70 at
//! df = 15). Every expected count must be ≥ 5 so the
//! chi-square approximation holds; a correct sampler fails with probability 10⁻³ per test for a
//! random seed set.

/// Pearson's statistic of `counts` against `probs` over `total` samples, and the threshold
/// (module doc); `Err` for a sample in a zero-probability cell. Panics on a cell whose expected
/// count is below 5 (pool such cells first: [`pool_small_cells`]).
pub fn chi_square(counts: &[usize], probs: &[f64], total: usize) -> Result<(f64, f64), String> {
    let mut stat = 0.0;
    let mut cells = 0;
    for (c, (&o, &p)) in counts.iter().zip(probs).enumerate() {
        if p == 0.0 {
            if o > 0 {
                return Err(format!("{o} samples in cell {c} of probability 0"));
            }
            continue;
        }
        let e = p * total as f64;
        assert!(e >= 5.0, "cell {c}: expected count {e} < 5 (chi-square approximation)");
        stat += (o as f64 - e).powi(2) / e;
        cells += 1;
    }
    let df = (cells - 1) as f64;
    let h = 2.0 / (9.0 * df);
    Ok((stat, df * (1.0 - h + 3.0902 * h.sqrt()).powi(3)))
}

/// The cells of nonzero probability whose expected count over `total` samples is below 5,
/// merged into one extra cell (kept only if its own expected count reaches 5; else its samples
/// and mass are dropped: the test then covers the other cells only). Cells of probability 0
/// are kept as they are, so a sample there still fails the test.
pub fn pool_small_cells(counts: &[usize], probs: &[f64], total: usize) -> (Vec<usize>, Vec<f64>) {
    let (mut c, mut p) = (Vec::new(), Vec::new());
    let (mut pooled_c, mut pooled_p) = (0usize, 0.0f64);
    for (&o, &q) in counts.iter().zip(probs) {
        if q > 0.0 && q * (total as f64) < 5.0 {
            pooled_c += o;
            pooled_p += q;
        } else {
            c.push(o);
            p.push(q);
        }
    }
    if pooled_p * total as f64 >= 5.0 {
        c.push(pooled_c);
        p.push(pooled_p);
    }
    (c, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cells_are_pooled_and_zero_cells_kept() {
        let (c, p) = pool_small_cells(&[50, 2, 3, 0, 45], &[0.5, 0.02, 0.03, 0.0, 0.45], 100);
        assert_eq!((c, p), (vec![50, 0, 45, 5], vec![0.5, 0.0, 0.45, 0.05]));
        // A pool below 5 expected is dropped.
        let (c, p) = pool_small_cells(&[60, 1, 39], &[0.6, 0.01, 0.39], 100);
        assert_eq!((c, p), (vec![60, 39], vec![0.6, 0.39]));
    }

    #[test]
    fn chi_square_accepts_a_fit_and_rejects_a_bias() {
        let p = [0.25; 4];
        let (stat, limit) = chi_square(&[250, 240, 260, 250], &p, 1000).unwrap();
        assert!(stat < limit && limit > 16.27 && limit < 16.27 * 1.02, "{stat} {limit}");
        let (stat, limit) = chi_square(&[350, 150, 250, 250], &p, 1000).unwrap();
        assert!(stat > limit);
        assert!(chi_square(&[1, 9], &[0.0, 1.0], 10).is_err());
    }
}
