//! The `qwen35` target forward: embeddings → hybrid stack (Gated DeltaNet / gated full attention,
//! each followed by a SwiGLU MLP, both pre-norm residual) → final norm → LM head.
//!
//! Two entry points share one layer loop over a batch of *nodes* with parent links:
//! * [`Qwen35Weights::forward`]: a chain of tokens appended to the state (prefill or decode);
//!   the DeltaNet core runs as the recurrence or in chunked form.
//! * [`Qwen35Weights::forward_tree`]: a tree of tokens on top of a committed state (verification);
//!   node `i` sits at position `n_past + depth(i)`, attends to the committed KV plus its ancestors
//!   and itself, and its conv window and DeltaNet state continue from its parent's. The state is
//!   not modified; [`Qwen35State::commit_path`] applies the nodes of an accepted root-to-leaf path.

use super::attention;
use super::deltanet::{self, GdnDims};
use super::mlp::swiglu_rows;
use super::ops::rms_norm;
use super::state::{LayerState, NodeLayerState, NodeState, Qwen35State};
use super::weights::{Mixer, Qwen35Weights};
use super::ModelError;

/// How the Gated DeltaNet core of a chain forward is evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaNetMode {
    /// Token-by-token recurrence.
    Recurrent,
    /// The chunked WY/UT form with this chunk length (HF and llama.cpp use 64).
    Chunked { chunk: usize },
}

/// Options of a chain forward.
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardOptions {
    /// 0-based layers whose *output* (residual stream after the layer, HF `hidden_states[l+1]`)
    /// is returned, in this order.
    pub capture_layers: Vec<usize>,
    pub deltanet: DeltaNetMode,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        Self { capture_layers: Vec::new(), deltanet: DeltaNetMode::Chunked { chunk: 64 } }
    }
}

/// Result of a chain forward.
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardOutput {
    /// `[T][n_vocab]`.
    pub logits: Vec<Vec<f32>>,
    /// `captured[c][t]` = output of layer `capture_layers[c]` for token `t`, `[n_embd]`.
    pub captured: Vec<Vec<Vec<f32>>>,
}

/// Result of a tree forward.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeOutput {
    /// `[nodes][n_vocab]`.
    pub logits: Vec<Vec<f32>>,
    /// `captured[c][i]` for node `i`.
    pub captured: Vec<Vec<Vec<f32>>>,
    /// What each node adds to the state (for [`Qwen35State::commit_path`]).
    pub nodes: Vec<NodeState>,
    /// Each node's parent (copied from the input).
    pub parents: Vec<Option<usize>>,
}

impl Qwen35State {
    /// Commits the nodes of `path` (node indices of `out`, root first, each the parent of the next,
    /// the first one a root) in order: their KV rows are appended, DeltaNet state and conv window
    /// become those after the last node, `n_past` grows by `path.len()`.
    pub fn commit_path(&mut self, out: &TreeOutput, path: &[usize]) -> Result<(), ModelError> {
        let mut prev: Option<usize> = None;
        for &i in path {
            let parent =
                *out.parents.get(i).ok_or_else(|| ModelError::Batch(format!("path node {i} is not in the tree")))?;
            if parent != prev {
                return Err(ModelError::Batch(format!("path node {i} has parent {parent:?}, expected {prev:?}")));
            }
            prev = Some(i);
        }
        for &i in path {
            self.apply_node(&out.nodes[i])?;
        }
        Ok(())
    }
}

/// Internal result of the layer loop.
struct BatchResult {
    logits: Vec<Vec<f32>>,
    captured: Vec<Vec<Vec<f32>>>,
    /// Per node and layer (tree mode), or empty (chain mode).
    nodes: Vec<NodeState>,
    /// Chain mode: the state after the last token.
    final_state: Option<Qwen35State>,
}

impl Qwen35Weights {
    /// Teacher-forced forward of a chain of tokens appended to `state` at positions
    /// `state.n_past ..`; `state` is advanced past them.
    pub fn forward(
        &self,
        state: &mut Qwen35State,
        tokens: &[u32],
        opts: &ForwardOptions,
    ) -> Result<ForwardOutput, ModelError> {
        let parents: Vec<Option<usize>> = (0..tokens.len()).map(|i| i.checked_sub(1)).collect();
        let r = self.run(state, tokens, &parents, &opts.capture_layers, Some(opts.deltanet))?;
        if let Some(s) = r.final_state {
            *state = s;
        }
        Ok(ForwardOutput { logits: r.logits, captured: r.captured })
    }

    /// Forward of a token tree on top of `state` (not modified). `parents[i]` is `None` for a
    /// child of the committed state, else an earlier node (`parents[i] < i`).
    pub fn forward_tree(
        &self,
        state: &Qwen35State,
        tokens: &[u32],
        parents: &[Option<usize>],
        capture_layers: &[usize],
    ) -> Result<TreeOutput, ModelError> {
        if parents.len() != tokens.len() {
            return Err(ModelError::Batch(format!("{} parents for {} tokens", parents.len(), tokens.len())));
        }
        for (i, p) in parents.iter().enumerate() {
            if matches!(p, Some(p) if *p >= i) {
                return Err(ModelError::Batch(format!("node {i} has parent {p:?}, parents must come first")));
            }
        }
        let r = self.run(state, tokens, parents, capture_layers, None)?;
        Ok(TreeOutput { logits: r.logits, captured: r.captured, nodes: r.nodes, parents: parents.to_vec() })
    }

    /// The layer loop. `chain = Some(mode)`: nodes form a chain and only the final state is kept;
    /// `None`: tree mode, per-node states are kept and the DeltaNet runs as the recurrence.
    fn run(
        &self,
        state: &Qwen35State,
        tokens: &[u32],
        parents: &[Option<usize>],
        capture_layers: &[usize],
        chain: Option<DeltaNetMode>,
    ) -> Result<BatchResult, ModelError> {
        let hp = &self.hparams;
        let n = tokens.len();
        if state.layers.len() != hp.n_layer() {
            return Err(ModelError::Batch(format!("state has {} layers, model {}", state.layers.len(), hp.n_layer())));
        }
        for &l in capture_layers {
            if l >= hp.n_layer() {
                return Err(ModelError::CaptureLayer { layer: l, n_layer: hp.n_layer() });
            }
        }
        for (index, &token) in tokens.iter().enumerate() {
            if token as usize >= hp.n_vocab {
                return Err(ModelError::Token { index, token, n_vocab: hp.n_vocab });
            }
        }
        // Ancestor lists (root first, self last) and positions.
        let mut anc: Vec<Vec<usize>> = Vec::with_capacity(n);
        for (i, parent) in parents.iter().enumerate() {
            let mut a = match *parent {
                Some(p) => anc[p].clone(),
                None => Vec::new(),
            };
            a.push(i);
            anc.push(a);
        }
        let pos: Vec<usize> = anc.iter().map(|a| state.n_past + a.len() - 1).collect();

        let mut h: Vec<Vec<f32>> = tokens.iter().map(|&t| self.token_embd.row(t as usize).to_vec()).collect();
        let mut captured = vec![Vec::new(); capture_layers.len()];
        let mut nodes: Vec<NodeState> = vec![NodeState { layers: Vec::new() }; if chain.is_some() { 0 } else { n }];
        let mut final_state = chain.map(|_| state.clone());
        if let Some(fs) = &mut final_state {
            fs.n_past += n;
        }

        for (l, layer) in self.layers.iter().enumerate() {
            let x: Vec<Vec<f32>> = h.iter().map(|r| rms_norm(r, &layer.attn_norm, hp.rms_eps)).collect();
            let mix: Vec<Vec<f32>> = match (&layer.mixer, &state.layers[l]) {
                (Mixer::Attention(w), LayerState::Attention { k: ck, v: cv }) => {
                    let mut p = attention::project_rows(w, hp, &x, &pos[..n]);
                    if super::tensor::device_rounding() {
                        // The F16 KV cache; and the tensor-core attention kernel (head dims 64,
                        // 128, 256) multiplies f16 queries.
                        let q16 = matches!(hp.head_dim, 64 | 128 | 256);
                        for pi in p.iter_mut() {
                            pi.k = super::tensor::round_f16(&pi.k);
                            pi.v = super::tensor::round_f16(&pi.v);
                            if q16 {
                                pi.q = super::tensor::round_f16(&pi.q);
                            }
                        }
                    }
                    let os: Vec<Vec<f32>> = (0..n)
                        .map(|i| {
                            let keys: Vec<&[f32]> = ck
                                .iter()
                                .map(|r| r.as_slice())
                                .chain(anc[i].iter().map(|&a| p[a].k.as_slice()))
                                .collect();
                            let vals: Vec<&[f32]> = cv
                                .iter()
                                .map(|r| r.as_slice())
                                .chain(anc[i].iter().map(|&a| p[a].v.as_slice()))
                                .collect();
                            attention::attend(&p[i].q, &keys, &vals, hp.n_head, hp.n_head_kv, hp.head_dim)
                        })
                        .collect();
                    let rows: Vec<(&[f32], &[f32])> = os.iter().zip(&p).map(|(o, pi)| (&o[..], &pi.gate[..])).collect();
                    let ys = attention::finish_rows(w, &rows);
                    if let Some(LayerState::Attention { k, v }) = final_state.as_mut().map(|s| &mut s.layers[l]) {
                        for pi in &p {
                            k.push(pi.k.clone());
                            v.push(pi.v.clone());
                        }
                    }
                    for (i, node) in nodes.iter_mut().enumerate() {
                        node.layers.push(NodeLayerState::Kv { k: p[i].k.clone(), v: p[i].v.clone() });
                    }
                    ys
                }
                (Mixer::DeltaNet(w), LayerState::DeltaNet { conv: c0, s: s0 }) => {
                    let dims = GdnDims::of(hp);
                    let proj = deltanet::project_rows(w, &x);
                    // Conv windows: node i's window after itself = parent's window pushed with i.
                    let mut windows: Vec<Vec<f32>> = Vec::with_capacity(n);
                    let mut inputs = Vec::with_capacity(n);
                    for i in 0..n {
                        let before = parents[i].map_or(c0, |p| &windows[p]);
                        let y = deltanet::conv_step(&w.conv.data, hp.conv_kernel, before, &proj[i].mixed);
                        inputs.push(deltanet::delta_inputs(dims, &y, &proj[i]));
                        let mut after = before.clone();
                        deltanet::conv_window_push(&mut after, &proj[i].mixed);
                        windows.push(after);
                    }
                    let os: Vec<Vec<f32>> = match chain {
                        Some(mode) => {
                            let mut s = s0.clone();
                            let os = match mode {
                                DeltaNetMode::Recurrent => {
                                    inputs.iter().map(|xi| deltanet::recurrent_step(dims, &mut s, xi)).collect()
                                }
                                DeltaNetMode::Chunked { chunk } => {
                                    if chunk == 0 {
                                        return Err(ModelError::Batch("DeltaNet chunk size 0".into()));
                                    }
                                    deltanet::chunked(dims, &mut s, &inputs, chunk)
                                }
                            };
                            if let Some(LayerState::DeltaNet { conv, s: fs }) =
                                final_state.as_mut().map(|st| &mut st.layers[l])
                            {
                                if let Some(last) = windows.last() {
                                    conv.clone_from(last);
                                }
                                *fs = s;
                            }
                            os
                        }
                        None => {
                            let mut states: Vec<Vec<f32>> = Vec::with_capacity(n);
                            let mut os = Vec::with_capacity(n);
                            for i in 0..n {
                                let mut s = parents[i].map_or(s0, |p| &states[p]).clone();
                                os.push(deltanet::recurrent_step(dims, &mut s, &inputs[i]));
                                states.push(s);
                            }
                            for (i, (s, c)) in states.into_iter().zip(windows).enumerate() {
                                nodes[i].layers.push(NodeLayerState::DeltaNet { conv: c, s });
                            }
                            os
                        }
                    };
                    let rows: Vec<(&[f32], &[f32])> = os.iter().zip(&proj).map(|(o, p)| (&o[..], &p.z[..])).collect();
                    deltanet::finish_rows(w, dims, hp.rms_eps, &rows)
                }
                _ => return Err(ModelError::Batch(format!("state of layer {l} does not match the layer kind"))),
            };
            for (hi, mi) in h.iter_mut().zip(&mix) {
                hi.iter_mut().zip(mi).for_each(|(a, b)| *a += b);
            }
            let normed: Vec<Vec<f32>> =
                h.iter().map(|hi| rms_norm(hi, &layer.post_attention_norm, hp.rms_eps)).collect();
            for (hi, m) in h.iter_mut().zip(swiglu_rows(&layer.mlp, &normed)) {
                hi.iter_mut().zip(&m).for_each(|(a, b)| *a += b);
            }
            for (c, &cl) in capture_layers.iter().enumerate() {
                if cl == l {
                    captured[c] = h.clone();
                }
            }
        }
        let head = self.lm_head();
        let logits = head.matmul(&h.iter().map(|hi| rms_norm(hi, &self.output_norm, hp.rms_eps)).collect::<Vec<_>>());
        Ok(BatchResult { logits, captured, nodes, final_state })
    }
}
