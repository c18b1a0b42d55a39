//! The verification walk (`ddtree.md` §5), for every decoding rule.
//!
//! `posterior[i]` is the target's decoding-rule token after flat node `i` (its argmax at T = 0;
//! with sampling, a sample of node `i`'s own distribution drawn with the stream of its position,
//! which makes the walk exact: `rule.rs`). Starting at the root, follow the child whose token
//! equals the posterior; stop at the first node whose posterior is not one of its children. That
//! posterior is the bonus token.

use super::ddtree::Tree;
use super::SpecError;

/// The accepted path and the bonus token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    /// Flat indices from the root (always `path[0] == 0`); `path[d]` has depth `d`.
    pub path: Vec<usize>,
    /// The target's token after the last path node: the next round's root.
    pub bonus: u32,
}

impl Walk {
    /// Acceptance length of the round: `|path|` = accepted draft nodes + 1.
    pub fn acceptance_length(&self) -> usize {
        self.path.len()
    }
}

/// Follows `posterior` through `tree`. `posterior` must have one entry per tree node.
pub fn walk(tree: &Tree, posterior: &[u32]) -> Result<Walk, SpecError> {
    if posterior.len() != tree.len() {
        return Err(SpecError::PosteriorLength { got: posterior.len(), want: tree.len() });
    }
    let mut cur = 0usize;
    let mut path = vec![0usize];
    loop {
        let t = posterior[cur];
        match tree.child(cur, t) {
            Some(c) => {
                cur = c;
                path.push(c);
            }
            None => return Ok(Walk { path, bonus: t }),
        }
    }
}
