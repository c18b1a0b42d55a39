//! Reference of `copy`: the identity on bytes.

/// `dst = src`.
pub fn copy(src: &[u8]) -> Vec<u8> {
    src.to_vec()
}

/// The store rows a committed path appends (`copy_path_rows`): for path position `p` and layer
/// `c`, store row `first_row + p`'s layer-`c` part (`d` values) is `src[c][path[p]]`, where `src`
/// is `[layers][nodes][d]` and the store `[rows][layers·d]`. Rows outside the path are left as
/// they are.
pub fn copy_path_rows(
    path: &[usize],
    first_row: usize,
    src: &[f32],
    layers: usize,
    nodes: usize,
    d: usize,
    store: &mut [f32],
) {
    for (p, &node) in path.iter().enumerate() {
        for c in 0..layers {
            let from = &src[(c * nodes + node) * d..][..d];
            store[((first_row + p) * layers + c) * d..][..d].copy_from_slice(from);
        }
    }
}
