//! GGUF v2/v3 files (docs/gguf-format-and-quants.md §1): a zero-copy reader on a memory map, a
//! streaming writer, and split-file (`…-00001-of-0000N.gguf`) assembly.
//!
//! Files are untrusted: every count, length, dimension and offset is checked against the file
//! size before anything is allocated or sliced, and every failure is a [`GgufError`] naming the
//! file, the byte offset and the key or tensor involved.

pub mod error;
pub mod parse;
pub mod reader;
pub mod split;
pub mod value;
pub mod writer;

pub use error::{GgufError, GgufErrorKind};
pub use parse::{parse_header, GgufHeader, TensorInfo};
pub use reader::GgufFile;
pub use split::Gguf;
pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorSpec};

pub use flashtree_quants::GgmlType;

/// `"GGUF"` as the first four bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's maximum number of dimensions.
pub const MAX_DIMS: usize = 4;
/// ggml's maximum tensor name length in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Deepest nesting of arrays the reader accepts (the spec allows nesting; no real file nests).
pub const MAX_ARRAY_DEPTH: usize = 4;
