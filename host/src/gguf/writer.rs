//! A streaming GGUF v3 writer: declare metadata and tensors, then stream each tensor's bytes in
//! table order; nothing proportional to the tensor data is held in memory.

use super::error::{GgufError, GgufErrorKind};
use super::parse::tensor_nbytes;
use super::value::Value;
use super::{GgmlType, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS, MAX_NAME_LEN};
use std::io::{self, Write};
use std::path::Path;

/// A tensor to be written: name, `ne` (contiguous dimension first) and type.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Data bytes (computed by [`GgufWriter::add_tensor`]).
    pub nbytes: u64,
}

/// Builder + writer for one GGUF file.
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorSpec>,
    alignment: Option<u64>,
}

fn writer_err(msg: String) -> GgufError {
    GgufError { file: "<gguf writer>".into(), offset: None, kind: Box::new(GgufErrorKind::Writer(msg)) }
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Sets `key` (replacing an earlier value in place, so key order is first-set order).
    pub fn set(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        if key == "general.alignment" {
            self.alignment = value.as_integer().map(|a| a as u64);
        }
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
    }

    /// Sets the data alignment (a power of two) and the `general.alignment` key.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<(), GgufError> {
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(writer_err(format!("alignment {alignment} is not a power of two")));
        }
        self.set("general.alignment", Value::U32(alignment));
        Ok(())
    }

    /// The metadata in write order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Declares a tensor (appended to the table).
    pub fn add_tensor(&mut self, name: impl Into<String>, dims: &[u64], ty: GgmlType) -> Result<(), GgufError> {
        let name = name.into();
        if name.len() > MAX_NAME_LEN {
            return Err(writer_err(format!("tensor name {name:?} longer than {MAX_NAME_LEN} bytes")));
        }
        if dims.len() > MAX_DIMS {
            return Err(writer_err(format!("tensor {name:?}: {} dims, at most {MAX_DIMS}", dims.len())));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(writer_err(format!("duplicate tensor name {name:?}")));
        }
        let nbytes =
            tensor_nbytes(dims, ty).map_err(|why| writer_err(format!("tensor {name:?} {dims:?} {ty}: {why}")))?;
        self.tensors.push(TensorSpec { name, dims: dims.to_vec(), ty, nbytes });
        Ok(())
    }

    /// The tensor table in write order.
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    fn alignment(&self) -> u64 {
        self.alignment.filter(|a| a.is_power_of_two()).unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Offsets (relative to the data section) of every tensor, in table order.
    pub fn offsets(&self) -> Vec<u64> {
        let a = self.alignment();
        let mut off = 0u64;
        self.tensors
            .iter()
            .map(|t| {
                let o = off;
                off = (off + t.nbytes).div_ceil(a) * a;
                o
            })
            .collect()
    }

    /// Everything before the tensor data, padded to the alignment.
    pub fn header_bytes(&self) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&MAGIC);
        h.extend_from_slice(&3u32.to_le_bytes());
        h.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut h, k);
            h.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut h, v);
        }
        for (t, off) in self.tensors.iter().zip(self.offsets()) {
            put_str(&mut h, &t.name);
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.ty.id().to_le_bytes());
            h.extend_from_slice(&off.to_le_bytes());
        }
        let a = self.alignment() as usize;
        h.resize(h.len().div_ceil(a) * a, 0);
        h
    }

    /// Total file size.
    pub fn file_size(&self) -> u64 {
        let data_end = match (self.tensors.last(), self.offsets().last()) {
            (Some(t), Some(&o)) => {
                let a = self.alignment();
                (o + t.nbytes).div_ceil(a) * a
            }
            _ => 0,
        };
        self.header_bytes().len() as u64 + data_end
    }

    /// Writes the file to `w`: the header, then for each tensor (in table order) whatever
    /// `data(index, spec, sink)` writes — which must be exactly `spec.nbytes` bytes — then
    /// zero padding to the alignment.
    pub fn write<W: Write>(
        &self,
        w: &mut W,
        mut data: impl FnMut(usize, &TensorSpec, &mut dyn Write) -> io::Result<()>,
    ) -> io::Result<u64> {
        let header = self.header_bytes();
        w.write_all(&header)?;
        let mut total = header.len() as u64;
        let a = self.alignment();
        let zeros = vec![0u8; a as usize];
        for (i, t) in self.tensors.iter().enumerate() {
            let mut counter = CountingWriter { inner: &mut *w, count: 0 };
            data(i, t, &mut counter)?;
            if counter.count != t.nbytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("tensor {:?}: wrote {} bytes, expected {}", t.name, counter.count, t.nbytes),
                ));
            }
            let pad = (t.nbytes.div_ceil(a) * a - t.nbytes) as usize;
            w.write_all(&zeros[..pad])?;
            total += t.nbytes + pad as u64;
        }
        Ok(total)
    }

    /// [`GgufWriter::write`] to a new file at `path` (buffered).
    pub fn write_file(
        &self,
        path: &Path,
        data: impl FnMut(usize, &TensorSpec, &mut dyn Write) -> io::Result<()>,
    ) -> Result<u64, GgufError> {
        let io_err =
            |e: io::Error| GgufError { file: path.to_path_buf(), offset: None, kind: Box::new(GgufErrorKind::Io(e)) };
        let f = std::fs::File::create(path).map_err(io_err)?;
        let mut bw = io::BufWriter::with_capacity(1 << 20, f);
        let n = self.write(&mut bw, data).map_err(io_err)?;
        bw.flush().map_err(io_err)?;
        Ok(n)
    }

    /// Splits into shards of at most `max_tensors` tensors each (gguf-py's layout): the first
    /// shard keeps all metadata, every shard gets `split.no` (u16, 0-based), `split.count`
    /// (u16) and `split.tensors.count` (i32). Write shard `i` to
    /// [`super::split::shard_file_name`]`(stem, i + 1, n)`. One writer is returned unchanged
    /// (no split keys) when everything fits in one shard.
    pub fn split(&self, max_tensors: usize) -> Result<Vec<GgufWriter>, GgufError> {
        if max_tensors == 0 {
            return Err(writer_err("split: max_tensors must be at least 1".into()));
        }
        let chunks: Vec<&[TensorSpec]> = self.tensors.chunks(max_tensors).collect();
        if chunks.len() <= 1 {
            return Ok(vec![self.clone()]);
        }
        let n = chunks.len();
        if n > u16::MAX as usize || self.tensors.len() > i32::MAX as usize {
            return Err(writer_err(format!("split: {n} shards do not fit the u16 split.count")));
        }
        Ok(chunks
            .into_iter()
            .enumerate()
            .map(|(i, ts)| {
                let mut w = GgufWriter {
                    metadata: if i == 0 { self.metadata.clone() } else { Vec::new() },
                    tensors: ts.to_vec(),
                    alignment: self.alignment,
                };
                w.set("split.no", Value::U16(i as u16));
                w.set("split.count", Value::U16(n as u16));
                w.set("split.tensors.count", Value::I32(self.tensors.len() as i32));
                w
            })
            .collect())
    }

    /// Writes to a byte vector, taking each tensor's data from `data[i]` (tests, small files).
    pub fn to_bytes(&self, data: &[&[u8]]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write(&mut out, |i, _, w| w.write_all(data.get(i).copied().unwrap_or_default()))?;
        Ok(out)
    }
}

struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    count: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

fn put_value(h: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.push(*x as u8),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => h.push(*x as u8),
        Value::String(s) => put_str(h, s),
        Value::Array { elem, items } => {
            h.extend_from_slice(&elem.id().to_le_bytes());
            h.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                put_value(h, it);
            }
        }
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
    }
}
