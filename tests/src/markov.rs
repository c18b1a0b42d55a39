//! A first-order Markov target and draft with exactly computable next-token distributions, for
//! the sampling tests: the target's logits after a token `a` are row `a` of a `[V, V]` table
//! (whatever came before), so AR sampling's distribution of every generated position is a product
//! of transition matrices. The draft proposes, at depth `d` of the block rooted at `b`, the
//! log-probabilities of its own chain's `d`-step marginal `e_b · softmax(Q)^d` (a DFlash-like
//! per-depth marginal), so the trees `ddtree::build` makes from it branch and are deterministic.
//!
//! [`MarkovTarget`] implements [`Target`] with any [`DecodingRule`] through
//! [`DecodingRule::pick`] (node `i`'s pick with the stream of position `positions[i] + 1`), the
//! same call the CPU target makes.

use flashtree::spec::{topk_logprobs, DecodingRule, Draft, DraftTopK, SpecError, Target, VerifyBatch};

/// Row-major `[V, V]` softmax of `logits` (each row normalised, in f64).
pub fn softmax_rows(logits: &[f32], v: usize) -> Vec<f64> {
    logits
        .chunks_exact(v)
        .flat_map(|row| {
            let m = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
            let e: Vec<f64> = row.iter().map(|&x| (x as f64 - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |x| x / s)
        })
        .collect()
}

/// `dist · M` for a row-major `[V, V]` transition matrix.
pub fn step(dist: &[f64], m: &[f64]) -> Vec<f64> {
    let v = dist.len();
    (0..v).map(|b| (0..v).map(|a| dist[a] * m[a * v + b]).sum()).collect()
}

/// The Markov target: `logits[a]` is the row after token `a`; its caches are the committed tokens.
#[derive(Debug, Clone)]
pub struct MarkovTarget {
    /// Vocabulary size `V`.
    pub vocab: usize,
    /// `[V, V]` row-major logits.
    pub logits: Vec<f32>,
    committed: Vec<u32>,
}

impl MarkovTarget {
    /// A target with empty caches.
    pub fn new(vocab: usize, logits: Vec<f32>) -> Self {
        assert_eq!(logits.len(), vocab * vocab);
        Self { vocab, logits, committed: Vec::new() }
    }

    /// The logits after token `a`.
    pub fn row(&self, a: u32) -> Result<&[f32], SpecError> {
        let a = a as usize;
        if a >= self.vocab {
            return Err(SpecError::Config(format!("token {a} outside the vocabulary of {}", self.vocab)));
        }
        Ok(&self.logits[a * self.vocab..(a + 1) * self.vocab])
    }
}

impl Target for MarkovTarget {
    type Features = Vec<u32>;

    fn committed(&self) -> usize {
        self.committed.len()
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.committed.clear();
        Ok(())
    }

    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, Vec<u32>), SpecError> {
        let last = *tokens.last().ok_or_else(|| SpecError::Config("extend: no tokens".into()))?;
        self.committed.extend_from_slice(tokens);
        Ok((rule.pick(self.row(last)?, self.committed.len())?, tokens.to_vec()))
    }

    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        if batch.committed() != self.committed.len() {
            return Err(SpecError::Config("verify batch on the wrong committed length".into()));
        }
        batch.tokens().iter().zip(batch.positions()).map(|(&t, &p)| rule.pick(self.row(t)?, p + 1)).collect()
    }

    fn commit(&mut self, batch: &VerifyBatch, path: &[usize]) -> Result<Vec<u32>, SpecError> {
        let rows: Vec<u32> = path.iter().map(|&i| batch.tokens()[i]).collect();
        self.committed.extend_from_slice(&rows);
        Ok(rows)
    }
}

/// The Markov draft: depth `d`'s distribution is the `d`-step marginal of its own chain `Q`.
#[derive(Debug, Clone)]
pub struct MarkovDraft {
    /// Vocabulary size `V`.
    pub vocab: usize,
    /// `softmax` of the draft's `[V, V]` logits, row-major.
    pub q: Vec<f64>,
    /// Drafted depths `L`.
    pub depths: usize,
}

impl MarkovDraft {
    /// A draft of `depths` positions from `[V, V]` logits.
    pub fn new(vocab: usize, logits: &[f32], depths: usize) -> Self {
        Self { vocab, q: softmax_rows(logits, vocab), depths }
    }

    /// `q_d` for `d = 1..=depths` from root token `b`: `depths` rows of `V` probabilities.
    pub fn marginals(&self, b: u32) -> Vec<Vec<f64>> {
        let mut dist = vec![0.0; self.vocab];
        dist[b as usize] = 1.0;
        (0..self.depths)
            .map(|_| {
                dist = step(&dist, &self.q);
                dist.clone()
            })
            .collect()
    }
}

impl Draft for MarkovDraft {
    type Features = Vec<u32>;

    fn depths(&self) -> usize {
        self.depths
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        Ok(())
    }

    fn propose(&mut self, _new: &Vec<u32>, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        let flat: Vec<f32> = self.marginals(bonus).concat().iter().map(|&p| p.ln() as f32).collect();
        topk_logprobs(&flat, self.vocab, k)
    }
}
