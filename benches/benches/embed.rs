//! `embed` benches: gathering 1 and 32 rows of a 5120-wide token-embedding table (Q4_K and Q6_K,
//! the 27B Q4_K_M file's types; BF16 for the draft) out of 32 768 rows.
//! Roofline: the gathered rows read once plus the f32 rows written (`rows·(row_bytes + 4·5120)`
//! bytes). Token sets rotate over the table so reads come from device memory; at these sizes
//! (≤ 1 MB) the launch dominates.

use flashtree::gpu::embed::embed_rows;
use flashtree::gpu::DevSpan;
use flashtree_benches::{ceiling_gbps, gpu_or_skip, median_secs, report};
use flashtree_reference::quant::GgmlType;

const N_VOCAB: usize = 32_768;
const N_EMBD: usize = 5120;

fn main() {
    let Some(gpu) = gpu_or_skip("embed") else { return };
    let ceiling = ceiling_gbps(&gpu);
    for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::BF16] {
        let row_bytes = ty.row_bytes(N_EMBD as u64).unwrap() as usize;
        // Bytes with a small finite f16 in every scale position is not needed for timing: a
        // constant 0x11 pattern is finite in every format.
        let table = gpu.upload(&vec![0x11u8; N_VOCAB * row_bytes]).unwrap();
        for rows in [1usize, 32] {
            let sets = 64;
            let tokens: Vec<u32> =
                (0..sets * rows).map(|i| ((i as u64 * 2_654_435_761) % N_VOCAB as u64) as u32).collect();
            let dtok = gpu.upload(&tokens).unwrap();
            let out = gpu.zeros::<f32>(rows * N_EMBD).unwrap();
            let (tab, toks, o) = (DevSpan::of(&gpu, &table), DevSpan::of(&gpu, &dtok), DevSpan::of(&gpu, &out));
            let secs = median_secs(&gpu, 64, |i| {
                let t = toks.sub((i % sets) * rows, rows, "tokens")?;
                embed_rows(&gpu, ty, tab, N_VOCAB, N_EMBD, t, rows, o)
            });
            let bytes = rows * (row_bytes + 4 * N_EMBD);
            report("embed", &format!("embed {ty} {rows}x{N_EMBD}"), bytes as f64, secs, ceiling, "launch-bound");
        }
    }
}
