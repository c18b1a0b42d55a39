//! Errors of checkpoint reading and conversion: each names the file, tensor or key at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a safetensors file: {why}")]
    Safetensors { path: PathBuf, why: String },
    #[error("{path}: bad config: {why}")]
    Config { path: PathBuf, why: String },
    #[error("tensor {name}: {why}")]
    Tensor { name: String, why: String },
    #[error("missing tensor {name} (looked in {looked})")]
    Missing { name: String, looked: String },
    #[error(transparent)]
    Model(#[from] flashtree_reference::model::ModelError),
    /// A config or tensor table refused by the model readers (`crate::model`).
    #[error(transparent)]
    Load(#[from] crate::model::ModelError),
}
