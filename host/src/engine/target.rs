//! [`GpuTarget`]: the spec loop's [`Target`] on the GPU engine.
//!
//! `prefill` runs the prompt in chains of ≤ 32 through the one forward; `verify` is one forward
//! over the flattened tree; `commit` keeps the accepted path. The only host syncs of a round are
//! reading the argmax tokens of the verify and writing the path.
//!
//! Draft features (the target's layer taps) are not captured on the GPU yet, so this target
//! serves AR decoding; the feature rows it returns are empty and the CLI refuses tree modes on
//! the GPU backend until the draft runs there.

use super::batch::node_batch;
use super::forward::Engine;
use crate::spec::cpu::FeatureRows;
use crate::spec::{SpecError, Target, Tree};

/// The GPU engine as a [`Target`].
pub struct GpuTarget<'e> {
    pub engine: &'e mut Engine,
}

impl<'e> GpuTarget<'e> {
    pub fn new(engine: &'e mut Engine) -> Self {
        GpuTarget { engine }
    }
}

impl Target for GpuTarget<'_> {
    type Features = FeatureRows;

    fn max_nodes(&self) -> usize {
        kernel_abi::MAX_NODES as usize
    }

    fn prefill(&mut self, prompt: &[u32]) -> Result<(u32, FeatureRows), SpecError> {
        if prompt.is_empty() {
            return Err(SpecError::Config("empty prompt".into()));
        }
        self.engine.reset().map_err(SpecError::backend)?;
        let t = self.engine.prefill(prompt).map_err(SpecError::backend)?;
        Ok((t, Vec::new()))
    }

    fn verify(&mut self, tree: &Tree) -> Result<Vec<u32>, SpecError> {
        let parents: Vec<Option<usize>> = tree.parents.iter().map(|p| p.map(|p| p as usize)).collect();
        let e = &mut *self.engine;
        let b =
            node_batch(e.n_past(), &tree.tokens, &parents, e.cfg.vocab_size, e.ctx()).map_err(SpecError::backend)?;
        e.forward(&b).map_err(SpecError::backend)?;
        let out = e.argmax_tokens(tree.tokens.len()).map_err(SpecError::backend)?;
        if let Some(i) = out.iter().position(|&t| t == u32::MAX) {
            return Err(SpecError::Config(format!("node {i}: the target's logits are all NaN")));
        }
        Ok(out)
    }

    fn commit(&mut self, _tree: &Tree, path: &[usize]) -> Result<FeatureRows, SpecError> {
        self.engine.commit(path).map_err(SpecError::backend)?;
        Ok(Vec::new())
    }
}
