//! Quantization formats against gguf-py 0.19.0 (committed fixtures from
//! `tools/fixtures/gguf/gen_quant_fixtures.py`): dequantization bit-exact for every supported
//! type (random blocks with extreme scales), quantization bit-exact for the types whose gguf-py
//! quantizer is ggml's reference one (F16, BF16, Q8_0, Q4_0).

use flashtree_quants::{dequantize, quantize, GgmlType};
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/quant").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Bitwise equality, treating any two NaNs as equal (payload propagation is not part of the
/// format).
fn assert_bits_equal(ty: GgmlType, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{ty}: element count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same = g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan());
        assert!(same, "{ty}: element {i}: got {g:e} ({:#010x}), gguf-py {w:e} ({:#010x})", g.to_bits(), w.to_bits());
    }
}

fn check_dequant(stem: &str, ty: GgmlType) {
    let input = fixture(&format!("{stem}.dequant_in.bin"));
    let want = f32s(&fixture(&format!("{stem}.dequant_out.bin")));
    let got = dequantize(ty, &input).expect("whole blocks");
    assert_bits_equal(ty, &got, &want);
}

fn check_quant(stem: &str, ty: GgmlType) {
    let input = f32s(&fixture(&format!("{stem}.quant_in.bin")));
    let want = fixture(&format!("{stem}.quant_out.bin"));
    let got = quantize(ty, &input).expect("whole blocks");
    assert_eq!(got.len(), want.len(), "{ty}: byte count");
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        let block = i / ty.type_size();
        panic!(
            "{ty}: first differing byte {i} (block {block}): ours {:02x?}, gguf-py {:02x?}",
            &got[block * ty.type_size()..(block + 1) * ty.type_size()],
            &want[block * ty.type_size()..(block + 1) * ty.type_size()]
        );
    }
}

#[test]
fn f16_dequantizes_bit_exactly_like_gguf_py() {
    check_dequant("f16", GgmlType::F16);
}

#[test]
fn bf16_dequantizes_bit_exactly_like_gguf_py() {
    check_dequant("bf16", GgmlType::BF16);
}

#[test]
fn q8_0_dequantizes_bit_exactly_like_gguf_py() {
    check_dequant("q8_0", GgmlType::Q8_0);
}

#[test]
fn q8_1_dequantizes_bit_exactly_like_gguf_py_q8_0_of_the_same_d_and_qs() {
    check_dequant("q8_1", GgmlType::Q8_1);
}

#[test]
fn q4_0_dequantizes_bit_exactly_like_gguf_py() {
    check_dequant("q4_0", GgmlType::Q4_0);
}

#[test]
fn q4_k_dequantizes_bit_exactly_like_gguf_py() {
    check_dequant("q4_k", GgmlType::Q4_K);
}

#[test]
fn q5_k_dequantizes_bit_exactly_like_gguf_py() {
    check_dequant("q5_k", GgmlType::Q5_K);
}

#[test]
fn q6_k_dequantizes_bit_exactly_like_gguf_py() {
    check_dequant("q6_k", GgmlType::Q6_K);
}

#[test]
fn f16_quantizes_bit_exactly_like_numpy() {
    check_quant("f16", GgmlType::F16);
}

#[test]
fn bf16_quantizes_bit_exactly_like_gguf_py() {
    check_quant("bf16", GgmlType::BF16);
}

#[test]
fn q8_0_quantizes_bit_exactly_like_gguf_py() {
    check_quant("q8_0", GgmlType::Q8_0);
}

#[test]
fn q4_0_quantizes_bit_exactly_like_gguf_py() {
    check_quant("q4_0", GgmlType::Q4_0);
}

/// The worked example of gguf-format-and-quants.md §3.9 (checked there against NumPy).
#[test]
fn q4_k_worked_example_from_the_spec() {
    let mut b = [0u8; 144];
    b[0..2].copy_from_slice(&[0x00, 0x20]);
    b[2..4].copy_from_slice(&[0x00, 0x1c]);
    b[4..16].copy_from_slice(&[0xCA, 0x94, 0x1E, 0x28, 0x03, 0x84, 0x05, 0x06, 0x72, 0x1D, 0x2C, 0x17]);
    b[16] = 0x7A;
    b[16 + 64 + 5] = 0x3C;
    let x = dequantize(GgmlType::Q4_K, &b).expect("one block");
    assert_eq!(x[0], 0.769_531_25);
    assert_eq!(x[1], -0.011_718_75);
    assert_eq!(x[32], 1.078_125);
    assert_eq!(x[165], 0.925_781_25);
    assert_eq!(x[133], 1193.0 / 256.0); // 4.66015625
}
