use flashtree::gpu::copy::{copy_path_rows, copy_v4};
use flashtree::gpu::deltanet::commit_path_words;
use flashtree::gpu::DevSpan;
use flashtree_tests::gpu::gpu_or_skip;
use kernel_abi::{CommitPath, MAX_NODES};
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// `copy_path_rows` writes exactly the reference's store rows (a path of distinct nodes in
    /// any order, any layer count and row width) and nothing outside them.
    #[test]
    fn copy_path_rows_equals_reference_and_touches_only_the_path_rows(
        (nodes, order, len) in (1usize..=MAX_NODES as usize).prop_flat_map(|nodes| {
            (Just(nodes), Just((0..nodes).collect::<Vec<usize>>()).prop_shuffle(), 1..=nodes)
        }),
        layers in 1usize..7,
        d4 in 1usize..400,
        n_past in 0usize..40,
    ) {
        let Some(gpu) = gpu_or_skip("copy_path_rows_equals_reference_and_touches_only_the_path_rows") else { return Ok(()) };
        let d = 4 * d4;
        // A path: `len` distinct nodes in a shuffled order.
        let path = &order[..len];
        let src: Vec<f32> = (0..layers * nodes * d).map(|i| i as f32 + 0.5).collect();
        let rows = n_past + len + 3;
        let mut want = vec![-7.0f32; rows * layers * d];
        flashtree_reference::copy::copy_path_rows(path, n_past, &src, layers, nodes, d, &mut want);
        let mut cp = CommitPath { n_past: n_past as u32, len: len as u32, nodes: [0; MAX_NODES as usize] };
        for (p, &node) in path.iter().enumerate() {
            cp.nodes[p] = node as u32;
        }
        let d_path = gpu.upload(&commit_path_words(&cp)).unwrap();
        let d_src = gpu.upload(&src).unwrap();
        let d_dst = gpu.upload(&vec![-7.0f32; rows * layers * d]).unwrap();
        // Safety: `d_path` holds one `CommitPath`.
        let on_device = unsafe { DevSpan::from_raw(DevSpan::of(gpu, &d_path).ptr(), 1) };
        let (s, t) = (DevSpan::of(gpu, &d_src), DevSpan::of(gpu, &d_dst));
        copy_path_rows(gpu, on_device, len, n_past, s, t, layers, nodes, d).unwrap();
        prop_assert_eq!(gpu.download(&d_dst).unwrap(), want);
    }
}

#[test]
fn copy_path_rows_rejects_bad_shapes() {
    let Some(gpu) = gpu_or_skip("copy_path_rows_rejects_bad_shapes") else { return };
    let d_path = gpu.zeros::<u32>(std::mem::size_of::<CommitPath>() / 4).unwrap();
    // Safety: `d_path` holds one `CommitPath`.
    let path = unsafe { DevSpan::from_raw(DevSpan::of(gpu, &d_path).ptr(), 1) };
    let (src, dst) = (gpu.zeros::<f32>(2 * 4 * 8).unwrap(), gpu.zeros::<f32>(6 * 2 * 8).unwrap());
    let (s, t) = (DevSpan::of(gpu, &src), DevSpan::of(gpu, &dst));
    assert!(copy_path_rows(gpu, path, 2, 0, s, t, 2, 4, 8).is_ok());
    assert!(copy_path_rows(gpu, path, 2, 0, s, t, 2, 4, 6).is_err(), "rows of 6 f32 are not whole vectors");
    assert!(copy_path_rows(gpu, path, 2, 5, s, t, 2, 4, 8).is_err(), "rows 5..7 lie past a store of 6");
    assert!(copy_path_rows(gpu, path, 2, 0, s, t, 2, 5, 8).is_err(), "5 nodes of captured rows are not there");
    assert!(copy_path_rows(gpu, path, MAX_NODES as usize + 1, 0, s, t, 2, 4, 8).is_err());
    gpu.synchronize().unwrap();
}

#[test]
fn copy_v4_rejects_unaligned_sizes() {
    let Some(gpu) = gpu_or_skip("copy_v4_rejects_unaligned_sizes") else { return };
    let a = gpu.zeros::<u8>(64).unwrap();
    let mut b = gpu.zeros::<u8>(64).unwrap();
    assert!(copy_v4(gpu, &a, &mut b, 17).is_err());
    assert!(copy_v4(gpu, &a, &mut b, 80).is_err());
}
