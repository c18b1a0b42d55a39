//! DDTree: the draft tree built best-first from the drafter's per-position top-K log-probs
//! (`ddtree.md` §3, paper Algorithm 1), and its flattening into a verify batch (§4).
//!
//! Input: `L` depths, each with `K` candidates sorted by log-prob descending (`ℓ[d][0] ≥ ℓ[d][1] ≥ …`).
//! A node is a non-empty prefix of ranks `(r_1..r_d)`, `d ≤ L`; its score is
//! `Σ_i ℓ[i][r_i]` (the log of the drafter's factorised probability `q(u)`). The tree is the `B`
//! best prefixes. Because a child never outscores its parent, that set is prefix-closed.
//!
//! Tie-break (deterministic): higher score first, then the lexicographically smaller rank tuple,
//! a proper prefix counting as smaller — the reference's Python tuple order. Scores are built
//! incrementally in f64 exactly as in the pseudocode (parent score + ℓ, sibling score − ℓ_r +
//! ℓ_{r+1}), so the pop order matches the reference bit for bit.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::SpecError;

/// The drafter's top-K per depth: `tokens[d*k + r]`, `logprobs[d*k + r]` for depth `d+1`, rank `r`.
/// Rows are sorted by log-prob descending; equal log-probs by lower token id (see [`topk_logprobs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DraftTopK {
    depths: usize,
    k: usize,
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
}

impl DraftTopK {
    /// Checks shapes, that each row is sorted descending and that no log-prob is NaN or +inf.
    pub fn new(depths: usize, k: usize, tokens: Vec<u32>, logprobs: Vec<f32>) -> Result<Self, SpecError> {
        let want = depths.checked_mul(k).ok_or(SpecError::TopKShape { what: "depths × k overflows" })?;
        if tokens.len() != want || logprobs.len() != want {
            return Err(SpecError::TopKShape { what: "tokens and logprobs must both have depths × k entries" });
        }
        if depths > 0 && k == 0 {
            return Err(SpecError::TopKShape { what: "k must be at least 1 when there are depths" });
        }
        for row in logprobs.chunks(k.max(1)) {
            if row.iter().any(|v| v.is_nan() || *v == f32::INFINITY) {
                return Err(SpecError::TopKShape { what: "log-probs must be finite or -inf" });
            }
            if row.windows(2).any(|w| w[0] < w[1]) {
                return Err(SpecError::TopKShape { what: "each depth's log-probs must be sorted descending" });
            }
        }
        Ok(Self { depths, k, tokens, logprobs })
    }

    /// Number of depths `L`.
    pub fn depths(&self) -> usize {
        self.depths
    }
    /// Candidates per depth `K`.
    pub fn k(&self) -> usize {
        self.k
    }
    /// Token at depth `d` (1-based: depth 0 is the root, which has no candidates) and rank `r`.
    /// Panics, naming both, outside `1..=depths()` × `0..k()`.
    pub fn token(&self, d: usize, r: usize) -> u32 {
        self.tokens[self.index(d, r)]
    }
    /// Log-prob at depth `d` (1-based) and rank `r`; panics as [`DraftTopK::token`].
    pub fn logprob(&self, d: usize, r: usize) -> f32 {
        self.logprobs[self.index(d, r)]
    }
    fn index(&self, d: usize, r: usize) -> usize {
        assert!(
            (1..=self.depths).contains(&d) && r < self.k,
            "DraftTopK: depth {d} (1..={}), rank {r} (0..{})",
            self.depths,
            self.k
        );
        (d - 1) * self.k + r
    }
}

/// Top-`k` of `log_softmax(row)` for each row of `logits` (`[rows, vocab]`, row-major), computed in
/// f64 and stored as f32. Order: log-prob descending, then token id ascending (deterministic).
/// `k` is clamped to `vocab`. NaN logits are an error.
pub fn topk_logprobs(logits: &[f32], vocab: usize, k: usize) -> Result<DraftTopK, SpecError> {
    if vocab == 0 || !logits.len().is_multiple_of(vocab) {
        return Err(SpecError::TopKShape { what: "logits length must be a non-zero multiple of the vocabulary size" });
    }
    let rows = logits.len() / vocab;
    let k = k.min(vocab).max(1);
    let mut tokens = Vec::with_capacity(rows * k);
    let mut logprobs = Vec::with_capacity(rows * k);
    for row in logits.chunks(vocab) {
        if row.iter().any(|v| v.is_nan()) {
            return Err(SpecError::TopKShape { what: "draft logits contain NaN" });
        }
        // The reference's definition (logit descending by `total_cmp`, then id; `x − logsumexp`
        // in f64), the GPU `topk` kernel's too.
        for (t, lp) in flashtree_reference::sample::topk_logprobs(row, k) {
            tokens.push(t);
            logprobs.push(lp as f32);
        }
    }
    DraftTopK::new(rows, k, tokens, logprobs)
}

/// How the tree is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeOptions {
    /// `B`: maximum number of non-root nodes.
    pub budget: usize,
    /// Optional cap on `K` (ranks used per depth); `K = min(B, V, cap)`.
    pub k_cap: Option<usize>,
    /// The anchor's (Lucebox) variant: insert the top-1 chain first, then best-first.
    pub chain_seed: bool,
}

impl TreeOptions {
    /// DDTree as in the paper: `K = min(B, V)`, no seed. Optimal for the surrogate objective.
    pub fn ddtree(budget: usize) -> Self {
        Self { budget, k_cap: None, chain_seed: false }
    }
    /// The anchor's variant: chain seeded first, `K = 8` when `B > 15`, else `K = 1`.
    pub fn anchor(budget: usize) -> Self {
        Self { budget, k_cap: Some(if budget > 15 { 8 } else { 1 }), chain_seed: true }
    }
    /// A DFlash chain: `K = 1`, so the tree is the top-1 chain of `min(B, L)` nodes.
    pub fn chain(budget: usize) -> Self {
        Self { budget, k_cap: Some(1), chain_seed: false }
    }
    /// The `K` this build uses for a draft with `k_available` ranks per depth.
    pub fn effective_k(&self, k_available: usize) -> usize {
        // Ranks are stored as u16, so K never exceeds u16::MAX (budgets are far smaller).
        let k = self.budget.min(k_available).min(u16::MAX as usize);
        self.k_cap.map_or(k, |c| k.min(c))
    }
}

/// A draft tree in pop (best-first) order: node 0 is the root `b`, and `parent[i] < i` for
/// every `i ≥ 1`. `depth[i] = depth[parent[i]] + 1 ∈ [1, L]`; siblings have distinct tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// `[b, tok_1, …, tok_N]`.
    pub tokens: Vec<u32>,
    /// `parent[0] = None`.
    pub parents: Vec<Option<u32>>,
    /// `depth[0] = 0`.
    pub depths: Vec<u16>,
    /// The rank tuple of each node (empty for the root): the path of ranks that selects it.
    pub ranks: Vec<Vec<u16>>,
    /// The score `Σ ℓ` of each node (0 for the root), accumulated as in the build.
    pub scores: Vec<f64>,
    /// `children[i]` = `(token, child index)` in insertion order.
    pub children: Vec<Vec<(u32, u32)>>,
}

impl Tree {
    /// A tree with only the root.
    pub fn root_only(root: u32) -> Self {
        Self {
            tokens: vec![root],
            parents: vec![None],
            depths: vec![0],
            ranks: vec![Vec::new()],
            scores: vec![0.0],
            children: vec![Vec::new()],
        }
    }

    /// Number of nodes including the root (`N + 1`).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
    /// Always false: the root exists.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The child of `node` that carries `token`, if any.
    pub fn child(&self, node: usize, token: u32) -> Option<usize> {
        self.children[node].iter().find(|(t, _)| *t == token).map(|&(_, c)| c as usize)
    }

    fn push(&mut self, token: u32, parent: usize, ranks: Vec<u16>, score: f64) -> usize {
        let id = self.tokens.len();
        self.tokens.push(token);
        self.parents.push(Some(parent as u32));
        self.depths.push(self.depths[parent] + 1);
        self.ranks.push(ranks);
        self.scores.push(score);
        self.children.push(Vec::new());
        self.children[parent].push((token, id as u32));
        id
    }

    /// Position ids of the flattened verify batch: `start + depth[i]` (siblings share one).
    pub fn positions(&self, start: usize) -> Vec<usize> {
        self.depths.iter().map(|&d| start + d as usize).collect()
    }

    /// The ancestor-visibility matrix: row `i` has bit `j` set iff `j` is `i` or an ancestor of `i`.
    pub fn visibility(&self) -> Visibility {
        let n = self.len();
        let words = n.div_ceil(64);
        let mut bits = vec![0u64; n * words];
        for i in 0..n {
            if let Some(p) = self.parents[i] {
                let p = p as usize;
                let (head, tail) = bits.split_at_mut(i * words);
                tail[..words].copy_from_slice(&head[p * words..(p + 1) * words]);
            }
            bits[i * words + i / 64] |= 1 << (i % 64);
        }
        Visibility { n, words, bits }
    }

    /// Indices from the root to `node` inclusive.
    pub fn ancestors_path(&self, node: usize) -> Vec<usize> {
        let mut path = vec![node];
        let mut cur = node;
        while let Some(p) = self.parents[cur] {
            cur = p as usize;
            path.push(cur);
        }
        path.reverse();
        path
    }
}

/// Bitset rows of the ancestor mask, `(N+1) × (N+1)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visibility {
    n: usize,
    words: usize,
    bits: Vec<u64>,
}

impl Visibility {
    /// Whether tree row `i` may attend to tree column `j`.
    pub fn sees(&self, i: usize, j: usize) -> bool {
        j < self.n && self.bits[i * self.words + j / 64] >> (j % 64) & 1 == 1
    }
    /// Side of the matrix.
    pub fn len(&self) -> usize {
        self.n
    }
    /// Never true for a tree (the root exists).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// A heap candidate: the prefix `ranks`, reached by adding one node under `parent` at `depth`.
#[derive(Debug)]
struct Candidate {
    score: f64,
    ranks: Vec<u16>,
    parent: usize,
    depth: usize,
    rank: usize,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Max-heap order: greater = popped first = higher score, then smaller rank tuple.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.ranks.cmp(&self.ranks))
    }
}

/// A heap score as the reference's Python floats compare: `-0.0 == +0.0` (so `+ 0.0`), and the
/// NaN that `-inf - (-inf)` gives for a sibling after a `-inf` log-prob is that sibling's true
/// score, `-inf`.
fn score_key(s: f64) -> f64 {
    if s.is_nan() {
        f64::NEG_INFINITY
    } else {
        s + 0.0
    }
}

/// Algorithm 1 (with the optional chain seed): the best `budget` prefixes of `topk`, rooted at
/// `root`. Returns a root-only tree when `budget == 0` or `topk` has no depths.
pub fn build(root: u32, topk: &DraftTopK, opts: TreeOptions) -> Tree {
    let mut tree = Tree::root_only(root);
    let l = topk.depths();
    let k = opts.effective_k(topk.k());
    if opts.budget == 0 || l == 0 || k == 0 {
        return tree;
    }
    let lp = |d: usize, r: usize| topk.logprob(d, r) as f64;
    let mut heap = BinaryHeap::with_capacity(opts.budget + 2);
    if opts.chain_seed {
        let (mut score, mut prev) = (0.0f64, 0usize);
        for d in 1..=l.min(opts.budget) {
            let parent_ranks = tree.ranks[prev].clone();
            if k > 1 {
                let mut sib = parent_ranks.clone();
                sib.push(1);
                heap.push(Candidate {
                    score: score_key(score + lp(d, 1)),
                    ranks: sib,
                    parent: prev,
                    depth: d,
                    rank: 1,
                });
            }
            score = score_key(score + lp(d, 0));
            let mut ranks = parent_ranks;
            ranks.push(0);
            prev = tree.push(topk.token(d, 0), prev, ranks, score);
        }
    } else {
        heap.push(Candidate { score: score_key(lp(1, 0)), ranks: vec![0], parent: 0, depth: 1, rank: 0 });
    }
    while tree.len() - 1 < opts.budget {
        let Some(c) = heap.pop() else { break };
        let id = tree.push(topk.token(c.depth, c.rank), c.parent, c.ranks.clone(), c.score);
        if c.rank + 1 < k {
            let mut ranks = c.ranks.clone();
            if let Some(last) = ranks.last_mut() {
                *last += 1;
            }
            heap.push(Candidate {
                score: score_key(c.score - lp(c.depth, c.rank) + lp(c.depth, c.rank + 1)),
                ranks,
                parent: c.parent,
                depth: c.depth,
                rank: c.rank + 1,
            });
        }
        if c.depth < l {
            let mut ranks = c.ranks;
            ranks.push(0);
            heap.push(Candidate {
                score: score_key(c.score + lp(c.depth + 1, 0)),
                ranks,
                parent: id,
                depth: c.depth + 1,
                rank: 0,
            });
        }
    }
    tree
}
