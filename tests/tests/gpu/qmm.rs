//! Tensor-core `qmm` (1…32 tokens, every weight type) vs an f64 reference on dequantized weights,
//! and batch invariance (a column's bits do not depend on the other columns or on n).
//!
//! Error budget (derived in `gpu-kernels/src/qmatmul/{mod,formats}.rs`), per output `(c, o)`:
//! * x → f16 after an exact power-of-two scaling: `|Δx_i| ≤ 2^-11 |x_i| + 2^-24 max|x|`
//!   (bf16 hi + lo for F32 weights: `≤ 2^-16 |x_i|`);
//! * weights: Q6_K rounded to f16 (`|Δw_i| ≤ 2^-10 |w_i|`); Q4_K and Q5_K rounded to f16 as
//!   `d·sc·q` and `64·dmin·m` parts (`≤ 2^-10·M_i` plus `2^-17` absolute, see [`magnitudes`]);
//!   Q8_0 exact, its per-unit f32 sums within `2^-17 M_i`;
//!   F16 exact; BF16 as row-scaled f16, exact down to `2^-31` of the row's largest `|w|` and
//!   within `2^-39·max_row |w|` below (`host::gpu::qmatmul::bf16_rows_to_scaled_f16`); F32 split
//!   into bf16 hi + lo with the lo·lo product dropped (`≤ 2^-15 |w_i|`);
//! * f32 tensor-core accumulation, sequential over `in/16` steps (and for Q4_K/Q5_K the `in/256`
//!   mins steps in the same sum) plus the split partials: `γ_{in/16 + in/256 + 25}` with
//!   `u = 2^-23` (truncating adders) times `Σ|w x|` (Q4_K/Q5_K: `Σ M_i |x_i|`, the terms the
//!   scaled-weight and mins steps add before they cancel).
//!
//! So `|y − y_ref| ≤ Σ_i (|x_i| (ε_w M_i + a_w) + |w_i| |Δx_i|) · 1.01 + γ · Σ_i A_i |x_i|`.

use flashtree::gpu::qmatmul::{qmm_swiglu_rows, QWeight, QmmWorkspace};
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::quant::{self, k_scales, GgmlType};
use flashtree_tests::gpu::gpu_or_skip;
use proptest::prelude::*;

pub(crate) const TYPES: [GgmlType; 7] =
    [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16, GgmlType::BF16, GgmlType::F32];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn f16_in(&mut self, lo: f32, hi: f32) -> [u8; 2] {
        let v = lo * (hi / lo).powf((self.unit() + 1.0) / 2.0);
        half::f16::from_f32(v).to_bits().to_le_bytes()
    }
}

/// Random weights of type `ty`: every bit pattern of quants and scales, with realistic f16 super
/// scales; float types from random values.
fn random_weights(ty: GgmlType, out: usize, inp: usize, rng: &mut Rng) -> Vec<u8> {
    match ty {
        GgmlType::F16 | GgmlType::F32 => {
            let v: Vec<f32> = (0..out * inp).map(|_| rng.unit() * 0.1).collect();
            quant::quantize(ty, &v).expect("quantize float weights")
        }
        // BF16 becomes row-scaled f16 (exact only down to 2^-31 of the row's largest value): a
        // quarter of the weights are scaled down by up to 2^-47 so that the rounded range is hit.
        GgmlType::BF16 => {
            let v: Vec<f32> = (0..out * inp)
                .map(|_| {
                    let tiny = rng.next().is_multiple_of(4);
                    let shift = (rng.next() % 48) as i32;
                    rng.unit() * 0.1 * if tiny { 2f32.powi(-shift) } else { 1.0 }
                })
                .collect();
            quant::quantize(ty, &v).expect("quantize float weights")
        }
        _ => {
            let (bs, ts) = (ty.block_size(), ty.type_size());
            let mut b: Vec<u8> = (0..out * inp / bs * ts).map(|_| rng.next() as u8).collect();
            for blk in b.chunks_exact_mut(ts) {
                match ty {
                    GgmlType::Q4_K | GgmlType::Q5_K => {
                        blk[0..2].copy_from_slice(&rng.f16_in(1e-4, 1e-2));
                        blk[2..4].copy_from_slice(&rng.f16_in(1e-4, 1e-2));
                    }
                    GgmlType::Q6_K => blk[208..210].copy_from_slice(&rng.f16_in(1e-4, 1e-2)),
                    GgmlType::Q8_0 => blk[0..2].copy_from_slice(&rng.f16_in(1e-4, 1e-2)),
                    _ => unreachable!(),
                }
            }
            b
        }
    }
}

/// `M_i` of the error budget for every weight (row-major `[out, in]`).
///
/// Q4_K and Q5_K (`formats::KScales`): the A values are `ŵ = f16(q·s_u)` with `s_u = f16(d·sc_u)`
/// (or `16·f16(d·sc_u/16)`): two roundings of `2^-11` each, `|ŵ − d·sc·q| ≤ 2^-10(1 + 2^-12)
/// |d·sc·q|` for normal f16, plus at most `15·2^-21 + 2^-25` where `s_u` or `ŵ` is subnormal;
/// the mins enter as `μ_u·S_u/64` with `μ_u = f16(−64·dmin·m_u)` (`2^-11` of `64·|dmin·m|`,
/// plus `2^-25`) and `S` in f16 hi + lo (to `2^-22`): per weight `≤ (2^-11 + 2^-22)|dmin·m|`
/// plus `2^-31`. With `M_i = |d·sc_j·q_i| + |dmin·m_j|` (from the dequantized `w_i`:
/// `d·sc·q = w_i + dmin·m`) that is `≤ 2^-10·1.001·M_i + 2^-17` per unit of `|x_i|`; and the
/// running sums add terms as large as `M_i·|x_i|` ([`expected`]'s `γ` term).
///
/// Q8_0 (`formats.rs`): the unit `j` of a row adds `d_j·P_j` with `P_j = Σ q_i x̂_i`, the A values
/// `q_i` exact (`|q| ≤ 128`). The f32 errors of one unit, per weight and relative to `|x_i|`: the
/// tensor-core sum `P_j` (two k16 products, each ≤ 17 alignment/truncation errors of 2^-23 of the
/// largest term) `≤ 34·2^-23·128·d_j` and the fma `≤ 2^-24·128·d_j`: under `2^-17·M_i` with
/// `M_i = 128·d_j`. The weights themselves are exact.
///
/// Q6_K: the dequantized weight is rounded to f16 twice (`d·sc`, then `·q`): `M_i = |w_i|`
/// with `2^-10`.
///
/// BF16: `M_i` = the largest `|w|` of the weight's row, with `2^-39` (the row-scaled f16
/// conversion's rounding, see the module doc).
fn magnitudes(ty: GgmlType, raw: &[u8], w: &[f32], inp: usize) -> Vec<f64> {
    let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32() as f64;
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let ts = ty.type_size();
            let mut m = Vec::with_capacity(w.len());
            for (blk, wb) in raw.chunks_exact(ts).zip(w.chunks_exact(256)) {
                let dmin = f16(&blk[2..4]);
                for (e, &wi) in wb.iter().enumerate() {
                    let (_, mm) = k_scales::scale_min(&blk[4..16], e / 32);
                    let min = dmin * mm as f64;
                    m.push((wi as f64 + min).abs() + min.abs());
                }
            }
            m
        }
        GgmlType::Q8_0 => raw
            .chunks_exact(34)
            .flat_map(|blk| {
                let d = f16(&blk[0..2]).abs();
                std::iter::repeat_n(128.0 * d, 32)
            })
            .collect(),
        GgmlType::BF16 => w
            .chunks_exact(inp)
            .flat_map(|row| {
                let max = row.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
                std::iter::repeat_n(max, inp)
            })
            .collect(),
        _ => w.iter().map(|&v| (v as f64).abs()).collect(),
    }
}

pub(crate) struct Case {
    pub ty: GgmlType,
    pub out: usize,
    pub inp: usize,
    pub raw: Vec<u8>,
    pub w: Vec<f32>,
}

/// K granularity of the tensor-core kernels for `ty` (32 for the float types).
pub(crate) fn qmm_block(ty: GgmlType) -> usize {
    ty.block_size().max(32)
}

pub(crate) fn case(ty: GgmlType, out: usize, blocks: usize, seed: u64) -> Case {
    let mut rng = Rng(seed | 1);
    let inp = blocks * qmm_block(ty);
    let raw = random_weights(ty, out, inp, &mut rng);
    let w = quant::dequantize(ty, &raw).expect("dequantize");
    Case { ty, out, inp, raw, w }
}

fn run(gpu: &Gpu, c: &Case, x: &[f32], n: usize) -> Vec<f32> {
    let w = QWeight::upload(gpu, c.ty, &c.raw, c.out, c.inp).unwrap();
    let dx = gpu.upload(x).unwrap();
    let mut dy = gpu.zeros::<f32>(n * c.out).unwrap();
    gpu.fill_bytes(&mut dy, 0xff).unwrap();
    let mut ws = QmmWorkspace::new(gpu, c.inp, c.out).unwrap();
    w.prepare_x(gpu, DevSpan::of(gpu, &dx), n, &mut ws).unwrap();
    w.matmul(gpu, n, DevSpan::of(gpu, &dy), &mut ws).unwrap();
    gpu.download(&dy).unwrap()
}

/// The f64 reference `y[col, o]` of every output and its error bound (above), `[n, out]`.
pub(crate) fn expected(c: &Case, x: &[f32], n: usize) -> Vec<(f64, f64)> {
    let m = magnitudes(c.ty, &c.raw, &c.w, c.inp);
    let (wq, xrel) = match c.ty {
        GgmlType::F16 => (0.0, 2f64.powi(-11)),
        GgmlType::BF16 => (2f64.powi(-39), 2f64.powi(-11)),
        // W and x both split into bf16 hi + lo; the lo·lo product is dropped.
        GgmlType::F32 => (2f64.powi(-15), 2f64.powi(-16)),
        GgmlType::Q4_K | GgmlType::Q5_K => (2f64.powi(-10) * 1.001, 2f64.powi(-11)),
        GgmlType::Q8_0 => (2f64.powi(-17), 2f64.powi(-11)),
        _ => (2f64.powi(-10), 2f64.powi(-11)),
    };
    let k_quant = matches!(c.ty, GgmlType::Q4_K | GgmlType::Q5_K);
    // Absolute part of a weight's rounding per unit of |x_i| (Q4_K/Q5_K's subnormal scales).
    let wabs = if k_quant { 2f64.powi(-17) } else { 0.0 };
    let steps = c.inp / 16 + c.inp / 256 + 25;
    let u = 2f64.powi(-23);
    let gamma = steps as f64 * u / (1.0 - steps as f64 * u);
    let mut res = Vec::with_capacity(n * c.out);
    for col in 0..n {
        let xc = &x[col * c.inp..(col + 1) * c.inp];
        let xmax = xc.iter().fold(0f64, |a, &v| a.max((v as f64).abs()));
        for o in 0..c.out {
            let wr = &c.w[o * c.inp..(o + 1) * c.inp];
            let mr = &m[o * c.inp..(o + 1) * c.inp];
            let (mut want, mut bound, mut abs) = (0f64, 0f64, 0f64);
            for i in 0..c.inp {
                let (wi, xi) = (wr[i] as f64, xc[i] as f64);
                want += wi * xi;
                abs += if k_quant { mr[i] * xi.abs() } else { (wi * xi).abs() };
                bound += xi.abs() * (wq * mr[i] + wabs) + wi.abs() * (xrel * xi.abs() + 2f64.powi(-24) * xmax);
            }
            res.push((want, bound * 1.01 + gamma * abs + 1e-30));
        }
    }
    res
}

fn check(c: &Case, x: &[f32], n: usize, y: &[f32]) -> Result<(), TestCaseError> {
    for (i, &(want, tol)) in expected(c, x, n).iter().enumerate() {
        let (col, o) = (i / c.out, i % c.out);
        let got = y[i] as f64;
        prop_assert!(got.is_finite(), "{:?} [{}, {}] y[{}, {}] = {} (not written?)", c.ty, c.out, c.inp, col, o, got);
        prop_assert!(
            (got - want).abs() <= tol,
            "{:?} [{}, {}] n={} y[{}, {}] = {} vs {} (err {:e} > {:e})",
            c.ty,
            c.out,
            c.inp,
            n,
            col,
            o,
            got,
            want,
            (got - want).abs(),
            tol
        );
    }
    Ok(())
}

pub(crate) fn activations(seed: u64, n: usize, inp: usize) -> Vec<f32> {
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    (0..n)
        .flat_map(|c| {
            // Per-column scale between 1e-3 and 1e3 so the power-of-two scaling is exercised.
            let s = 10f32.powf((c % 7) as f32 - 3.0);
            (0..inp).map(|_| rng.unit() * s).collect::<Vec<_>>()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn qmm_matches_reference_for_every_type(
        ty in prop::sample::select(TYPES.to_vec()),
        out in 1usize..300,
        blocks in 1usize..24,
        n in 1usize..=64,
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("qmm_matches_reference_for_every_type") else { return Ok(()) };
        let blocks = if qmm_block(ty) == 32 { blocks * 4 } else { blocks };
        let c = case(ty, out, blocks, seed);
        let x = activations(seed, n, c.inp);
        let y = run(gpu, &c, &x, n);
        check(&c, &x, n, &y)?;
    }

    /// Batch invariance: every column's bits equal those of the same column computed alone,
    /// and those of a launch with different other columns and a different n.
    #[test]
    fn qmm_column_bits_do_not_depend_on_other_columns_or_n(
        ty in prop::sample::select(TYPES.to_vec()),
        out in 1usize..260,
        blocks in 1usize..20,
        n in 2usize..=64,
        pick in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("qmm_column_bits_do_not_depend_on_other_columns_or_n") else { return Ok(()) };
        let blocks = if qmm_block(ty) == 32 { blocks * 4 } else { blocks };
        let c = case(ty, out, blocks, seed);
        let x = activations(seed, n, c.inp);
        let all = run(gpu, &c, &x, n);
        let j = pick.index(n);
        let alone = run(gpu, &c, &x[j * c.inp..(j + 1) * c.inp], 1);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&all[j * c.out..(j + 1) * c.out]), bits(&alone));
        // Same column j at another position count: first j+1 columns, others replaced.
        let mut x2 = activations(seed ^ 77, j + 1, c.inp);
        x2[j * c.inp..(j + 1) * c.inp].copy_from_slice(&x[j * c.inp..(j + 1) * c.inp]);
        let other = run(gpu, &c, &x2, j + 1);
        prop_assert_eq!(bits(&all[j * c.out..(j + 1) * c.out]), bits(&other[j * c.out..(j + 1) * c.out]));
    }
}

/// One case per type at a 27B shape with split K (5120 → 6144), all 64 columns checked (two
/// launches of 32).
#[test]
fn qmm_matches_reference_at_a_27b_shape() {
    let Some(gpu) = gpu_or_skip("qmm_matches_reference_at_a_27b_shape") else { return };
    for ty in TYPES {
        let c = case(ty, 6144, 5120 / qmm_block(ty), 42);
        let x = activations(7, 64, c.inp);
        let y = run(gpu, &c, &x, 64);
        check(&c, &x, 64, &y).unwrap();
    }
}

/// A long K per split (in = 24576, out = 200: 16 splits of 1536 elements) so the multi-tile
/// kernels that stage x in shared memory (`kernel_abi::qmm_stages_x`, and every warpgroup kernel:
/// `kernel_abi::qmm_wgmma`) go through more than one chunk of `QMM_XS_CHUNK_UNITS` units per
/// split: accuracy at n = 12, 22 and 32 (every multi-tile kernel) and 40 and 64 (two launches),
/// and the bits of a column (in the first and, past 32, the second launch) equal those of the
/// one-tile kernel (which reads x from global memory) on it alone.
#[test]
fn qmm_staged_x_chunks_match_reference_and_one_tile_bits() {
    let Some(gpu) = gpu_or_skip("qmm_staged_x_chunks_match_reference_and_one_tile_bits") else { return };
    let inp = 24576;
    assert!(inp / 16 > kernel_abi::QMM_XS_CHUNK_UNITS as usize * 32, "the split must span two chunks");
    for ty in TYPES {
        let c = case(ty, 200, inp / qmm_block(ty), 5);
        for n in [12, 22, 32, 40, 64] {
            let x = activations(11 + n as u64, n, c.inp);
            let y = run(gpu, &c, &x, n);
            check(&c, &x, n, &y).unwrap();
            for j in [10, 37].into_iter().filter(|&j| j < n) {
                let alone = run(gpu, &c, &x[j * c.inp..(j + 1) * c.inp], 1);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&y[j * c.out..(j + 1) * c.out]), bits(&alone), "{ty:?} n = {n}, column {j}");
            }
        }
    }
}

/// A matrix with more row blocks than the device keeps resident (`(slots + 8)·128` rows), so the
/// split plan computes whole waves unsplit and splits the rest (`kernel_abi::qmm_split_plan`):
/// accuracy at n = 3, and every column's bits at n = 1, 22 and 40 (one-tile, warpgroup and
/// two-launch kernels) equal to the same column alone — the two kinds of row block keep their
/// summation order at every n.
#[test]
fn qmm_split_plan_with_unsplit_waves_matches_reference_and_column_bits() {
    let Some(gpu) = gpu_or_skip("qmm_split_plan_with_unsplit_waves_matches_reference_and_column_bits") else {
        return;
    };
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0] {
        let prefix = match ty {
            GgmlType::Q4_K => "qmm_q4k_nt1",
            GgmlType::Q6_K => "qmm_q6k_nt1",
            _ => "qmm_q8_0_nt1",
        };
        let slots = gpu.resident_blocks(prefix, kernel_abi::QMM_WARPS * 32).unwrap() as usize;
        let out = (slots + 8) * 128;
        // 8 weight blocks of K per row (K-quants: 2048 inputs; Q8_0: 256): splits of ≥ 2 blocks.
        let c = case(ty, out, 8, 3);
        let w = QWeight::upload(gpu, c.ty, &c.raw, c.out, c.inp).unwrap();
        let plan = w.plan();
        assert!(plan.full > 0 && plan.ksplit > 1, "{ty:?} [{out}, {}]: plan {plan:?} has no unsplit waves", c.inp);
        drop(w);
        let x = activations(13, 3, c.inp);
        let y = run(gpu, &c, &x, 3);
        check(&c, &x, 3, &y).unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for n in [22usize, 40] {
            let x = activations(17 + n as u64, n, c.inp);
            let y = run(gpu, &c, &x, n);
            for j in [0usize, n - 1] {
                let alone = run(gpu, &c, &x[j * c.inp..(j + 1) * c.inp], 1);
                assert_eq!(bits(&y[j * c.out..(j + 1) * c.out]), bits(&alone), "{ty:?} n = {n}, column {j}");
            }
        }
    }
}

/// The bits of `y` of one product of `w` over `n` tokens `x` (`swiglu`: the fused gate/up), into a
/// NaN-poisoned output.
fn product_bits(gpu: &Gpu, w: &QWeight, x: &[f32], n: usize, swiglu: bool) -> Vec<u32> {
    let rows = if swiglu { qmm_swiglu_rows(w.ff().unwrap()) } else { w.out() };
    let cols = w.ff().unwrap_or(w.out());
    let dx = gpu.upload(x).unwrap();
    let mut dy = gpu.zeros::<f32>(n * cols).unwrap();
    gpu.fill_bytes(&mut dy, 0xff).unwrap();
    let mut ws = QmmWorkspace::new(gpu, w.inp(), rows).unwrap();
    w.prepare_x(gpu, DevSpan::of(gpu, &dx), n, &mut ws).unwrap();
    if swiglu {
        w.swiglu(gpu, n, DevSpan::of(gpu, &dy), &mut ws).unwrap();
    } else {
        w.matmul(gpu, n, DevSpan::of(gpu, &dy), &mut ws).unwrap();
    }
    gpu.download(&dy).unwrap().into_iter().map(f32::to_bits).collect()
}

/// Split row blocks reduce through thread-block clusters (partials in shared memory, read by the
/// cluster's blocks through distributed shared memory) wherever the plan splits every row block:
/// the same additions in the same split order as the global-memory reduction, so the same bits —
/// for every block format, plain and fused SwiGLU, clusters of 6, 8, 10 and 16 blocks (past 8:
/// the non-portable size), a partial last row block, and n = 1 … 40 (two launches past 32). A
/// launch runs in clusters only where one cluster per row block fits the device at once, so the
/// test names the cluster sizes that did.
#[test]
fn qmm_cluster_reduction_equals_the_global_reduction_bitwise() {
    let Some(gpu) = gpu_or_skip("qmm_cluster_reduction_equals_the_global_reduction_bitwise") else { return };
    let mut sizes = std::collections::BTreeSet::new();
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0] {
        // (rows, K in units of 256 inputs): clusters of 16, 10, 8 and 6 on nvidia-h200's 264
        // resident one-tile blocks, and 100 rows (a row block of 100 rows).
        for (i, (out, k256, swiglu)) in
            [(128, 32, false), (256, 20, false), (640, 16, true), (5120, 24, false), (100, 16, false)]
                .into_iter()
                .enumerate()
        {
            let blocks = k256 * 256 / qmm_block(ty);
            let (mut w, inp) = if swiglu {
                let (g, u) = (case(ty, out / 2, blocks, 40 + i as u64), case(ty, out / 2, blocks, 50 + i as u64));
                (QWeight::upload_gate_up(gpu, ty, &g.raw, &u.raw, out / 2, g.inp).unwrap(), g.inp)
            } else {
                let c = case(ty, out, blocks, 40 + i as u64);
                (QWeight::upload(gpu, ty, &c.raw, out, c.inp).unwrap(), c.inp)
            };
            if !w.cluster_reduction() {
                // Only where the run turned clusters off, or the device's residency gave this
                // shape unsplit row blocks.
                assert!(
                    std::env::var("FLASHTREE_QMM_CLUSTER").is_ok_and(|v| v == "0")
                        || w.plan().full > 0
                        || w.ksplit() == 1,
                    "{ty:?} [{out}, {inp}]: plan {:?} but no cluster reduction",
                    w.plan()
                );
                continue;
            }
            for n in [1usize, 3, 8, 22, 32, 40] {
                // Clusters only where one per row block fits the device at once (per kernel).
                let (resident, row_blocks) = w.cluster_residency(gpu, n.min(32), swiglu).unwrap().unwrap();
                if resident >= row_blocks {
                    sizes.insert(w.ksplit());
                }
                let x = activations(60 + n as u64, n, inp);
                let clustered = product_bits(gpu, &w, &x, n, swiglu);
                w.set_cluster_reduction(false);
                let global = product_bits(gpu, &w, &x, n, swiglu);
                w.set_cluster_reduction(true);
                if let Some(j) = (0..global.len()).find(|&j| global[j] != clustered[j]) {
                    panic!(
                        "{ty:?} [{out}, {inp}] swiglu {swiglu} split {} n = {n}: y[{j}] = {:e} clustered vs {:e}",
                        w.ksplit(),
                        f32::from_bits(clustered[j]),
                        f32::from_bits(global[j])
                    );
                }
                assert!(
                    clustered.iter().all(|&b| b != u32::MAX),
                    "{ty:?} [{out}, {inp}] n = {n}: an output not written"
                );
            }
        }
    }
    eprintln!("qmm cluster reduction: launches in clusters of {sizes:?} checked");
    if std::env::var("FLASHTREE_QMM_CLUSTER").map_or(true, |v| v != "0") {
        assert!(!sizes.is_empty(), "no launch ran in clusters");
    }
}

/// The global-memory split-K reduction spread over the splits (`QmmParams::reduce_spread`: once
/// every split of a row block has published its partials, split `s` adds those of the columns
/// `c ≡ s (mod ksplit)`) gives bitwise the reduction by the last split to finish — the same adds
/// in the same order — for every block format, plain and fused SwiGLU, uniform splits and the
/// 27B gate/up's mixed plan (264 unsplit row blocks, then 8 split 10 ways: Q4_K, 5120 → 2 ×
/// 17408), a partial last row block, and n = 22 … 40 (two launches past 32; one-tile launches
/// keep the last-block reduction). Clusters are turned off for the check (they take the uniform
/// plans where they fit).
#[test]
fn qmm_spread_reduction_equals_the_last_block_reduction_bitwise() {
    let Some(gpu) = gpu_or_skip("qmm_spread_reduction_equals_the_last_block_reduction_bitwise") else { return };
    let (mut spread_launches, mut mixed_checked) = (0usize, false);
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0] {
        // (rows, K in units of 256 inputs, fused SwiGLU)
        let mut shapes = vec![(128, 32, false), (640, 16, true), (5120, 24, false), (100, 16, false)];
        if ty == GgmlType::Q4_K {
            shapes.push((34_816, 20, true));
        }
        for (i, (out, k256, swiglu)) in shapes.into_iter().enumerate() {
            let blocks = k256 * 256 / qmm_block(ty);
            let inp = blocks * qmm_block(ty);
            let mut rng = Rng(70 + i as u64);
            let mut w = if swiglu {
                let (g, u) = (random_weights(ty, out / 2, inp, &mut rng), random_weights(ty, out / 2, inp, &mut rng));
                QWeight::upload_gate_up(gpu, ty, &g, &u, out / 2, inp).unwrap()
            } else {
                QWeight::upload(gpu, ty, &random_weights(ty, out, inp, &mut rng), out, inp).unwrap()
            };
            w.set_cluster_reduction(false);
            for n in [1usize, 3, 8, 9, 22, 32, 40] {
                if !w.spread_reduction(gpu, n.min(32), swiglu).unwrap() {
                    continue;
                }
                spread_launches += 1;
                mixed_checked |= w.plan().full > 0;
                let x = activations(80 + n as u64, n, inp);
                let spread = product_bits(gpu, &w, &x, n, swiglu);
                w.set_spread_reduction(false);
                let last = product_bits(gpu, &w, &x, n, swiglu);
                w.set_spread_reduction(true);
                if let Some(j) = (0..last.len()).find(|&j| last[j] != spread[j]) {
                    panic!(
                        "{ty:?} [{out}, {inp}] swiglu {swiglu} plan {:?} n = {n}: y[{j}] = {:e} spread vs {:e}",
                        w.plan(),
                        f32::from_bits(spread[j]),
                        f32::from_bits(last[j])
                    );
                }
                assert!(spread.iter().all(|&b| b != u32::MAX), "{ty:?} [{out}, {inp}] n = {n}: an output not written");
            }
        }
    }
    eprintln!("qmm spread reduction: {spread_launches} shapes × token counts checked (mixed plan: {mixed_checked})");
    if std::env::var("FLASHTREE_QMM_SPREAD").map_or(true, |v| v != "0") {
        assert!(spread_launches > 0 && mixed_checked, "the spread reduction never ran (or never on a mixed plan)");
    }
}

/// Upload refuses what no kernel can multiply (naming it); a product checks the token count,
/// the workspace's size and what it holds, and the output's length.
#[test]
fn qmm_rejects_bad_shapes_and_types() {
    let Some(gpu) = gpu_or_skip("qmm_rejects_bad_shapes_and_types") else { return };
    let e = |r: Result<(), flashtree::gpu::GpuError>| r.unwrap_err().to_string();
    let up = |ty: GgmlType, raw: &[u8], out: usize, inp: usize| QWeight::upload(gpu, ty, raw, out, inp).map(|_| ());
    assert!(e(up(GgmlType::Q4_K, &[0u8; 4 * 144], 4, 500)).contains("multiple of 256"));
    assert!(e(up(GgmlType::Q4_0, &[0u8; 4 * 16 * 18], 4, 512)).contains("Q4_0"));
    assert!(e(up(GgmlType::Q4_K, &[0u8; 100], 2, 256)).contains("100 bytes, not 288"));
    let x = gpu.zeros::<f32>(65 * 1024).unwrap();
    let y = gpu.zeros::<f32>(65 * 4).unwrap();
    let (xs, ys) = (DevSpan::of(gpu, &x), DevSpan::of(gpu, &y));
    let w = QWeight::upload(gpu, GgmlType::Q4_K, &[0u8; 4 * 2 * 144], 4, 512).unwrap();
    let mut ws = QmmWorkspace::new(gpu, 512, 4).unwrap();
    assert!(e(w.prepare_x(gpu, xs, 65, &mut ws)).contains("65 tokens"));
    assert!(e(w.matmul(gpu, 65, ys, &mut ws)).contains("65 tokens"));
    let wide = QWeight::upload(gpu, GgmlType::Q4_K, &[0u8; 4 * 4 * 144], 4, 1024).unwrap();
    assert!(e(wide.prepare_x(gpu, xs, 1, &mut ws)).contains("workspace"));
    assert!(e(wide.matmul(gpu, 1, ys, &mut ws)).contains("exceeds the workspace"));
    // The prepared-activation API checks that the workspace holds what the product needs.
    assert!(e(w.matmul(gpu, 1, ys, &mut ws)).contains("holds activations None"));
    w.prepare_x(gpu, xs, 1, &mut ws).unwrap();
    assert!(e(w.matmul(gpu, 2, ys, &mut ws)).contains("not n = 2"));
    let wf = QWeight::upload(gpu, GgmlType::F32, &[0u8; 4 * 4 * 512], 4, 512).unwrap();
    assert!(e(wf.matmul(gpu, 1, ys, &mut ws)).contains("with pairs"));
    assert!(e(w.swiglu(gpu, 1, ys, &mut ws)).contains("not gate/up"));
    let y_short = gpu.zeros::<f32>(3).unwrap();
    assert!(e(w.matmul(gpu, 1, DevSpan::of(gpu, &y_short), &mut ws)).contains("y 4 values (has 3)"));
    w.matmul(gpu, 1, ys, &mut ws).unwrap();
}
