//! Node batches: a tree, a chain or one token turned into the device-resident
//! [`kernel_abi::NodeBatch`] the kernels read, and an accepted path into a
//! [`kernel_abi::CommitPath`].

use kernel_abi::{CommitPath, NodeBatch, MAX_NODES};

use super::EngineError;

/// Builds the batch of nodes `tokens` with parents `parents` (`None` = child of the committed
/// tokens, else an earlier node) on top of `n_past` committed tokens. Checks every rule the
/// kernels rely on: `1..=MAX_NODES` nodes, parents earlier than their children, tokens in the
/// vocabulary, and every position inside the context `ctx`.
pub fn node_batch(
    n_past: usize,
    tokens: &[u32],
    parents: &[Option<usize>],
    n_vocab: usize,
    ctx: usize,
) -> Result<NodeBatch, EngineError> {
    let n = tokens.len();
    if n == 0 || n > MAX_NODES as usize {
        return Err(EngineError::Batch(format!("{n} nodes: a forward takes 1..={MAX_NODES}")));
    }
    if parents.len() != n {
        return Err(EngineError::Batch(format!("{} parents for {n} tokens", parents.len())));
    }
    let mut b = NodeBatch::empty(u32::try_from(n_past).map_err(|_| EngineError::Batch("n_past too large".into()))?);
    b.n = n as u32;
    for (i, (&t, &p)) in tokens.iter().zip(parents).enumerate() {
        if t as usize >= n_vocab {
            return Err(EngineError::Batch(format!("node {i}: token {t} is outside the vocabulary of {n_vocab}")));
        }
        b.tokens[i] = t;
        match p {
            None => {
                b.parent[i] = -1;
                b.depth[i] = 0;
                b.anc[i] = 1 << i;
            }
            Some(p) if p < i => {
                b.parent[i] = p as i32;
                b.depth[i] = b.depth[p] + 1;
                b.anc[i] = b.anc[p] | 1 << i;
            }
            Some(p) => return Err(EngineError::Batch(format!("node {i} has parent {p}: parents must come first"))),
        }
        let pos = n_past + b.depth[i] as usize;
        if pos >= ctx {
            return Err(EngineError::Context { need: pos + 1, ctx });
        }
    }
    // KV scratch rows n_past + i must fit too.
    if n_past + n > ctx {
        return Err(EngineError::Context { need: n_past + n, ctx });
    }
    Ok(b)
}

/// A chain of `tokens` (a prefill chunk or one AR token).
pub fn chain_batch(n_past: usize, tokens: &[u32], n_vocab: usize, ctx: usize) -> Result<NodeBatch, EngineError> {
    let parents: Vec<Option<usize>> = (0..tokens.len()).map(|i| i.checked_sub(1)).collect();
    node_batch(n_past, tokens, &parents, n_vocab, ctx)
}

/// The commit of `path` (node indices of `batch`, root first, each the parent of the next).
pub fn commit_path(batch: &NodeBatch, path: &[usize]) -> Result<CommitPath, EngineError> {
    let mut c = CommitPath { n_past: batch.n_past, len: path.len() as u32, nodes: [0; MAX_NODES as usize] };
    let mut prev = -1i32;
    for (p, &i) in path.iter().enumerate() {
        if i >= batch.n as usize || batch.parent[i] != prev {
            return Err(EngineError::Batch(format!(
                "path position {p}: node {i} is not a child of {prev} in the last forward"
            )));
        }
        c.nodes[p] = i as u32;
        prev = i as i32;
    }
    Ok(c)
}

/// The bytes of a `#[repr(C)]` plain-data struct (for copying it to the device).
pub fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // Safety: `T` is a plain `#[repr(C)]` struct of integers without padding (`NodeBatch`,
    // `CommitPath`, `GdnReplay`).
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_depths_and_ancestor_masks() {
        // 0 ─ 1 ─ 3
        //   └ 2
        let b = node_batch(10, &[5, 6, 7, 8], &[None, Some(0), Some(0), Some(1)], 100, 64).unwrap();
        assert_eq!(&b.depth[..4], &[0, 1, 1, 2]);
        assert_eq!(&b.anc[..4], &[0b1, 0b11, 0b101, 0b1011]);
        assert_eq!(&b.parent[..4], &[-1, 0, 0, 1]);
        let c = commit_path(&b, &[0, 1, 3]).unwrap();
        assert_eq!((c.len, &c.nodes[..3]), (3, &[0u32, 1, 3][..]));
        assert!(commit_path(&b, &[0, 3]).is_err());
        assert!(commit_path(&b, &[1]).is_err());
    }

    #[test]
    fn a_64_node_chain_fills_every_mask_bit() {
        let n = MAX_NODES as usize;
        let parents: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        let b = node_batch(5, &vec![1; n], &parents, 10, 5 + n).unwrap();
        assert_eq!(
            (b.depth[n - 1], b.anc[n - 1], b.anc[31], b.anc[32]),
            (63, u64::MAX, u32::MAX as u64, (1 << 33) - 1)
        );
        let path: Vec<usize> = (0..n).collect();
        let c = commit_path(&b, &path).unwrap();
        assert_eq!((c.len, c.nodes[63]), (64, 63));
        // A last node hanging off the committed tokens sees only itself.
        let mut parents = parents;
        parents[n - 1] = None;
        assert_eq!(node_batch(5, &vec![1; n], &parents, 10, 5 + n).unwrap().anc[n - 1], 1 << 63);
    }

    #[test]
    fn refuses_bad_batches() {
        assert!(node_batch(0, &[], &[], 10, 64).is_err());
        assert!(node_batch(0, &[1; 65], &[None; 65], 10, 128).is_err());
        assert!(node_batch(0, &[10], &[None], 10, 64).is_err());
        assert!(node_batch(0, &[1, 2], &[Some(1), None], 10, 64).is_err());
        assert!(matches!(chain_batch(60, &[1; 5], 10, 64), Err(EngineError::Context { need: 65, ctx: 64 })));
        assert!(chain_batch(59, &[1; 5], 10, 64).is_ok());
    }
}
