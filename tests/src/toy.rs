//! A tiny deterministic "model" with the same state shapes as a hybrid qwen35 target — an
//! append-only KV cache (one u64 key per position), a recurrent state, and a causal-conv window
//! of the last 2 inputs — so that any commit/rollback bug changes its output.
//!
//! All arithmetic is wrapping u64, so results are exact. One token step at position `p`:
//! ```text
//! e   = embed(tok)
//! c   = mix(e ^ rotl(w1, 17) ^ rotl(w2, 31))          w1, w2 = the two previous inputs (0 if none)
//! s   = mix(s_prev * A ^ c)                              recurrent state
//! key = mix(c ^ p * P)                                   KV row written at slot p
//! a   = fold(mix(a ^ key_j)) over visible rows in position order (itself last)
//! h   = mix(s ^ rotl(a, 7))
//! next = bigram[tok] if h % 4 != 0 else (h >> 8) % V
//! ```
//! [`ToyTarget`] implements [`Target`] with tree verify over the flat batch (state from the parent,
//! conv window along ancestors, KV written at `start + flat index`, attention over the ancestor mask) and a real commit
//! (KV rows of the path compacted in order, state and window of the last path node).
//! [`ar_reference`] is an independent sequential implementation used as the oracle.

use flashtree::spec::{topk_logprobs, DecodingRule, Draft, DraftTopK, SpecError, Target, VerifyBatch};

const A: u64 = 0x9E37_79B9_7F4A_7C15;
const P: u64 = 0xD1B5_4A32_D192_ED03;

/// splitmix64's finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The weights of a toy model: a seed and a vocabulary size.
#[derive(Debug, Clone, Copy)]
pub struct ToyModel {
    /// Weight seed.
    pub seed: u64,
    /// Vocabulary size.
    pub vocab: u32,
}

/// The conv window: the two previous inputs (most recent first).
type Window = [u64; 2];

impl ToyModel {
    fn embed(&self, tok: u32) -> u64 {
        mix(self.seed ^ (tok as u64 + 1).wrapping_mul(A))
    }
    /// The bigram table (the predictable part of the model's output).
    pub fn bigram(&self, tok: u32) -> u32 {
        (mix(self.seed.rotate_left(13) ^ tok as u64) % self.vocab as u64) as u32
    }
    /// Conv + recurrence + key of one token; returns (new state, new window, key).
    fn step(&self, tok: u32, pos: usize, state: u64, w: Window) -> (u64, Window, u64) {
        let e = self.embed(tok);
        let c = mix(e ^ w[0].rotate_left(17) ^ w[1].rotate_left(31));
        let s = mix(state.wrapping_mul(A) ^ c);
        let key = mix(c ^ (pos as u64).wrapping_mul(P));
        (s, [e, w[0]], key)
    }
    fn next(&self, tok: u32, s: u64, keys: impl Iterator<Item = u64>) -> u32 {
        self.next_from(tok, s, fold_keys(0, keys))
    }
    fn next_from(&self, tok: u32, s: u64, a: u64) -> u32 {
        let h = mix(s ^ a.rotate_left(7));
        if !h.is_multiple_of(4) {
            self.bigram(tok)
        } else {
            ((h >> 8) % self.vocab as u64) as u32
        }
    }
}

/// The order-dependent "attention" fold over key rows.
fn fold_keys(a: u64, keys: impl Iterator<Item = u64>) -> u64 {
    keys.fold(a, |a, k| mix(a ^ k))
}

/// Greedy AR continuation of `prompt` by `n` tokens, computed sequentially (no trees, no
/// rollback): the oracle every speculative mode must reproduce.
pub fn ar_reference(m: &ToyModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let (mut state, mut w, mut keys) = (0u64, [0u64; 2], Vec::new());
    let mut seq = prompt.to_vec();
    let mut out = Vec::new();
    let mut pos = 0;
    while out.len() < n {
        let tok = seq[pos];
        let (s, nw, key) = m.step(tok, pos, state, w);
        (state, w) = (s, nw);
        keys.push(key);
        pos += 1;
        if pos >= prompt.len() {
            let t = m.next(tok, state, keys.iter().copied());
            out.push(t);
            seq.push(t);
        }
    }
    out
}

/// One feature row: what the draft sees of a committed token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToyFeature {
    /// Absolute position.
    pub pos: usize,
    /// The token at that position.
    pub token: u32,
    /// The recurrent state after it.
    pub state: u64,
}

/// The toy target with engine-style caches.
#[derive(Debug)]
pub struct ToyTarget {
    m: ToyModel,
    /// KV rows; slots `< committed` are committed, verify scratch lives above.
    kv: Vec<u64>,
    committed: usize,
    state: u64,
    window: Window,
    /// Per-node (state, window, feature) of the last verify.
    nodes: Vec<(u64, Window, ToyFeature)>,
    /// Counts verify calls (for tests).
    pub verifies: usize,
    /// A deliberately injected rollback bug (to prove the lossless tests can fail).
    pub bug: Option<Bug>,
}

/// Rollback bugs a real engine could have; each must break losslessness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// Keep KV rows `start..start+|path|` in flat order instead of compacting the path's rows.
    KvFlatOrder,
    /// Adopt the recurrent state of the last flat node instead of the last path node.
    StateOfLastFlatNode,
    /// Gather each node's conv window from the previous flat node instead of its parent.
    ConvWindowFlatOrder,
}

impl ToyTarget {
    /// Empty caches.
    pub fn new(m: ToyModel) -> Self {
        Self { m, kv: Vec::new(), committed: 0, state: 0, window: [0; 2], nodes: Vec::new(), verifies: 0, bug: None }
    }
}

impl Target for ToyTarget {
    type Features = Vec<ToyFeature>;

    fn committed(&self) -> usize {
        self.committed
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        *self = Self { verifies: self.verifies, bug: self.bug, ..Self::new(self.m) };
        Ok(())
    }

    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
        greedy_only(rule)?;
        if tokens.is_empty() {
            return Err(SpecError::Config("extend: no tokens".into()));
        }
        self.kv.truncate(self.committed);
        let mut feats = Vec::new();
        let mut next = 0;
        for (i, &tok) in tokens.iter().enumerate() {
            let pos = self.committed + i;
            let (s, w, key) = self.m.step(tok, pos, self.state, self.window);
            (self.state, self.window) = (s, w);
            self.kv.push(key);
            next = self.m.next(tok, s, self.kv.iter().copied());
            feats.push(ToyFeature { pos, token: tok, state: s });
        }
        self.committed += tokens.len();
        Ok((next, feats))
    }

    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        greedy_only(rule)?;
        self.verifies += 1;
        let start = self.committed;
        if batch.committed() != start {
            return Err(SpecError::Config(format!("batch on {} tokens, {start} committed", batch.committed())));
        }
        self.kv.truncate(start);
        self.nodes.clear();
        let mut posterior = Vec::with_capacity(batch.len());
        let past = fold_keys(0, self.kv[..start].iter().copied());
        for i in 0..batch.len() {
            let (state, mut window) = match batch.parents()[i] {
                None => (self.state, self.window),
                Some(p) => (self.nodes[p].0, self.nodes[p].1),
            };
            if self.bug == Some(Bug::ConvWindowFlatOrder) && i > 0 {
                window = self.nodes[i - 1].1;
            }
            let pos = batch.positions()[i];
            let tok = batch.tokens()[i];
            let (s, w, key) = self.m.step(tok, pos, state, window);
            self.kv.push(key); // slot start + i
                               // The ancestor mask, in index order (= root to node).
            let visible = batch.visible(i).map(|j| self.kv[start + j]);
            posterior.push(self.m.next_from(tok, s, fold_keys(past, visible)));
            self.nodes.push((s, w, ToyFeature { pos, token: tok, state: s }));
        }
        Ok(posterior)
    }

    fn commit(&mut self, _batch: &VerifyBatch, path: &[usize]) -> Result<Self::Features, SpecError> {
        let start = self.committed;
        if self.bug != Some(Bug::KvFlatOrder) {
            for (d, &i) in path.iter().enumerate() {
                self.kv[start + d] = self.kv[start + i];
            }
        }
        self.kv.truncate(start + path.len());
        let mut last = *path.last().ok_or_else(|| SpecError::Config("empty path".into()))?;
        if self.bug == Some(Bug::StateOfLastFlatNode) {
            last = self.nodes.len() - 1;
        }
        let last = self.nodes[last];
        (self.state, self.window) = (last.0, last.1);
        self.committed += path.len();
        Ok(path.iter().map(|&i| self.nodes[i].2).collect())
    }
}

/// The toy's `next` is its greedy pick; any other rule is refused by name.
fn greedy_only(rule: DecodingRule) -> Result<(), SpecError> {
    match rule {
        DecodingRule::Greedy => Ok(()),
        other => Err(SpecError::unsupported(other, "the toy target")),
    }
}

/// Checks that `new` continues the draft's context exactly (positions in order, no gaps).
fn append_context(ctx: &mut Vec<ToyFeature>, new: &[ToyFeature]) -> Result<(), SpecError> {
    for f in new {
        if f.pos != ctx.len() {
            return Err(SpecError::Config(format!(
                "feature row for position {} appended at context length {}",
                f.pos,
                ctx.len()
            )));
        }
        ctx.push(*f);
    }
    Ok(())
}

/// A model-like draft: favours the bigram chain from the bonus, with hash noise elsewhere, so its
/// trees are right often but not always, and branch.
#[derive(Debug)]
pub struct ToyDraft {
    m: ToyModel,
    depths: usize,
    ctx: Vec<ToyFeature>,
}

impl ToyDraft {
    /// A draft of `depths` positions for model `m`.
    pub fn new(m: ToyModel, depths: usize) -> Self {
        Self { m, depths, ctx: Vec::new() }
    }
}

impl Draft for ToyDraft {
    type Features = Vec<ToyFeature>;
    fn depths(&self) -> usize {
        self.depths
    }
    fn reset(&mut self) -> Result<(), SpecError> {
        self.ctx.clear();
        Ok(())
    }
    fn propose(&mut self, new: &Vec<ToyFeature>, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        append_context(&mut self.ctx, new)?;
        let v = self.m.vocab as usize;
        let start = self.ctx.len();
        let last_state = self.ctx.last().map_or(0, |f| f.state);
        let mut logits = vec![0f32; self.depths * v];
        let mut chain = bonus;
        for d in 0..self.depths {
            chain = self.m.bigram(chain);
            for t in 0..v {
                let h = mix(last_state ^ mix((start + d) as u64) ^ t as u64);
                logits[d * v + t] = (h % 1000) as f32 / 400.0;
            }
            logits[d * v + chain as usize] += 2.0;
        }
        topk_logprobs(&logits, v, k)
    }
}

/// How the oracle hides the true token at a corrupted position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// The true token gets the lowest logit (never in a chain, almost never in a tree).
    Absent,
    /// A wrong token at rank 0, the true one at rank 1.
    SecondRank,
}

/// An oracle draft: proposes the known AR continuation, corrupted at positions `p` with
/// `corrupted(seed, p, rate)`. Works with any target whose features are one row per token
/// (`Vec<T>`); it counts rows to know the position and checks the bonus against the AR sequence.
#[derive(Debug)]
pub struct OracleDraft<T> {
    seq: Vec<u32>,
    vocab: u32,
    depths: usize,
    rate: f64,
    seed: u64,
    how: Corruption,
    ctx_len: usize,
    _rows: std::marker::PhantomData<T>,
}

/// Whether the oracle corrupts absolute position `p` (a Bernoulli(rate) draw fixed by the seed).
pub fn corrupted(seed: u64, p: usize, rate: f64) -> bool {
    ((mix(seed ^ mix(p as u64 + 7)) >> 11) as f64 / (1u64 << 53) as f64) < rate
}

impl<T> OracleDraft<T> {
    /// `seq` = prompt + AR continuation (long enough to cover every drafted position).
    pub fn new(seq: Vec<u32>, vocab: u32, depths: usize, rate: f64, seed: u64, how: Corruption) -> Self {
        Self { seq, vocab, depths, rate, seed, how, ctx_len: 0, _rows: std::marker::PhantomData }
    }
}

impl<T> Draft for OracleDraft<T> {
    type Features = Vec<T>;
    fn depths(&self) -> usize {
        self.depths
    }
    fn reset(&mut self) -> Result<(), SpecError> {
        self.ctx_len = 0;
        Ok(())
    }
    /// Takes a prompt's rows before the first round (the toy [`ToyDraft`] does not: both paths
    /// of the session are exercised).
    fn extend_context(&mut self, new: &Vec<T>) -> Result<bool, SpecError> {
        self.ctx_len += new.len();
        Ok(true)
    }
    fn propose(&mut self, new: &Vec<T>, bonus: u32, k: usize) -> Result<DraftTopK, SpecError> {
        self.ctx_len += new.len();
        let start = self.ctx_len;
        if self.seq.get(start) != Some(&bonus) {
            return Err(SpecError::Config(format!("bonus {bonus} is not the AR token at {start}")));
        }
        let v = self.vocab as usize;
        let mut logits = vec![0f32; self.depths * v];
        for d in 0..self.depths {
            let p = start + 1 + d;
            let row = &mut logits[d * v..(d + 1) * v];
            for (t, x) in row.iter_mut().enumerate() {
                *x = (mix(self.seed ^ mix(p as u64) ^ t as u64) % 1000) as f32 / 1000.0;
            }
            let Some(&truth) = self.seq.get(p) else {
                continue;
            };
            let wrong = (truth + 1 + (mix(p as u64) % (self.vocab as u64 - 1)) as u32) % self.vocab;
            if !corrupted(self.seed, p, self.rate) {
                row[truth as usize] = 8.0;
            } else if self.how == Corruption::Absent {
                row[wrong as usize] = 8.0;
                row[truth as usize] = -100.0;
            } else {
                row[wrong as usize] = 8.0;
                row[truth as usize] = 7.5;
            }
        }
        topk_logprobs(&logits, v, k)
    }
}
