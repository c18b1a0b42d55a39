//! Random quant blocks written directly (no f32 round trip), for the large presets: every block
//! has finite f16 scales, and the quants are uniform, so the dequantized values are spread
//! roughly uniformly over ±√3·σ — standard deviation ≈ σ, like N(0, σ²) weights.

use super::rng::Rng;
use crate::gguf::GgmlType;
use half::f16;

const SQRT3: f32 = 1.732_050_8;

fn put_f16(b: &mut [u8], v: f32) {
    b[..2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// Fills `out` (whole blocks of `ty`) with random blocks of scale `sigma`.
pub fn random_blocks(ty: GgmlType, sigma: f32, rng: &mut Rng, out: &mut [u8]) {
    rng.fill_bytes(out);
    let ts = ty.type_size();
    for b in out.chunks_exact_mut(ts) {
        match ty {
            GgmlType::Q4_K | GgmlType::Q5_K => {
                let levels = if ty == GgmlType::Q4_K { 15.0 } else { 31.0 };
                // d·sc·levels ≈ 2√3σ with sc ∈ [24, 40]; dmin·m ≈ √3σ with m ∈ [24, 40].
                put_f16(&mut b[0..2], 2.0 * SQRT3 * sigma / levels / 32.0);
                put_f16(&mut b[2..4], SQRT3 * sigma / 32.0);
                let mut sc = [0u8; 8];
                let mut m = [0u8; 8];
                for j in 0..8 {
                    sc[j] = rng.range(24, 40) as u8;
                    m[j] = rng.range(24, 40) as u8;
                }
                flashtree_quants::k_scales::pack(&sc, &m, &mut b[4..16]);
            }
            GgmlType::Q6_K => {
                // d·sc·32 ≈ √3σ with sc ∈ [48, 80].
                for s in &mut b[192..208] {
                    *s = rng.range(48, 80) as u8;
                }
                put_f16(&mut b[208..210], SQRT3 * sigma / 32.0 / 64.0);
            }
            GgmlType::Q8_0 => put_f16(&mut b[0..2], SQRT3 * sigma / 127.0),
            GgmlType::Q4_0 => put_f16(&mut b[0..2], SQRT3 * sigma / 8.0),
            GgmlType::BF16 => {
                let v = rng.normal() * sigma;
                b.copy_from_slice(&flashtree_quants::bf16::f32_to_bf16_bits(v).to_le_bytes());
            }
            GgmlType::F16 => put_f16(b, rng.normal() * sigma),
            GgmlType::F32 => b.copy_from_slice(&(rng.normal() * sigma).to_le_bytes()),
            _ => {}
        }
    }
}
