//! `embed_*` kernels vs `flashtree_reference::embed` (= `reference::quant` dequantization of
//! the table row): **bitwise** for every type. The arithmetic is the same operations in the same
//! order, none fused: Q4_K/Q5_K `(d·sc)·q − (dmin·m)`, Q6_K `(d·sc)·q`, Q8_0 `d·q` (f32 `mul.rn`
//! and `sub.rn`, checked in the PTX: no `fma` in these kernels), and the f16/bf16/int → f32
//! conversions of F16, BF16 and the scales are exact. So there is no tolerance.
//!
//! Tables are random bytes with every f16 scale (and every F16/BF16/F32 element) made finite, so
//! no expected value is NaN and the NaN poison of the output catches an unwritten element.

use flashtree::gpu::embed::embed_rows;
use flashtree::gpu::{DevSpan, Gpu};
use flashtree_reference::embed as reference;
use flashtree_reference::quant::GgmlType;
use flashtree_tests::gpu::gpu_or_skip;
use kernel_abi::NodeBatch;
use proptest::prelude::*;

const TYPES: [GgmlType; 7] =
    [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

/// Clears bit 14 of a little-endian u16 whose exponent field (`mask`) is all ones: F16
/// (`0x7c00`) and BF16 (`0x7f80`) inf/NaN become finite.
fn finite16(b: &mut [u8], mask: u16) {
    let v = u16::from_le_bytes([b[0], b[1]]);
    if v & mask == mask {
        b[..2].copy_from_slice(&(v & !0x4000).to_le_bytes());
    }
}

/// `n_vocab` random rows of `n_embd` elements of `ty` with finite scales and elements.
fn table(ty: GgmlType, n_vocab: usize, n_embd: usize, seed: u64) -> Vec<u8> {
    let row_bytes = ty.row_bytes(n_embd as u64).unwrap() as usize;
    let mut t = bytes(seed, n_vocab * row_bytes);
    let ts = ty.type_size();
    for blk in t.chunks_exact_mut(ts) {
        match ty {
            GgmlType::F32 => {
                let v = u32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
                if v & 0x7f80_0000 == 0x7f80_0000 {
                    blk.copy_from_slice(&(v & !0x4000_0000).to_le_bytes());
                }
            }
            GgmlType::F16 => finite16(blk, 0x7c00),
            GgmlType::BF16 => finite16(blk, 0x7f80),
            GgmlType::Q8_0 => finite16(blk, 0x7c00),
            GgmlType::Q4_K | GgmlType::Q5_K => {
                finite16(&mut blk[0..2], 0x7c00);
                finite16(&mut blk[2..4], 0x7c00);
            }
            GgmlType::Q6_K => finite16(&mut blk[208..210], 0x7c00),
            _ => unreachable!(),
        }
    }
    t
}

/// `(type, n_embd)`: whole blocks; more than one 1024-element chunk per row sometimes.
fn type_and_width() -> impl Strategy<Value = (GgmlType, usize)> {
    prop::sample::select(TYPES.to_vec()).prop_flat_map(|ty| {
        let w = match ty.block_size() {
            256 => (1usize..7).prop_map(|b| 256 * b).boxed(),
            32 => (1usize..80).prop_map(|b| 32 * b).boxed(),
            _ => (1usize..3000).boxed(),
        };
        (Just(ty), w)
    })
}

/// Runs `embed_rows` with the tokens read from a device `NodeBatch`'s `tokens` field (as the
/// engine does) when they fit, else from a plain buffer; the output is NaN-poisoned first.
fn run(gpu: &Gpu, ty: GgmlType, tab: &[u8], n_vocab: usize, n_embd: usize, tokens: &[u32], poison: u8) -> Vec<f32> {
    assert_eq!(std::mem::offset_of!(NodeBatch, tokens), 8);
    let (words, off) = if tokens.len() <= 32 {
        let mut w = vec![11u32, tokens.len() as u32]; // n_past, n
        w.extend_from_slice(tokens);
        w.resize(std::mem::size_of::<NodeBatch>() / 4, 0);
        (w, 2)
    } else {
        (tokens.to_vec(), 0)
    };
    let dtab = gpu.upload(tab).unwrap();
    let dwords = gpu.upload(&words).unwrap();
    let mut dout = gpu.zeros::<f32>(tokens.len() * n_embd).unwrap();
    gpu.fill_bytes(&mut dout, poison).unwrap();
    let toks = DevSpan::of(gpu, &dwords).sub(off, tokens.len(), "tokens").unwrap();
    embed_rows(gpu, ty, DevSpan::of(gpu, &dtab), n_vocab, n_embd, toks, tokens.len(), DevSpan::of(gpu, &dout)).unwrap();
    gpu.download(&dout).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Bitwise equality with the reference dequantization, and batch invariance: each row alone
    /// gives the bits it has inside the batch.
    #[test]
    fn embed_rows_match_reference_bitwise(
        (ty, n_embd) in type_and_width(),
        n_vocab in 1usize..300,
        rows in 1usize..41,
        pick in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let Some(gpu) = gpu_or_skip("embed_rows_match_reference_bitwise") else { return Ok(()) };
        let tab = table(ty, n_vocab, n_embd, seed);
        let tokens: Vec<u32> = bytes(seed ^ 0x5eed, 4 * rows)
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) % n_vocab as u32)
            .collect();
        let want = reference::embed_rows(ty, &tab, n_embd, &tokens).unwrap();
        prop_assert!(want.iter().all(|v| !v.is_nan()), "test tables must not produce NaN");
        let got = run(gpu, ty, &tab, n_vocab, n_embd, &tokens, 0xff);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert_eq!(g.to_bits(), w.to_bits(), "{} out[{}, {}] = {} vs {}", ty, i / n_embd, i % n_embd, g, w);
        }
        let r = pick.index(rows);
        let alone = run(gpu, ty, &tab, n_vocab, n_embd, &tokens[r..r + 1], 0xff);
        prop_assert_eq!(bits(&alone), bits(&got[r * n_embd..(r + 1) * n_embd]));
    }
}

#[test]
fn embed_out_of_range_tokens_give_nan_rows() {
    let Some(gpu) = gpu_or_skip("embed_out_of_range_tokens_give_nan_rows") else { return };
    for ty in TYPES {
        let (n_vocab, n_embd) = (5, ty.block_size().max(32) * 2);
        let tab = table(ty, n_vocab, n_embd, 42);
        let tokens = [4, 5, u32::MAX, 0];
        // Poison with a finite value (0x7f7f7f7f), so that a NaN row is the kernel's doing.
        let got = run(gpu, ty, &tab, n_vocab, n_embd, &tokens, 0x7f);
        let want = reference::embed_rows(ty, &tab, n_embd, &tokens).unwrap();
        for r in 0..tokens.len() {
            let (g, w) = (&got[r * n_embd..(r + 1) * n_embd], &want[r * n_embd..(r + 1) * n_embd]);
            if (tokens[r] as usize) < n_vocab {
                assert_eq!(bits(g), bits(w), "{ty} row {r}");
            } else {
                assert!(g.iter().all(|v| v.is_nan()), "{ty} row {r}: token {} ≥ n_vocab must give NaN", tokens[r]);
            }
        }
    }
}

#[test]
fn embed_rows_rejects_bad_shapes() {
    let Some(gpu) = gpu_or_skip("embed_rows_rejects_bad_shapes") else { return };
    let tab = gpu.zeros::<u8>(144 * 4).unwrap();
    let toks = gpu.zeros::<u32>(4).unwrap();
    let out = gpu.zeros::<f32>(4 * 256).unwrap();
    let (t, k, o) = (DevSpan::of(gpu, &tab), DevSpan::of(gpu, &toks), DevSpan::of(gpu, &out));
    assert!(embed_rows(gpu, GgmlType::Q4_K, t, 4, 256, k, 4, o).is_ok());
    gpu.synchronize().unwrap();
    let err = |r: Result<(), flashtree::gpu::GpuError>| r.unwrap_err().to_string();
    assert!(err(embed_rows(gpu, GgmlType::Q4_K, t, 5, 256, k, 4, o)).contains("table has 576 bytes"));
    assert!(err(embed_rows(gpu, GgmlType::Q4_K, t, 2, 300, k, 4, o)).contains("not a multiple"));
    assert!(err(embed_rows(gpu, GgmlType::Q4_0, t, 32, 32, k, 4, o)).contains("no GPU embedding kernel"));
    assert!(err(embed_rows(gpu, GgmlType::Q4_K, t, 4, 256, k, 5, o)).contains("tokens"));
    assert!(err(embed_rows(gpu, GgmlType::F32, t, 1, 144, k, 4, o.sub(0, 575, "o").unwrap())).contains("out"));
    assert!(err(embed_rows(gpu, GgmlType::Q4_K, t.sub(2, 144 * 2, "t").unwrap(), 2, 256, k, 1, o)).contains("aligned"));
}
