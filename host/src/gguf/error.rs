//! Errors of the GGUF reader and writer: always with the file, and where known the byte offset.

use std::fmt;
use std::path::PathBuf;

/// A GGUF failure in `file` (at byte `offset` of the header when known).
#[derive(Debug)]
pub struct GgufError {
    pub file: PathBuf,
    pub offset: Option<u64>,
    pub kind: Box<GgufErrorKind>,
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.kind)?;
        if let Some(off) = self.offset {
            write!(f, " (at byte {off})")?;
        }
        Ok(())
    }
}

impl std::error::Error for GgufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &*self.kind {
            GgufErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum GgufErrorKind {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\" (47 47 55 46)")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {found}, expected 2 or 3")]
    BadVersion { found: u32 },
    #[error("file ends early: {what} needs {needed} bytes, {available} left")]
    Truncated { what: String, needed: u64, available: u64 },
    #[error("{what}: count {count} cannot fit in the {available} bytes left (each needs at least {min_each})")]
    CountTooLarge { what: String, count: u64, available: u64, min_each: u64 },
    #[error("{count} {what}: more than the {max} accepted")]
    TableTooLarge { what: String, count: u64, max: u64 },
    #[error("{what}: string is not valid UTF-8")]
    BadUtf8 { what: String },
    #[error("key {key:?}: unknown metadata value type {found}, expected 0..=12")]
    BadValueType { key: String, found: u32 },
    #[error("key {key:?}: bool byte is {found}, expected 0 or 1")]
    BadBool { key: String, found: u8 },
    #[error("key {key:?}: arrays nested deeper than {max}")]
    ArrayTooDeep { key: String, max: usize },
    #[error("key {key:?}: metadata arrays would exceed {max} elements in all")]
    TooManyArrayElements { key: String, max: u64 },
    #[error("duplicate metadata key {key:?}")]
    DuplicateKey { key: String },
    #[error("general.alignment = {found}, expected a non-zero power of two")]
    BadAlignment { found: u64 },
    #[error("tensor {name:?}: {n_dims} dimensions, at most {max} allowed")]
    TooManyDims { name: String, n_dims: u32, max: usize },
    #[error("tensor name {name:?} is {len} bytes, at most {max} allowed")]
    NameTooLong { name: String, len: usize, max: usize },
    #[error("duplicate tensor name {name:?}")]
    DuplicateTensor { name: String },
    #[error("tensor {name:?}: unknown ggml type id {found}")]
    UnknownType { name: String, found: u32 },
    #[error("tensor {name:?}: shape {dims:?} of {ty} is invalid: {why}")]
    BadShape { name: String, dims: Vec<u64>, ty: String, why: String },
    #[error("tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor { name: String, offset: u64, alignment: u64 },
    #[error("tensor {name:?}: data [{start}, {end}) runs past the end of the data section ({data_len} bytes)")]
    TensorPastEnd { name: String, start: u64, end: u64, data_len: u64 },
    #[error("tensors {first:?} and {second:?} overlap (data [{first_start}, {first_end}) and [{second_start}, …))")]
    OverlappingTensors { first: String, second: String, first_start: u64, first_end: u64, second_start: u64 },
    #[error("no tensor named {name:?}")]
    NoSuchTensor { name: String },
    #[error("missing metadata key {key:?}")]
    MissingKey { key: String },
    #[error("key {key:?}: found {found}, expected {expected}")]
    WrongKeyType { key: String, found: String, expected: String },
    #[error("split: {0}")]
    Split(String),
    #[error("writer: {0}")]
    Writer(String),
}
