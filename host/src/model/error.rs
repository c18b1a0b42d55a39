//! Errors of the model loaders: each names the file and the key or tensor, what was found and
//! what was expected.

use crate::gguf::GgufError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{file}: general.architecture is {found:?}, expected {expected:?}")]
    WrongArchitecture {
        file: PathBuf,
        found: String,
        expected: String,
    },
    #[error("{file}: {key}: {msg}")]
    BadConfig {
        file: PathBuf,
        key: String,
        msg: String,
    },
    #[error("{file}: missing tensor {name} (expected shape {expected:?})")]
    MissingTensor {
        file: PathBuf,
        name: String,
        expected: Vec<u64>,
    },
    #[error("{file}: tensor {name} has shape {found:?}, expected {expected:?} ({why})")]
    WrongShape {
        file: PathBuf,
        name: String,
        found: Vec<u64>,
        expected: Vec<u64>,
        why: String,
    },
    #[error("{file}: tensor {name} has type {found}, expected one of {expected}")]
    WrongType {
        file: PathBuf,
        name: String,
        found: String,
        expected: String,
    },
    #[error("{file}: {msg}")]
    Io { file: PathBuf, msg: String },
    #[error("{file}: safetensors: {msg}")]
    Safetensors { file: PathBuf, msg: String },
}

impl ModelError {
    pub(crate) fn config(
        file: impl Into<PathBuf>,
        key: &str,
        msg: impl Into<String>,
    ) -> ModelError {
        ModelError::BadConfig {
            file: file.into(),
            key: key.to_string(),
            msg: msg.into(),
        }
    }
}
