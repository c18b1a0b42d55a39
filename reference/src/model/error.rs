//! Errors of the model references: everything a caller (or a file) can get wrong.

/// A weight, hyperparameter or input that does not fit the model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    /// A tensor's shape disagrees with the hyperparameters.
    #[error("tensor {name} has shape {got:?}, expected {expected:?}")]
    Shape { name: String, got: Vec<usize>, expected: Vec<usize> },
    /// A hyperparameter is zero, inconsistent or out of range.
    #[error("hyperparameter {name}: {why}")]
    Hparam { name: &'static str, why: String },
    /// A token id at `index` is not below the vocabulary size.
    #[error("token {token} at index {index} is out of range for a vocabulary of {n_vocab}")]
    Token { index: usize, token: u32, n_vocab: usize },
    /// A tree / path / batch description that is malformed.
    #[error("bad batch: {0}")]
    Batch(String),
    /// A requested capture layer that does not exist.
    #[error("layer {layer} requested for capture, the model has {n_layer} layers")]
    CaptureLayer { layer: usize, n_layer: usize },
}
