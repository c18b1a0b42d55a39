//! The per-sequence state of a `qwen35` target: an explicit, clonable value, so a speculative
//! decoder can snapshot it per tree node, roll back by keeping an old clone, and continue token by
//! token.

use super::deltanet::GdnDims;
use super::weights::Qwen35Hparams;
use super::ModelError;

/// State of one layer.
#[derive(Clone, Debug, PartialEq)]
pub enum LayerState {
    /// KV cache of a full-attention layer: one row of `n_head_kv · head_dim` per committed position
    /// (K after q/k-norm and RoPE).
    Attention { k: Vec<Vec<f32>>, v: Vec<Vec<f32>> },
    /// Gated DeltaNet: `conv` = the last `conv_kernel − 1` raw (pre-conv) q|k|v inputs, oldest
    /// first, `[(K−1) · channels]`; `s` = the recurrent state `[n_v][d_k][d_v]`, f32.
    DeltaNet { conv: Vec<f32>, s: Vec<f32> },
}

/// Everything the target remembers about a sequence after `n_past` committed tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen35State {
    /// Committed tokens (= next position).
    pub n_past: usize,
    /// One entry per trunk layer.
    pub layers: Vec<LayerState>,
}

impl Qwen35State {
    /// The empty state (position 0): empty KV caches, zero conv windows and recurrent states.
    pub fn new(hp: &Qwen35Hparams) -> Self {
        let dims = GdnDims::of(hp);
        let layers = hp
            .recurrent
            .iter()
            .map(|&rec| {
                if rec {
                    LayerState::DeltaNet {
                        conv: vec![0.0; hp.conv_kernel.saturating_sub(1) * hp.conv_channels()],
                        s: vec![0.0; dims.state_len()],
                    }
                } else {
                    LayerState::Attention { k: Vec::new(), v: Vec::new() }
                }
            })
            .collect();
        Self { n_past: 0, layers }
    }

    /// Appends one node's per-layer state change (its KV rows, and its DeltaNet state and conv
    /// window, which replace the current ones) and advances `n_past` by one.
    pub fn apply_node(&mut self, node: &NodeState) -> Result<(), ModelError> {
        if node.layers.len() != self.layers.len() {
            return Err(ModelError::Batch(format!(
                "node state has {} layers, the model has {}",
                node.layers.len(),
                self.layers.len()
            )));
        }
        for (l, (st, nd)) in self.layers.iter_mut().zip(&node.layers).enumerate() {
            match (st, nd) {
                (LayerState::Attention { k, v }, NodeLayerState::Kv { k: nk, v: nv }) => {
                    k.push(nk.clone());
                    v.push(nv.clone());
                }
                (LayerState::DeltaNet { conv, s }, NodeLayerState::DeltaNet { conv: nc, s: ns }) => {
                    conv.clone_from(nc);
                    s.clone_from(ns);
                }
                _ => return Err(ModelError::Batch(format!("node state of layer {l} is of the wrong kind"))),
            }
        }
        self.n_past += 1;
        Ok(())
    }
}

/// What one processed token (a tree node) adds to the state.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeLayerState {
    /// The node's K and V rows.
    Kv { k: Vec<f32>, v: Vec<f32> },
    /// The conv window and recurrent state *after* the node (the state its children start from).
    DeltaNet { conv: Vec<f32>, s: Vec<f32> },
}

/// Per-layer state of one tree node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeState {
    pub layers: Vec<NodeLayerState>,
}
