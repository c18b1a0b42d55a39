//! Reference of `copy`: the identity on bytes.

/// `dst = src`.
pub fn copy(src: &[u8]) -> Vec<u8> {
    src.to_vec()
}
