//! [`VerifyBatch`]: one round's tree as the flat arrays a target forward reads (ddtree.md §4).
//!
//! Node `i` of an `n`-node batch carries its token, its absolute position
//! `committed + depth[i]`, its parent (`None` = the last committed token, else an earlier node)
//! and its ancestor bitmask: `words = ⌈n / 64⌉` u64 words, bit `j` set iff `j` is an ancestor of
//! `i` or `i` itself. A node may attend to the committed prefix and to the nodes of its mask,
//! nothing else, so its result depends only on its ancestors (batch invariance, design.md §5.2).
//! The arrays are built once per round by the loop and checked on construction; backends map
//! them to their own layout (the GPU engine's `NodeBatch`: ≤ 64 nodes, one 64-bit mask each).

use super::ddtree::Tree;
use super::SpecError;

/// The flattened verify batch of one round. Invariants (checked by every constructor): at least
/// one node; `parents[i] < i`; `depths[i] = depths[parent] + 1` (0 for a child of the committed
/// prefix); `positions[i] = committed + depths[i]`; masks as in the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyBatch {
    committed: usize,
    tokens: Vec<u32>,
    positions: Vec<usize>,
    parents: Vec<Option<usize>>,
    depths: Vec<usize>,
    words: usize,
    ancestors: Vec<u64>,
}

impl VerifyBatch {
    /// The batch of `tokens` with `parents` on top of `committed` tokens.
    pub fn new(committed: usize, tokens: &[u32], parents: &[Option<usize>]) -> Result<Self, SpecError> {
        let n = tokens.len();
        if n == 0 {
            return Err(SpecError::Config("a verify batch needs at least one node".into()));
        }
        if parents.len() != n {
            return Err(SpecError::Config(format!("verify batch: {} parents for {n} tokens", parents.len())));
        }
        let words = n.div_ceil(64);
        let mut depths = Vec::with_capacity(n);
        let mut ancestors = vec![0u64; n * words];
        for (i, &p) in parents.iter().enumerate() {
            match p {
                None => depths.push(0),
                Some(p) if p < i => {
                    depths.push(depths[p] + 1);
                    let (head, tail) = ancestors.split_at_mut(i * words);
                    tail[..words].copy_from_slice(&head[p * words..(p + 1) * words]);
                }
                Some(p) => {
                    return Err(SpecError::Config(format!(
                        "verify batch: node {i} has parent {p}; parents must come before their children"
                    )))
                }
            }
            ancestors[i * words + i / 64] |= 1 << (i % 64);
        }
        let positions = depths
            .iter()
            .map(|&d| committed.checked_add(d))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| SpecError::Config("verify batch: position overflows".into()))?;
        Ok(Self { committed, tokens: tokens.to_vec(), positions, parents: parents.to_vec(), depths, words, ancestors })
    }

    /// The batch of `tree` on top of `committed` tokens (the root is a child of the committed
    /// prefix). Refuses a tree whose stored depths disagree with its parents.
    pub fn from_tree(tree: &Tree, committed: usize) -> Result<Self, SpecError> {
        let parents: Vec<Option<usize>> = tree.parents.iter().map(|p| p.map(|p| p as usize)).collect();
        let b = Self::new(committed, &tree.tokens, &parents)?;
        if let Some(i) = (0..b.len()).find(|&i| tree.depths.get(i).map(|&d| d as usize) != Some(b.depths[i])) {
            return Err(SpecError::Config(format!(
                "tree node {i}: stored depth {:?} but its parent chain gives {}",
                tree.depths.get(i),
                b.depths[i]
            )));
        }
        Ok(b)
    }

    /// A chain of `tokens` (a prefill chunk or an AR token): node `i`'s parent is `i − 1`.
    pub fn chain(committed: usize, tokens: &[u32]) -> Result<Self, SpecError> {
        let parents: Vec<Option<usize>> = (0..tokens.len()).map(|i| i.checked_sub(1)).collect();
        Self::new(committed, tokens, &parents)
    }

    /// Nodes (≥ 1).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Never true (a batch has a node).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Committed tokens the batch sits on.
    pub fn committed(&self) -> usize {
        self.committed
    }

    /// Token per node.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Absolute position per node: `committed + depth`.
    pub fn positions(&self) -> &[usize] {
        &self.positions
    }

    /// Parent per node (`None` = the last committed token).
    pub fn parents(&self) -> &[Option<usize>] {
        &self.parents
    }

    /// Depth per node (0 for children of the committed prefix).
    pub fn depths(&self) -> &[usize] {
        &self.depths
    }

    /// u64 words per ancestor mask: `⌈len / 64⌉`.
    pub fn words(&self) -> usize {
        self.words
    }

    /// Node `i`'s ancestor mask (`words()` words, bit `j` of word `j / 64` = node `j`).
    pub fn ancestor_mask(&self, i: usize) -> &[u64] {
        &self.ancestors[i * self.words..(i + 1) * self.words]
    }

    /// Whether node `i` sees node `j` (`j` is `i` or an ancestor of it).
    pub fn sees(&self, i: usize, j: usize) -> bool {
        j < self.len() && self.ancestor_mask(i)[j / 64] >> (j % 64) & 1 == 1
    }

    /// The nodes node `i` sees, in index order (= root-to-node order: parents come first).
    pub fn visible(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        (0..=i).filter(move |&j| self.sees(i, j))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_positions_and_depths_of_a_small_tree() {
        // 0 ─ 1 ─ 3
        //   └ 2
        let b = VerifyBatch::new(10, &[5, 6, 7, 8], &[None, Some(0), Some(0), Some(1)]).unwrap();
        assert_eq!(b.depths(), &[0, 1, 1, 2]);
        assert_eq!(b.positions(), &[10, 11, 11, 12]);
        assert_eq!(b.words(), 1);
        let masks: Vec<u64> = (0..4).map(|i| b.ancestor_mask(i)[0]).collect();
        assert_eq!(masks, [0b1, 0b11, 0b101, 0b1011]);
        assert_eq!(b.visible(3).collect::<Vec<_>>(), [0, 1, 3]);
    }

    #[test]
    fn refuses_bad_batches() {
        assert!(VerifyBatch::new(0, &[], &[]).is_err());
        assert!(VerifyBatch::new(0, &[1, 2], &[None]).is_err());
        assert!(VerifyBatch::new(0, &[1, 2], &[Some(1), None]).is_err());
        assert!(VerifyBatch::new(0, &[1, 2], &[None, Some(1)]).is_err());
        assert!(VerifyBatch::new(usize::MAX, &[1, 2], &[None, Some(0)]).is_err());
        let mut t = Tree::root_only(3);
        t.tokens.push(4);
        t.parents.push(Some(0));
        t.depths.push(2);
        assert!(VerifyBatch::from_tree(&t, 0).is_err(), "inconsistent depth accepted");
    }

    #[test]
    fn masks_span_several_words_past_64_nodes() {
        let n = 130;
        let b = VerifyBatch::chain(7, &vec![1; n]).unwrap();
        assert_eq!(b.words(), 3);
        assert!((0..n).all(|j| b.sees(n - 1, j)));
        assert!(!b.sees(64, 65) && b.sees(65, 64));
        assert_eq!(b.positions()[n - 1], 7 + n - 1);
    }
}
