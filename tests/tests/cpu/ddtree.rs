//! DDTree builder, flattening and walk: the worked example of ddtree.md §9 and properties
//! against brute force (prefix-closed, exactly min(B, #prefixes) nodes, optimal, deterministic).

use flashtree::spec::{build, topk_logprobs, walk, DraftTopK, Tree, TreeOptions, VerifyBatch};
use proptest::prelude::*;

/// All prefixes of ranks over `l` depths × `k` ranks with their exact scores, sorted by the
/// documented order: score descending, then rank tuple ascending (a prefix before its extensions).
fn brute_force_order(topk: &DraftTopK, k: usize) -> Vec<(f64, Vec<u16>)> {
    let mut all = Vec::new();
    let mut frontier: Vec<(f64, Vec<u16>)> = vec![(0.0, Vec::new())];
    for d in 1..=topk.depths() {
        let mut next = Vec::new();
        for (s, r) in &frontier {
            for rank in 0..k {
                let mut rr = r.clone();
                rr.push(rank as u16);
                next.push((s + topk.logprob(d, rank) as f64, rr));
            }
        }
        all.extend(next.iter().cloned());
        frontier = next;
    }
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    all
}

/// A random sorted top-K table whose log-probs are multiples of 1/4 (exact f64 sums, many ties,
/// including ±0) or -inf.
fn quantized_topk() -> impl Strategy<Value = DraftTopK> {
    (1usize..=4, 1usize..=4).prop_flat_map(|(l, v)| {
        proptest::collection::vec(proptest::collection::vec(0u8..12, v), l).prop_map(move |rows| {
            let mut tokens = Vec::new();
            let mut lps = Vec::new();
            for (d, mut row) in rows.into_iter().enumerate() {
                row.sort();
                for (r, q) in row.into_iter().enumerate() {
                    // 11 stands for a -inf log-prob (a token the draft rules out).
                    lps.push(if q == 11 { f32::NEG_INFINITY } else { -(q as f32) * 0.25 });
                    tokens.push(((r + d) % v) as u32 + 100 * d as u32);
                }
            }
            DraftTopK::new(l, v, tokens, lps).unwrap()
        })
    })
}

fn check_structure(tree: &Tree, topk: &DraftTopK) {
    assert_eq!(tree.parents[0], None);
    for i in 1..tree.len() {
        let p = tree.parents[i].unwrap() as usize;
        assert!(p < i, "parent index after child");
        assert_eq!(tree.depths[i], tree.depths[p] + 1);
        assert_eq!(tree.ranks[i].len(), tree.depths[i] as usize);
        assert_eq!(tree.ranks[i][..tree.ranks[i].len() - 1], tree.ranks[p][..], "not prefix-closed");
        let d = tree.depths[i] as usize;
        assert_eq!(tree.tokens[i], topk.token(d, *tree.ranks[i].last().unwrap() as usize));
        assert_eq!(tree.child(p, tree.tokens[i]), Some(i));
    }
}

/// A tree of `parents.len() + 1` nodes: node `i + 1` hangs under `parents[i] % (i + 1)`.
fn random_tree(parents: &[usize]) -> Tree {
    let mut t = Tree::root_only(0);
    for (i, &p) in parents.iter().enumerate() {
        let (id, p) = (i + 1, p % (i + 1));
        t.tokens.push(id as u32);
        t.parents.push(Some(p as u32));
        t.depths.push(t.depths[p] + 1);
        t.ranks.push(Vec::new());
        t.scores.push(0.0);
        t.children.push(Vec::new());
        t.children[p].push((id as u32, id as u32));
    }
    t
}

proptest! {
    /// The flat verify batch of a random tree (1–150 nodes: masks of one to three words) agrees
    /// with the tree: tokens, parents, positions `committed + depth`, and each node's ancestor
    /// mask equals `Tree::visibility()`'s row and lists `ancestors_path` in order.
    #[test]
    fn verify_batch_agrees_with_the_tree(parents in proptest::collection::vec(0usize..1000, 0..150),
                                         committed in 0usize..5000) {
        let tree = random_tree(&parents);
        let b = VerifyBatch::from_tree(&tree, committed).unwrap();
        let n = tree.len();
        prop_assert_eq!(b.len(), n);
        prop_assert_eq!(b.words(), n.div_ceil(64));
        prop_assert_eq!(b.tokens(), &tree.tokens[..]);
        prop_assert_eq!(b.positions(), &tree.positions(committed)[..]);
        let vis = tree.visibility();
        for i in 0..n {
            prop_assert_eq!(b.parents()[i], tree.parents[i].map(|p| p as usize));
            prop_assert_eq!(b.ancestor_mask(i).len(), b.words());
            for j in 0..n {
                prop_assert_eq!(b.sees(i, j), vis.sees(i, j), "node {} column {}", i, j);
            }
            prop_assert_eq!(b.visible(i).collect::<Vec<_>>(), tree.ancestors_path(i));
        }
    }

    /// With exact arithmetic the pop order equals the brute-force top-B order, ties included:
    /// prefix-closed, exactly min(B, #prefixes) nodes, optimal, and the documented tie-break.
    #[test]
    fn tree_is_the_brute_force_top_b_prefixes_in_order(topk in quantized_topk(), budget in 0usize..40) {
        let tree = build(7, &topk, TreeOptions::ddtree(budget));
        check_structure(&tree, &topk);
        let k = budget.min(topk.k());
        let brute = brute_force_order(&topk, topk.k());
        prop_assert_eq!(tree.len() - 1, budget.min(brute.len()));
        // Lemma 1: ranks < min(B, V) suffice, so the brute force over all V ranks gives the same set.
        let want: Vec<Vec<u16>> = brute.iter().take(budget).map(|x| x.1.clone()).collect();
        let got: Vec<Vec<u16>> = tree.ranks[1..].to_vec();
        prop_assert_eq!(got, want);
        prop_assert!(tree.ranks.iter().flatten().all(|&r| (r as usize) < k.max(1)));
        for i in 1..tree.len() {
            prop_assert_eq!(tree.scores[i], brute[i - 1].0);
        }
        prop_assert_eq!(build(7, &topk, TreeOptions::ddtree(budget)), tree, "not deterministic");
    }

    /// On real-valued log-probs the tree's surrogate value Σ q(u) equals the brute-force optimum
    /// (up to f64 rounding of sums of ≤ 4 terms and ≤ 60 exps: 1e-12 relative), and the anchor
    /// variant never beats it.
    #[test]
    fn tree_is_optimal_on_random_logits(l in 1usize..=4, v in 1usize..=5, budget in 0usize..60,
                                        seed in any::<u64>()) {
        let logits: Vec<f32> = (0..l * v).map(|i| {
            let h = (seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            (h >> 40) as f32 / (1u64 << 24) as f32 * 6.0 - 3.0
        }).collect();
        let topk = topk_logprobs(&logits, v, v).unwrap();
        let tree = build(0, &topk, TreeOptions::ddtree(budget));
        check_structure(&tree, &topk);
        let brute = brute_force_order(&topk, v);
        prop_assert_eq!(tree.len() - 1, budget.min(brute.len()));
        let value = |t: &Tree| t.scores[1..].iter().map(|s| s.exp()).sum::<f64>();
        let best: f64 = brute.iter().take(budget).map(|x| x.0.exp()).sum();
        prop_assert!((value(&tree) - best).abs() <= 1e-12 * best.max(1.0), "{} vs {}", value(&tree), best);
        let anchor = build(0, &topk, TreeOptions::anchor(budget));
        check_structure(&anchor, &topk);
        prop_assert!(value(&anchor) <= best + 1e-12 * best.max(1.0));
    }

    /// Visibility row i = {i} ∪ ancestors(i); positions = start + depth.
    #[test]
    fn visibility_is_exactly_the_ancestor_set(topk in quantized_topk(), budget in 0usize..40, start in 0usize..1000) {
        let tree = build(1, &topk, TreeOptions::ddtree(budget));
        let vis = tree.visibility();
        let pos = tree.positions(start);
        for (i, &p) in pos.iter().enumerate() {
            let anc = tree.ancestors_path(i);
            prop_assert_eq!(p, start + anc.len() - 1);
            for j in 0..tree.len() {
                prop_assert_eq!(vis.sees(i, j), anc.contains(&j));
            }
        }
    }

    /// The walk follows posterior tokens through children and returns the first miss as bonus.
    #[test]
    fn walk_accepts_exactly_the_matching_path(topk in quantized_topk(), budget in 0usize..40,
                                             target in proptest::collection::vec(0usize..8, 5)) {
        let tree = build(1, &topk, TreeOptions::ddtree(budget));
        // A posterior that picks child number target[depth] (or a token outside the tree).
        let posterior: Vec<u32> = (0..tree.len()).map(|i| {
            let d = tree.depths[i] as usize;
            tree.children[i].get(target[d % 5]).map_or(9999, |c| c.0)
        }).collect();
        let w = walk(&tree, &posterior).unwrap();
        prop_assert_eq!(w.path[0], 0);
        for pair in w.path.windows(2) {
            prop_assert_eq!(tree.parents[pair[1]], Some(pair[0] as u32));
            prop_assert_eq!(tree.tokens[pair[1]], posterior[pair[0]]);
        }
        let last = *w.path.last().unwrap();
        prop_assert_eq!(w.bonus, posterior[last]);
        prop_assert_eq!(tree.child(last, w.bonus), None);
    }
}

/// ddtree.md §9 worked example: pop order, parents, depths, visibility, then the walk.
#[test]
fn worked_example_of_the_spec_builds_and_walks_as_documented() {
    // tokens: the=1 a=2 an=3 | cat=4 dog=5 cow=6 | sat=7 ran=8 on=9; "."=10; root b=0.
    let p = [[0.60f32, 0.25, 0.05], [0.50, 0.40, 0.05], [0.70, 0.20, 0.05]];
    let lps: Vec<f32> = p.iter().flatten().map(|x| x.ln()).collect();
    let topk = DraftTopK::new(3, 3, vec![1, 2, 3, 4, 5, 6, 7, 8, 9], lps).unwrap();
    let tree = build(0, &topk, TreeOptions::ddtree(6));
    assert_eq!(tree.tokens, vec![0, 1, 4, 2, 5, 7, 7]);
    let parents: Vec<Option<u32>> = vec![None, Some(0), Some(1), Some(0), Some(1), Some(2), Some(4)];
    assert_eq!(tree.parents, parents);
    assert_eq!(tree.depths, vec![0, 1, 2, 1, 2, 3, 3]);
    assert_eq!(tree.positions(100), vec![100, 101, 102, 101, 102, 103, 103]);
    let vis = tree.visibility();
    let rows: Vec<Vec<usize>> = (0..7).map(|i| (0..7).filter(|&j| vis.sees(i, j)).collect()).collect();
    let want: Vec<Vec<usize>> =
        vec![vec![0], vec![0, 1], vec![0, 1, 2], vec![0, 3], vec![0, 1, 4], vec![0, 1, 2, 5], vec![0, 1, 4, 6]];
    assert_eq!(rows, want);
    let value: f64 = tree.scores[1..].iter().map(|s| s.exp()).sum();
    assert!((value - 1.768).abs() < 1e-6, "surrogate value {value}");
    // posterior[0]="the", [1]="dog", [4]="sat", [6]="."; others irrelevant.
    let posterior = vec![1, 5, 99, 99, 7, 99, 10];
    let w = walk(&tree, &posterior).unwrap();
    assert_eq!(w.path, vec![0, 1, 4, 6]);
    assert_eq!(w.bonus, 10);
    assert_eq!(w.acceptance_length(), 4);
    assert!(walk(&tree, &posterior[..3]).is_err());
}

/// Budget 0 or no depths gives the root only; chain options give the top-1 chain of min(B, L).
#[test]
fn degenerate_budgets_and_chain_mode_have_the_documented_shapes() {
    let topk = topk_logprobs(&[0.0, 1.0, 2.0, 5.0, 1.0, 0.0], 3, 3).unwrap();
    assert_eq!(build(9, &topk, TreeOptions::ddtree(0)), Tree::root_only(9));
    let empty = DraftTopK::new(0, 0, vec![], vec![]).unwrap();
    assert_eq!(build(9, &empty, TreeOptions::ddtree(5)), Tree::root_only(9));
    let chain = build(9, &topk, TreeOptions::chain(22));
    assert_eq!(chain.tokens, vec![9, 2, 0]);
    assert_eq!(build(9, &topk, TreeOptions::chain(1)).tokens, vec![9, 2]);
}

/// The anchor variant seeds the full top-1 chain first (pure chain when B ≤ L) and caps K at 8.
#[test]
fn anchor_variant_seeds_the_chain_and_caps_k() {
    let (l, v) = (15, 50);
    let logits: Vec<f32> = (0..l * v).map(|i| ((i * 7919) % 101) as f32 / 10.0).collect();
    let topk = topk_logprobs(&logits, v, v).unwrap();
    let a = build(0, &topk, TreeOptions::anchor(22));
    assert_eq!(a.len(), 23);
    for d in 1..=15 {
        assert_eq!(a.ranks[d], vec![0u16; d], "node {d} is not the chain");
    }
    assert!(a.ranks.iter().flatten().all(|&r| r < 8));
    let small = build(0, &topk, TreeOptions::anchor(10));
    assert!(small.ranks[1..].iter().all(|r| r.iter().all(|&x| x == 0)));
    assert_eq!(small.len(), 11);
}

/// Top-K: sorted by log-prob, ties by lower token id, log-probs normalised over the full vocab.
#[test]
fn topk_is_sorted_normalised_and_breaks_ties_by_token_id() {
    let logits = [1.0f32, 3.0, 3.0, -2.0, 3.0, 0.5];
    let t = topk_logprobs(&logits, 6, 4).unwrap();
    assert_eq!((t.depths(), t.k()), (1, 4));
    let toks: Vec<u32> = (0..4).map(|r| t.token(1, r)).collect();
    assert_eq!(toks, vec![1, 2, 4, 0]);
    let full = topk_logprobs(&logits, 6, 100).unwrap();
    assert_eq!(full.k(), 6);
    let mass: f64 = (0..6).map(|r| (full.logprob(1, r) as f64).exp()).sum();
    assert!((mass - 1.0).abs() < 1e-6, "mass {mass}");
    assert!(topk_logprobs(&[f32::NAN, 0.0], 2, 1).is_err());
    assert!(topk_logprobs(&[0.0; 5], 2, 1).is_err());
    assert!(DraftTopK::new(1, 2, vec![0, 1], vec![-1.0, 0.0]).is_err(), "unsorted row accepted");
}

/// Depths are 1-based (depth 0 is the root): an out-of-range depth or rank panics with a message
/// naming both and the valid ranges, not with an index underflow.
#[test]
fn draft_topk_names_a_bad_depth_or_rank() {
    let topk = DraftTopK::new(2, 3, vec![1, 2, 3, 4, 5, 6], vec![-0.1, -1.0, -2.0, -0.2, -1.5, -3.0]).unwrap();
    assert_eq!((topk.token(1, 0), topk.token(2, 2), topk.logprob(2, 0)), (1, 6, -0.2));
    for (d, r) in [(0usize, 0usize), (3, 0), (1, 3)] {
        let msg = std::panic::catch_unwind(|| topk.token(d, r)).unwrap_err();
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains(&format!("depth {d}")) && msg.contains(&format!("rank {r}")), "{msg}");
    }
}
