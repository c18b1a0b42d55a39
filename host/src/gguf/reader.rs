//! A GGUF file on a read-only memory map: metadata parsed once, tensor data borrowed zero-copy.

use super::error::{GgufError, GgufErrorKind};
use super::parse::{parse_header, GgufHeader, TensorInfo};
use memmap2::Mmap;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// An open GGUF file. Derefs to its [`GgufHeader`] for metadata getters and the tensor table.
pub struct GgufFile {
    header: GgufHeader,
    map: Mmap,
}

impl GgufFile {
    /// Opens and validates `path` (see [`parse_header`] for what is checked).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let io = |e: std::io::Error| GgufError {
            file: path.to_path_buf(),
            offset: None,
            kind: Box::new(GgufErrorKind::Io(e)),
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < 24 {
            return Err(GgufError {
                file: path.to_path_buf(),
                offset: Some(0),
                kind: Box::new(GgufErrorKind::Truncated {
                    what: "GGUF header (magic, version, counts)".into(),
                    needed: 24,
                    available: len,
                }),
            });
        }
        // SAFETY: the map is read-only and private to this process. Another process truncating
        // or rewriting the file while it is mapped is outside what we defend against (as for
        // every mmap-based model loader); all bounds were checked against the mapped length.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse_header(&map, path)?;
        Ok(GgufFile { header, map })
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &PathBuf {
        &self.header.file
    }

    /// The header (metadata, tensor table, layout).
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The raw bytes of tensor `name`, borrowed from the map (no copy).
    pub fn tensor_data(&self, name: &str) -> Result<&[u8], GgufError> {
        let r = self.header.tensor_range(name)?;
        Ok(&self.map[r])
    }

    /// The raw bytes of a tensor-table entry (`None` if `info` does not fit this file, e.g.
    /// because it came from another one).
    pub fn data_of(&self, info: &TensorInfo) -> Option<&[u8]> {
        let start = self.header.data_start.checked_add(info.offset)?;
        let end = start.checked_add(info.nbytes)?;
        self.map.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }

    /// The whole mapped file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}

impl Deref for GgufFile {
    type Target = GgufHeader;
    fn deref(&self) -> &GgufHeader {
        &self.header
    }
}
