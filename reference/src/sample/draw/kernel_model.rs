//! A line-by-line CPU model of the device kernel's formulation (`gpu-kernels`
//! `sample::draw`: radix-select cuts on integer histograms, min-p as a max, the kept weight, an
//! id-order scan), checked against the sort-based definition on random rows. It proves the
//! kernel's *algorithm* equals the definition (the GPU proptest then checks the device code).

use super::*;
use kernel_abi::sampling::{key_value, NEG_INF_KEY};

#[derive(Clone, Copy, Debug, PartialEq)]
struct Cut {
    b: u32,
    t: u32,
}

const ALL: Cut = Cut { b: NEG_INF_KEY, t: 0 };

fn shorter(a: Cut, c: Cut) -> Cut {
    if a.b > c.b || (a.b == c.b && a.t <= c.t) {
        a
    } else {
        c
    }
}

struct Row {
    keys: Vec<u32>,
    l_max: f32,
    inv_t: f64,
}

impl Row {
    fn weight(&self, key: u32) -> u64 {
        sampling::weight(key_value(key), self.l_max, self.inv_t, fma)
    }
}

fn in_prefix(key: u32, prefix: u32, shift: u32) -> bool {
    (key as u64) >> shift == (prefix as u64) >> shift
}

/// Bins from 255 down: the digit whose bin holds the `need`-th unit, units above, units in it.
fn find_bin(hist: &[u64; 256], need: u64) -> (u32, u64, u64) {
    let mut above = 0;
    for d in (0..256).rev() {
        if above + hist[d] >= need {
            return (d as u32, above, hist[d]);
        }
        above += hist[d];
    }
    panic!("need {need} above the total {above}");
}

fn select_count(row: &Row, k: u32) -> Cut {
    let (mut prefix, mut need, mut shift) = (0u32, k as u64, 32u32);
    while shift > 0 {
        let ds = shift - 8;
        let mut hist = [0u64; 256];
        for &key in &row.keys {
            if key > NEG_INF_KEY && in_prefix(key, prefix, shift) {
                hist[((key >> ds) & 255) as usize] += 1;
            }
        }
        let (digit, above, in_bin) = find_bin(&hist, need);
        prefix |= digit << ds;
        need -= above;
        shift = ds;
        if in_bin == need {
            return Cut { b: prefix.saturating_sub(1), t: 0 };
        }
    }
    Cut { b: prefix, t: need as u32 }
}

fn select_weight(row: &Row, k: Cut, top_p: f32) -> Cut {
    let (mut prefix, mut need, mut shift) = (0u32, 0u64, 32u32);
    while shift > 0 {
        let ds = shift - 8;
        let mut hist = [0u64; 256];
        for &key in &row.keys {
            if key > NEG_INF_KEY && key > k.b && in_prefix(key, prefix, shift) {
                hist[((key >> ds) & 255) as usize] += row.weight(key);
            }
        }
        if k.t > 0 && in_prefix(k.b, prefix, shift) {
            hist[((k.b >> ds) & 255) as usize] += k.t as u64 * row.weight(k.b);
        }
        if shift == 32 {
            need = sampling::top_p_need(top_p, hist.iter().sum());
        }
        let (digit, above, _) = find_bin(&hist, need);
        prefix |= digit << ds;
        need -= above;
        shift = ds;
    }
    let w = row.weight(prefix);
    Cut { b: prefix, t: need.div_ceil(w) as u32 }
}

fn min_p_cut(row: &Row, k: Cut, thr: u64) -> Option<Cut> {
    let fail = row
        .keys
        .iter()
        .copied()
        .filter(|&key| key > NEG_INF_KEY && key >= k.b && row.weight(key) < thr)
        .max()
        .unwrap_or(0);
    (fail != 0).then_some(Cut { b: fail, t: 0 })
}

fn kept_weight(row: &Row, cut: Cut) -> u64 {
    let s: u64 = row.keys.iter().filter(|&&k| k > NEG_INF_KEY && k > cut.b).map(|&k| row.weight(k)).sum();
    s + if cut.t > 0 { cut.t as u64 * row.weight(cut.b) } else { 0 }
}

fn draw_ids(row: &Row, cut: Cut, target: u64) -> u32 {
    let (mut acc, mut rank) = (0u64, 0u32);
    for (i, &key) in row.keys.iter().enumerate() {
        if key > NEG_INF_KEY && (key > cut.b || (key == cut.b && rank < cut.t)) {
            acc += row.weight(key);
            if acc > target {
                return i as u32;
            }
        }
        rank += (key == cut.b) as u32;
    }
    u32::MAX
}

fn kernel_sample(x: &[f32], rule: &SampleRule, position: u64) -> u32 {
    let keys: Vec<u32> = x.iter().map(|v| order_key(v.to_bits())).collect();
    let kmax = keys.iter().copied().max().unwrap_or(0);
    let n = keys.iter().filter(|&&k| k > NEG_INF_KEY).count() as u64;
    if kmax <= NEG_INF_KEY {
        return u32::MAX;
    }
    let row = Row { keys, l_max: key_value(kmax), inv_t: rule.inv_temperature() };
    let top_k = rule.top_k.min(x.len()) as u32;
    let cut_k = if top_k != 0 && (top_k as u64) < n { select_count(&row, top_k) } else { ALL };
    let mut cut = cut_k;
    if rule.top_p < 1.0 {
        cut = shorter(cut, select_weight(&row, cut_k, rule.top_p));
    }
    if rule.min_p > 0.0 {
        if let Some(m) = min_p_cut(&row, cut_k, sampling::min_p_threshold(rule.min_p)) {
            cut = shorter(cut, m);
        }
    }
    let total = kept_weight(&row, cut);
    draw_ids(&row, cut, sampling::draw_target(sampling::uniform_bits(rule.seed, position), total))
}

#[test]
fn the_kernels_radix_formulation_draws_the_definitions_token() {
    let mut z = 3u64;
    let mut next = move || {
        z = sampling::mix(z);
        z
    };
    for case in 0..4000 {
        let n = 1 + (next() % if case % 10 == 0 { 3000 } else { 80 }) as usize;
        let scale = [0.0, 0.05, 1.0, 8.0, 60.0][(next() % 5) as usize];
        let mut x: Vec<f32> = (0..n).map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale).collect();
        // Coarse values tie often; plant ties with the top, NaN, ±∞.
        if next() % 3 == 0 {
            x.iter_mut().for_each(|v| *v = (*v * 2.0).round() / 2.0);
        }
        for _ in 0..next() % 4 {
            let (i, j) = ((next() % n as u64) as usize, (next() % n as u64) as usize);
            x[i] = x.iter().copied().fold(f32::NEG_INFINITY, f32::max).max(x[j]);
        }
        for (v, m) in [(f32::NAN, 6), (f32::NEG_INFINITY, 6), (f32::INFINITY, 40), (-0.0, 8)] {
            if next() % m == 0 {
                x[(next() % n as u64) as usize] = v;
            }
        }
        let rule = SampleRule {
            temperature: [0.05, 0.3, 0.7, 1.0, 2.9][(next() % 5) as usize],
            top_k: [0, 1, 2, 5, 40, 1000][(next() % 6) as usize],
            top_p: if next() % 2 == 0 { 1.0 } else { (next() % 1000 + 1) as f32 / 1000.0 },
            min_p: [0.0, 0.0, 0.01, 0.2, 0.9, 1.0][(next() % 6) as usize],
            seed: next(),
        };
        let position = next() % 100_000;
        let want = sample_row(&x, &rule, position).unwrap_or(u32::MAX);
        assert_eq!(kernel_sample(&x, &rule, position), want, "case {case}: {rule:?} row {x:?}");
    }
}
