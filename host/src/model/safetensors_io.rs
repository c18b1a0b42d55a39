//! safetensors files: reading through the `safetensors` crate (which validates the header:
//! JSON size limit, offsets contiguous and inside the buffer, shape × dtype = byte length) plus
//! our dtype check; and a streaming writer for synthetic drafts (header, then each tensor's
//! bytes in order, so no model-sized buffer is needed).

use super::error::ModelError;
use crate::gguf::GgmlType;
use safetensors::{Dtype, SafeTensors};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// One tensor of a safetensors file, with its shape in PyTorch order (`[out, in]`).
#[derive(Clone, Debug, PartialEq)]
pub struct SafetensorsEntry {
    pub name: String,
    pub shape: Vec<u64>,
    pub ty: GgmlType,
}

impl SafetensorsEntry {
    /// The shape in GGUF `ne` order (reversed).
    pub fn ne(&self) -> Vec<u64> {
        self.shape.iter().rev().copied().collect()
    }
}

/// A parsed safetensors buffer.
pub struct SafetensorsTable<'a> {
    file: PathBuf,
    st: SafeTensors<'a>,
    entries: Vec<SafetensorsEntry>,
}

fn dtype_to_ggml(d: Dtype) -> Option<GgmlType> {
    match d {
        Dtype::F32 => Some(GgmlType::F32),
        Dtype::F16 => Some(GgmlType::F16),
        Dtype::BF16 => Some(GgmlType::BF16),
        _ => None,
    }
}

/// Parses `bytes` as a safetensors file (`file` for messages). Tensors of dtypes other than
/// F32/F16/BF16 are an error naming the tensor.
pub fn read_safetensors<'a>(
    bytes: &'a [u8],
    file: &Path,
) -> Result<SafetensorsTable<'a>, ModelError> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| ModelError::Safetensors {
        file: file.to_path_buf(),
        msg: e.to_string(),
    })?;
    let mut entries = Vec::new();
    for (name, view) in st.tensors() {
        let ty = dtype_to_ggml(view.dtype()).ok_or_else(|| ModelError::Safetensors {
            file: file.to_path_buf(),
            msg: format!(
                "tensor {name}: dtype {:?} is not supported (expected BF16, F16 or F32)",
                view.dtype()
            ),
        })?;
        entries.push(SafetensorsEntry {
            shape: view.shape().iter().map(|&s| s as u64).collect(),
            name,
            ty,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(SafetensorsTable {
        file: file.to_path_buf(),
        st,
        entries,
    })
}

impl<'a> SafetensorsTable<'a> {
    /// All tensors, sorted by name.
    pub fn tensors(&self) -> &[SafetensorsEntry] {
        &self.entries
    }

    /// The entry named `name`.
    pub fn entry(&self, name: &str) -> Option<&SafetensorsEntry> {
        self.entries
            .binary_search_by(|e| e.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// The raw bytes of tensor `name`.
    pub fn data(&self, name: &str) -> Result<&'a [u8], ModelError> {
        self.st
            .tensor(name)
            .map(|v| v.data())
            .map_err(|e| ModelError::Safetensors {
                file: self.file.clone(),
                msg: format!("tensor {name}: {e}"),
            })
    }
}

/// A tensor to be written: name, PyTorch-order shape and type (F32/F16/BF16).
#[derive(Clone, Debug)]
pub struct SafetensorsSpec {
    pub name: String,
    pub shape: Vec<u64>,
    pub ty: GgmlType,
}

impl SafetensorsSpec {
    pub fn nbytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.ty.type_size() as u64
    }
}

/// Writes a safetensors file: 8-byte header length, JSON header (padded with spaces to a multiple
/// of 8), then each tensor's bytes from `data(index, spec, sink)` in order (exactly `nbytes`).
pub fn write_safetensors(
    path: &Path,
    tensors: &[SafetensorsSpec],
    metadata: &[(&str, &str)],
    mut data: impl FnMut(usize, &SafetensorsSpec, &mut dyn Write) -> io::Result<()>,
) -> io::Result<u64> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = metadata
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(m));
    }
    let mut off = 0u64;
    for t in tensors {
        let dtype = match t.ty {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("tensor {}: safetensors cannot hold {other}", t.name),
                ))
            }
        };
        let n = t.nbytes();
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": dtype, "shape": t.shape, "data_offsets": [off, off + n]}),
        );
        off += n;
    }
    let mut json =
        serde_json::to_vec(&serde_json::Value::Object(header)).map_err(io::Error::other)?;
    json.resize(json.len().div_ceil(8) * 8, b' ');
    let f = std::fs::File::create(path)?;
    let mut w = io::BufWriter::with_capacity(1 << 20, f);
    w.write_all(&(json.len() as u64).to_le_bytes())?;
    w.write_all(&json)?;
    for (i, t) in tensors.iter().enumerate() {
        let mut c = Counting {
            inner: &mut w,
            n: 0,
        };
        data(i, t, &mut c)?;
        if c.n != t.nbytes() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "tensor {}: wrote {} bytes, expected {}",
                    t.name,
                    c.n,
                    t.nbytes()
                ),
            ));
        }
    }
    w.flush()?;
    Ok(8 + json.len() as u64 + off)
}

struct Counting<'a, W: Write> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
