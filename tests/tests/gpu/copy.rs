use flashtree::gpu::copy::copy_v4;
use flashtree_tests::gpu::gpu_or_skip;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// `copy_v4` reproduces the source exactly and writes nothing past `bytes`.
    #[test]
    fn copy_v4_equals_reference_and_stays_in_bounds(vecs in 1usize..20_000, seed in any::<u64>()) {
        let Some(gpu) = gpu_or_skip("copy_v4_equals_reference_and_stays_in_bounds") else { return Ok(()) };
        let bytes = vecs * 16;
        let src: Vec<u8> = (0..bytes + 64).map(|i| (seed.wrapping_mul(i as u64 + 1) >> 7) as u8).collect();
        let d_src = gpu.upload(&src).unwrap();
        let mut d_dst = gpu.zeros::<u8>(bytes + 64).unwrap();
        gpu.fill_bytes(&mut d_dst, 0xee).unwrap();
        copy_v4(gpu, &d_src, &mut d_dst, bytes).unwrap();
        let got = gpu.download(&d_dst).unwrap();
        prop_assert_eq!(&got[..bytes], &flashtree_reference::copy::copy(&src[..bytes])[..]);
        prop_assert!(got[bytes..].iter().all(|&b| b == 0xee), "wrote past the end");
    }
}

#[test]
fn copy_v4_rejects_unaligned_sizes() {
    let Some(gpu) = gpu_or_skip("copy_v4_rejects_unaligned_sizes") else { return };
    let a = gpu.zeros::<u8>(64).unwrap();
    let mut b = gpu.zeros::<u8>(64).unwrap();
    assert!(copy_v4(gpu, &a, &mut b, 17).is_err());
    assert!(copy_v4(gpu, &a, &mut b, 80).is_err());
}
