//! Host packing of a weight matrix into the lane layout the `qmm_*` kernels stream
//! ([`kernel_abi::qmm_lanes`]): a byte permutation of each 16-row group's block, zero rows up to
//! a whole 128-row kernel block, the gate/up interleave of the fused SwiGLU product, and BF16
//! rewritten as row-scaled f16. No device: [`super::PackedWeight`] wraps the result.

use flashtree_quants::GgmlType;
use kernel_abi::{qmm_block_bytes, qmm_lanes};

use super::format::{family_for, qmm_is_row_scaled, qmm_packed_bytes, swiglu_rows};
use crate::gpu::GpuError;

/// BF16 rows `[out, in]` (raw little-endian bytes) as f16 rows `ŵ = w / s_r` (raw bytes, the
/// F16 storage layout) and the row scales `s_r`: `s_r = 2^(e_r − 14)` with `e_r` the exponent of
/// the row's largest finite `|w|` (1.0 for a row of zeros), so `max_r |ŵ| ∈ [2^14, 2^15)`.
///
/// Exact for every `|ŵ| ≥ 2^-17` (a bf16 significand has 8 bits, f16 holds 11 in its normal
/// range and ≥ 8 in subnormals down to 2^-17); smaller values are rounded to nearest on the
/// f16 subnormal grid, `|ŵ − w/s_r| ≤ 2^-25`, which is `≤ 2^-39·max_r |w|` per weight. ±Inf and
/// NaN stay ±Inf and NaN. `s_r ≥ 2^-147` (the smallest bf16 exponent is −133) is an f32.
pub fn bf16_rows_to_scaled_f16(raw: &[u8], out: usize, inp: usize) -> (Vec<u8>, Vec<f32>) {
    let bf16 = |b: &[u8]| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
    let mut f16 = vec![0u8; raw.len()];
    let mut scales = Vec::with_capacity(out);
    for (src, dst) in raw.chunks_exact(2 * inp).zip(f16.chunks_exact_mut(2 * inp)).take(out) {
        let max = src.chunks_exact(2).map(bf16).filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
        let scale = if max == 0.0 {
            1.0
        } else {
            // `max = m·2^e` with `m ∈ [1, 2)`: f64 holds every f32 (subnormals too) as a normal.
            let e = ((max as f64).to_bits() >> 52) as i32 - 1023;
            2f64.powi(e - 14)
        };
        scales.push(scale as f32);
        for (s, d) in src.chunks_exact(2).zip(dst.chunks_exact_mut(2)) {
            let v = half::f16::from_f64(bf16(s) as f64 / scale);
            d.copy_from_slice(&v.to_le_bytes());
        }
    }
    (f16, scales)
}

/// The lane layout of `ty` (see [`kernel_abi::qmm_lanes`]).
fn lane_layout(ty: GgmlType) -> Option<(&'static [qmm_lanes::Piece], &'static [qmm_lanes::Field])> {
    Some(match ty {
        GgmlType::Q4_K => qmm_lanes::Q4_K,
        GgmlType::Q5_K => qmm_lanes::Q5_K,
        GgmlType::Q6_K => qmm_lanes::Q6_K,
        GgmlType::Q8_0 => qmm_lanes::Q8_0,
        GgmlType::F16 | GgmlType::BF16 => qmm_lanes::HALF,
        GgmlType::F32 => qmm_lanes::F32,
        _ => return None,
    })
}

/// For each byte of one packed 16-row block of `ty` (`16·BYTES` of them, in packed order),
/// the byte of the 16 raw blocks it holds: `r·BYTES + e` for byte `e` of row `r`.
fn packed_sources(ty: GgmlType, bytes: usize) -> Result<Vec<usize>, GpuError> {
    let layout =
        lane_layout(ty).ok_or_else(|| GpuError::shape("qmm", format!("weight type {ty:?} has no lane layout")))?;
    let private = qmm_lanes::private_bytes(layout) as usize;
    let mut src = vec![usize::MAX; 16 * bytes];
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        let mut i = 0;
        for &(row, off, len, stride) in layout.0 {
            let r = g + 8 * row as usize;
            for k in 0..len as usize {
                src[(i / 16) * 512 + 16 * lane + i % 16] = r * bytes + off as usize + t * stride as usize + k;
                i += 1;
            }
        }
        debug_assert_eq!(i, private);
    }
    for (f, &(off, len)) in layout.1.iter().enumerate() {
        let base = qmm_lanes::field_offset(layout, f) as usize;
        for r in 0..16 {
            for k in 0..len as usize {
                src[base + r * len as usize + k] = r * bytes + off as usize + k;
            }
        }
    }
    Ok(src)
}

/// Repacks W `[out, in]` (raw GGUF bytes, rows contiguous) into the layout the `qmm_*` kernels
/// stream: for each group of 16 rows and each K block `b`, the 16 rows' block `b` in the lane
/// order of [`kernel_abi::qmm_lanes`] (each lane's private bytes as 16-byte chunks, chunk `j`
/// of all 32 lanes contiguous; then the per-row fields a quad shares),
///
/// `packed[(group·blocks + b)·16·BYTES + p] = W[16·group + r][b·BYTES + e]` with `(r, e)` the
/// source of packed position `p`,
///
/// with zero rows up to a whole 128-row kernel block ([`qmm_packed_bytes`]; a zero block is a
/// zero weight in every format). Bytes are moved, never changed (the layout is a permutation of
/// each group's block), so the product is the one of the raw matrix — except for row-scaled
/// types (BF16), whose rows are first rewritten as f16 values times a power-of-two row scale
/// ([`bf16_rows_to_scaled_f16`]: exact for all but the values below `2^-31` of the row's
/// largest) and packed as F16, with the `⌈out/128⌉·128` scales after the blocks (f32, 1.0 for
/// the padding rows). The kernels address a matrix with 32-bit offsets: a packed size over
/// 4 GiB is refused before anything is allocated.
pub fn pack_weights(ty: GgmlType, raw: &[u8], out: usize, inp: usize) -> Result<Vec<u8>, GpuError> {
    let (elems, bytes, _) = family_for(ty, out, inp)?.geometry;
    let (elems, bytes) = (elems as usize, bytes as usize);
    let blocks = inp / elems;
    let row_bytes = blocks * bytes;
    let packed_len = qmm_packed_bytes(ty, out, inp)?;
    if packed_len > u32::MAX as usize {
        return Err(GpuError::shape(
            "qmm",
            format!(
                "W {ty:?} [{out}, {inp}] is {packed_len} bytes packed: the kernels address at most 4 GiB per matrix"
            ),
        ));
    }
    if raw.len() != out * row_bytes {
        return Err(GpuError::shape(
            "qmm",
            format!("W {ty:?} [{out}, {inp}] is {} bytes, not {} ({row_bytes} per row)", raw.len(), out * row_bytes),
        ));
    }
    check_k_scales(ty, raw, bytes, row_bytes)?;
    let src = packed_sources(ty, bytes)?;
    let mut packed = vec![0u8; packed_len];
    let block_bytes = qmm_block_bytes(out as u32, inp as u32, elems as u32, bytes as u32) as usize;
    let (blocks_part, scales_part) = packed.split_at_mut(block_bytes);
    let scaled;
    let raw = if qmm_is_row_scaled(ty) {
        let (f16, scales) = bf16_rows_to_scaled_f16(raw, out, inp);
        for (r, d) in scales_part.chunks_exact_mut(4).enumerate() {
            d.copy_from_slice(&scales.get(r).copied().unwrap_or(1.0).to_le_bytes());
        }
        scaled = f16;
        &scaled[..]
    } else {
        raw
    };
    for (group, dst_group) in blocks_part.chunks_exact_mut(blocks * 16 * bytes).enumerate() {
        let rows = out.saturating_sub(16 * group).min(16);
        for (b, dst) in dst_group.chunks_exact_mut(16 * bytes).enumerate() {
            for (d, &s) in dst.iter_mut().zip(&src) {
                let (r, e) = (s / bytes, s % bytes);
                if r < rows {
                    *d = raw[(16 * group + r) * row_bytes + b * bytes + e];
                }
            }
        }
    }
    Ok(packed)
}

/// Largest `|d|` and `|dmin|` of a Q4_K/Q5_K super-block that the kernels take: they fold `d`
/// into f16 unit scales whose bias `−1024·d·sc` (`sc ≤ 63`) and mins `−64·dmin·m` (`m ≤ 63`)
/// must stay finite in f16 (`gpu-kernels/src/qmatmul/formats.rs`, `KScales`). Real models'
/// scales are below `10^-1`.
pub const K_QUANT_MAX_D: f32 = 1.0;
/// See [`K_QUANT_MAX_D`].
pub const K_QUANT_MAX_DMIN: f32 = 16.0;

/// Refuses a Q4_K/Q5_K matrix with a super-block scale outside the kernels' range
/// ([`K_QUANT_MAX_D`], [`K_QUANT_MAX_DMIN`]; NaN and infinities included), naming the first such
/// block. Other types pass.
fn check_k_scales(ty: GgmlType, raw: &[u8], bytes: usize, row_bytes: usize) -> Result<(), GpuError> {
    if !matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) {
        return Ok(());
    }
    for (i, blk) in raw.chunks_exact(bytes).enumerate() {
        let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        let dmin = half::f16::from_le_bytes([blk[2], blk[3]]).to_f32();
        // A NaN compares false: refused too.
        let within = |v: f32, max: f32| v.abs() <= max;
        if !within(d, K_QUANT_MAX_D) || !within(dmin, K_QUANT_MAX_DMIN) {
            let per_row = row_bytes / bytes;
            return Err(GpuError::shape(
                "qmm",
                format!(
                    "W {ty:?} row {} super-block {} has d = {d}, dmin = {dmin}: the kernels take |d| ≤ {K_QUANT_MAX_D} and |dmin| ≤ {K_QUANT_MAX_DMIN}",
                    i / per_row,
                    i % per_row
                ),
            ));
        }
    }
    Ok(())
}

/// Interleaves gate and up `[ff, in]` (raw GGUF bytes of type `ty`, rows contiguous) by 8 rows —
/// rows `16b + j` = gate row `8b + j`, rows `16b + 8 + j` = up row `8b + j` (`j < 8`; rows past
/// `ff` zero) — and packs the result like [`pack_weights`]: the W of [`super::QWeight::swiglu`]. In the
/// kernels' `m16` tile, rows `g` and `g + 8` are the gate and up rows of one feature, so the lane
/// that holds one result holds the other.
pub fn pack_gate_up(ty: GgmlType, gate: &[u8], up: &[u8], ff: usize, inp: usize) -> Result<Vec<u8>, GpuError> {
    let rows = swiglu_rows(ff)?;
    let (elems, bytes, _) = family_for(ty, rows, inp)?.geometry;
    let row_bytes = inp / elems as usize * bytes as usize;
    for (name, m) in [("gate", gate), ("up", up)] {
        if m.len() != ff * row_bytes {
            return Err(GpuError::shape(
                "qmm_swiglu",
                format!(
                    "{name} {ty:?} [{ff}, {inp}] is {} bytes, not {} ({row_bytes} per row)",
                    m.len(),
                    ff * row_bytes
                ),
            ));
        }
        // Each matrix's own rows in the message (the interleaved one's would mislead).
        check_k_scales(ty, m, bytes as usize, row_bytes)
            .map_err(|e| GpuError::shape("qmm_swiglu", format!("{name}: {e}")))?;
    }
    let mut inter = vec![0u8; rows * row_bytes];
    for f in 0..ff {
        let (b, j) = (f / 8, f % 8);
        let src = f * row_bytes..(f + 1) * row_bytes;
        let g_at = (16 * b + j) * row_bytes;
        let u_at = (16 * b + 8 + j) * row_bytes;
        inter[g_at..g_at + row_bytes].copy_from_slice(&gate[src.clone()]);
        inter[u_at..u_at + row_bytes].copy_from_slice(&up[src]);
    }
    pack_weights(ty, &inter, rows, inp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::qmatmul::format::qmm_swiglu_rows;

    /// The lane layout of every format is a permutation of a 16-row group's block: every raw
    /// byte is placed exactly once.
    #[test]
    fn lane_layout_is_a_permutation_of_each_group_block() {
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16, GgmlType::F32] {
            let (_, bytes, _) = family_for(ty, 16, 256).unwrap().geometry;
            let mut src = packed_sources(ty, bytes as usize).unwrap();
            src.sort_unstable();
            assert!(src.iter().copied().eq(0..16 * bytes as usize), "{ty:?}");
        }
    }

    /// Lane `l = 4g + t` finds its pieces at chunk positions `512·j + 16·l`, and the last group's
    /// padding rows are zero.
    #[test]
    fn pack_places_lane_pieces_and_zero_pads() {
        for (ty, inp, out) in [(GgmlType::Q6_K, 512, 19), (GgmlType::Q8_0, 96, 33), (GgmlType::Q4_K, 256, 16)] {
            let (elems, bytes, _) = family_for(ty, out, inp).unwrap().geometry;
            let (blocks, bytes) = (inp / elems as usize, bytes as usize);
            let row_bytes = blocks * bytes;
            let mut raw: Vec<u8> = (0..out * row_bytes).map(|i| (i * 7 % 251 + 1) as u8).collect();
            if ty == GgmlType::Q4_K {
                // d and dmin below 1 (their f16 high bytes ≤ 0x3b): the range the kernels take.
                for blk in raw.chunks_exact_mut(bytes) {
                    blk[1] &= 0x3b;
                    blk[3] &= 0x3b;
                }
            }
            let packed = pack_weights(ty, &raw, out, inp).unwrap();
            assert_eq!(packed.len(), out.div_ceil(128) * 128 * row_bytes);
            assert_eq!(packed.len(), qmm_packed_bytes(ty, out, inp).unwrap());
            let (pieces, _) = lane_layout(ty).unwrap();
            let (row, off, len, stride) = pieces[1];
            for group in 0..out.div_ceil(128) * 8 {
                for b in 0..blocks {
                    let base = (group * blocks + b) * 16 * bytes;
                    // Lane 4·3 + 2 (g = 3, t = 2): its second piece follows its first.
                    let lane = 14usize;
                    let first = pieces[0].2 as usize;
                    for k in 0..len as usize {
                        let i = first + k;
                        let at = base + (i / 16) * 512 + 16 * lane + i % 16;
                        let o = 16 * group + 3 + 8 * row as usize;
                        let want = if o < out {
                            raw[o * row_bytes + b * bytes + off as usize + 2 * stride as usize + k]
                        } else {
                            0
                        };
                        assert_eq!(packed[at], want, "{ty:?} group {group} block {b} byte {k}");
                    }
                }
            }
        }
    }

    #[test]
    fn bf16_rows_become_exact_row_scaled_f16() {
        let bf16 = |v: f32| ((v.to_bits() + 0x7fff + ((v.to_bits() >> 16) & 1)) >> 16) as u16;
        let inp = 64;
        let mut rows: Vec<Vec<f32>> = Vec::new();
        // A wide row: 0.75 down to 2^-40 of it, both signs, and bf16 subnormals in a tiny row.
        rows.push(
            (0..inp)
                .map(|i| 0.75 * 2f32.powi(-(i as i32 * 40 / inp as i32)) * if i % 3 == 0 { -1.0 } else { 1.0 })
                .collect(),
        );
        rows.push(vec![0.0; inp]);
        rows.push((0..inp).map(|i| f32::from_bits(((i as u32 % 127) + 1) << 16)).collect());
        rows.push(
            (0..inp)
                .map(|i| {
                    if i == 5 {
                        f32::INFINITY
                    } else if i == 6 {
                        f32::NAN
                    } else {
                        3e30 * (i as f32 - 30.0)
                    }
                })
                .collect(),
        );
        let raw: Vec<u8> = rows.iter().flatten().flat_map(|&v| bf16(v).to_le_bytes()).collect();
        let (f16, scales) = bf16_rows_to_scaled_f16(&raw, rows.len(), inp);
        assert_eq!(scales[1], 1.0);
        for (r, row) in raw.chunks_exact(2 * inp).enumerate() {
            let s = scales[r] as f64;
            assert_eq!(s.log2().fract(), 0.0, "row {r}: scale {s} is a power of two");
            let mut max = 0f64;
            for i in 0..inp {
                let w = f32::from_bits((u16::from_le_bytes([row[2 * i], row[2 * i + 1]]) as u32) << 16) as f64;
                let h = half::f16::from_le_bytes([f16[2 * (r * inp + i)], f16[2 * (r * inp + i) + 1]]).to_f64();
                if !w.is_finite() {
                    assert_eq!(h.is_nan(), w.is_nan(), "row {r} elem {i}");
                    assert_eq!(h.is_infinite(), w.is_infinite(), "row {r} elem {i}");
                    continue;
                }
                max = max.max(h.abs());
                let want = w / s;
                if want.abs() >= 2f64.powi(-17) {
                    assert_eq!(h, want, "row {r} elem {i}: exact");
                } else {
                    assert!((h - want).abs() <= 2f64.powi(-25), "row {r} elem {i}: {h} vs {want}");
                }
            }
            if r != 1 {
                assert!((2f64.powi(14)..2f64.powi(15)).contains(&max), "row {r}: max {max}");
            }
        }
        assert!(
            (0..inp).any(|i| {
                let h = half::f16::from_le_bytes([f16[2 * i], f16[2 * i + 1]]).to_f64();
                h != 0.0 && h.abs() < 2f64.powi(-14)
            }),
            "the wide row reaches the f16 subnormals"
        );
    }

    /// Packed BF16 is the F16 packing of the scaled rows followed by the padded rows' scales.
    #[test]
    fn bf16_packs_as_f16_blocks_then_row_scales() {
        let (out, inp) = (19, 96);
        let raw: Vec<u8> = (0..out * inp).flat_map(|i| (0x3c00u16 + (i * 37 % 4000) as u16).to_le_bytes()).collect();
        let packed = pack_weights(GgmlType::BF16, &raw, out, inp).unwrap();
        assert_eq!(packed.len(), qmm_packed_bytes(GgmlType::BF16, out, inp).unwrap());
        let (f16, scales) = bf16_rows_to_scaled_f16(&raw, out, inp);
        let as_f16 = pack_weights(GgmlType::F16, &f16, out, inp).unwrap();
        assert_eq!(&packed[..as_f16.len()], &as_f16[..]);
        let tail: Vec<f32> =
            packed[as_f16.len()..].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(tail.len(), 128);
        assert_eq!(&tail[..out], &scales[..]);
        assert!(tail[out..].iter().all(|&v| v == 1.0));
    }

    /// A matrix the kernels cannot address (over 4 GiB packed) is refused before anything is
    /// allocated.
    #[test]
    fn pack_refuses_a_matrix_over_4_gib() {
        let e = pack_weights(GgmlType::Q8_0, &[], 1 << 20, 4096).unwrap_err().to_string();
        assert!(e.contains("4563402752 bytes packed") && e.contains("4 GiB"), "{e}");
    }

    #[test]
    fn pack_refuses_k_quant_scales_out_of_range_naming_the_block() {
        for (ty, size) in [(GgmlType::Q4_K, 144usize), (GgmlType::Q5_K, 176)] {
            let mut raw = vec![0u8; 2 * 2 * size];
            // Every block d = dmin = 0.5: accepted.
            for b in raw.chunks_exact_mut(size) {
                b[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
                b[2..4].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
            }
            assert!(pack_weights(ty, &raw, 2, 512).is_ok());
            // Row 1, block 0: d = 2.
            raw[2 * size..2 * size + 2].copy_from_slice(&half::f16::from_f32(2.0).to_le_bytes());
            let e = pack_weights(ty, &raw, 2, 512).unwrap_err().to_string();
            assert!(e.contains("row 1 super-block 0") && e.contains("d = 2"), "{e}");
            // dmin = NaN instead.
            raw[2 * size..2 * size + 2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
            raw[3 * size + 2..3 * size + 4].copy_from_slice(&half::f16::NAN.to_le_bytes());
            let e = pack_weights(ty, &raw, 2, 512).unwrap_err().to_string();
            assert!(e.contains("row 1 super-block 1") && e.contains("dmin = NaN"), "{e}");
            // A fused gate/up names the matrix and its own row.
            let good: Vec<u8> = raw[..2 * size].iter().copied().cycle().take(raw.len()).collect();
            let e = pack_gate_up(ty, &good, &raw, 2, 512).unwrap_err().to_string();
            assert!(e.contains("up: ") && e.contains("row 1 super-block 1"), "{e}");
        }
    }

    #[test]
    fn pack_rejects_a_wrong_length_naming_it() {
        let e = pack_weights(GgmlType::Q4_K, &[0u8; 100], 2, 256).unwrap_err().to_string();
        assert!(e.contains("100 bytes, not 288"), "{e}");
        let e = pack_weights(GgmlType::Q4_0, &[0u8; 18], 1, 32).unwrap_err().to_string();
        assert!(e.contains("Q4_0"), "{e}");
    }

    /// Gate and up interleave by 8 rows, the rows past `ff` are zero, and the result is the
    /// plain packing of that interleaved matrix.
    #[test]
    fn gate_up_interleave_by_eight_rows() {
        let (ty, ff, inp) = (GgmlType::Q8_0, 19, 64);
        let row_bytes = 2 * 34;
        let gate: Vec<u8> = (0..ff * row_bytes).map(|i| (i % 97 + 1) as u8).collect();
        let up: Vec<u8> = (0..ff * row_bytes).map(|i| (i % 89 + 100) as u8).collect();
        let rows = qmm_swiglu_rows(ff);
        assert_eq!(rows, 48);
        let mut inter = vec![0u8; rows * row_bytes];
        for r in 0..rows {
            let (b, j) = (r / 16, r % 16);
            let f = 8 * b + j % 8;
            if f < ff {
                let src = if j < 8 { &gate } else { &up };
                inter[r * row_bytes..(r + 1) * row_bytes].copy_from_slice(&src[f * row_bytes..(f + 1) * row_bytes]);
            }
        }
        let want = pack_weights(ty, &inter, rows, inp).unwrap();
        assert_eq!(pack_gate_up(ty, &gate, &up, ff, inp).unwrap(), want);
        let e = pack_gate_up(ty, &gate[1..], &up, ff, inp).unwrap_err().to_string();
        assert!(e.contains("gate Q8_0 [19, 64]") && e.contains("not 1292"), "{e}");
    }
}
