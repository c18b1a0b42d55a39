//! A safetensors reader: 8-byte little-endian header length, a JSON header
//! `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, then the data.
//! Tensors are read as f32 (F32, F16, BF16 accepted) or as raw integers for fixtures (I32, I64).

use super::{ConvertError, TensorF32};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Byte range inside the data section.
    pub begin: usize,
    pub end: usize,
}

/// A memory-mapped safetensors file with a validated header.
pub struct SafeTensors {
    path: PathBuf,
    map: memmap2::Mmap,
    data_start: usize,
    tensors: BTreeMap<String, TensorInfo>,
}

fn dtype_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F32" | "I32" => 4,
        "F16" | "BF16" => 2,
        "I64" | "F64" => 8,
        "U8" | "I8" | "BOOL" => 1,
        _ => return None,
    })
}

impl SafeTensors {
    /// Opens and validates `path`: header within the file, every tensor's byte range inside the
    /// data section and equal to `product(shape) · dtype size`.
    pub fn open(path: &Path) -> Result<Self, ConvertError> {
        let bad = |why: String| ConvertError::Safetensors { path: path.to_path_buf(), why };
        let file = std::fs::File::open(path).map_err(|source| ConvertError::Io { path: path.to_path_buf(), source })?;
        // SAFETY: the file is opened read-only; we never hand out references that outlive `map`, and
        // a concurrent truncation by another process is outside what this tool defends against.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|source| ConvertError::Io { path: path.to_path_buf(), source })?;
        if map.len() < 8 {
            return Err(bad(format!("{} bytes, shorter than the 8-byte header length", map.len())));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&map[..8]);
        let hlen = u64::from_le_bytes(len8);
        let data_start = 8u64
            .checked_add(hlen)
            .filter(|&e| e <= map.len() as u64)
            .ok_or_else(|| bad(format!("header length {hlen} runs past the end of the {}-byte file", map.len())))?
            as usize;
        let header: serde_json::Value =
            serde_json::from_slice(&map[8..data_start]).map_err(|e| bad(format!("header is not JSON: {e}")))?;
        let obj = header.as_object().ok_or_else(|| bad("header is not a JSON object".into()))?;
        let data_len = map.len() - data_start;
        let mut tensors = BTreeMap::new();
        for (name, v) in obj {
            if name == "__metadata__" {
                continue;
            }
            let dtype = v["dtype"].as_str().ok_or_else(|| bad(format!("tensor {name}: no dtype")))?.to_string();
            let size = dtype_size(&dtype).ok_or_else(|| bad(format!("tensor {name}: unsupported dtype {dtype}")))?;
            let shape: Vec<usize> = v["shape"]
                .as_array()
                .ok_or_else(|| bad(format!("tensor {name}: no shape")))?
                .iter()
                .map(|d| d.as_u64().map(|d| d as usize))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("tensor {name}: shape is not a list of integers")))?;
            let offs = v["data_offsets"].as_array().filter(|a| a.len() == 2);
            let (begin, end) = match offs.map(|a| (a[0].as_u64(), a[1].as_u64())) {
                Some((Some(b), Some(e))) => (b as usize, e as usize),
                _ => return Err(bad(format!("tensor {name}: data_offsets is not [begin, end]"))),
            };
            let n = shape
                .iter()
                .try_fold(size, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| bad(format!("tensor {name}: shape {shape:?} overflows")))?;
            if begin > end || end > data_len || end - begin != n {
                return Err(bad(format!(
                    "tensor {name}: bytes [{begin}, {end}) do not hold {shape:?} {dtype} inside a {data_len}-byte data section"
                )));
            }
            tensors.insert(name.clone(), TensorInfo { dtype, shape, begin, end });
        }
        Ok(Self { path: path.to_path_buf(), map, data_start, tensors })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All tensor names and header entries, sorted by name.
    pub fn tensors(&self) -> &BTreeMap<String, TensorInfo> {
        &self.tensors
    }

    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(name)
    }

    fn bytes(&self, info: &TensorInfo) -> &[u8] {
        &self.map[self.data_start + info.begin..self.data_start + info.end]
    }

    /// Reads a floating-point tensor as f32 (F32 / F16 / BF16, exact conversion).
    pub fn read_f32(&self, name: &str) -> Result<TensorF32, ConvertError> {
        let info = self
            .info(name)
            .ok_or_else(|| ConvertError::Missing { name: name.to_string(), looked: self.path.display().to_string() })?;
        let b = self.bytes(info);
        let data: Vec<f32> = match info.dtype.as_str() {
            "F32" => b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            "F16" => b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            "BF16" => b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            other => {
                return Err(ConvertError::Tensor {
                    name: name.to_string(),
                    why: format!("dtype {other} is not a float type"),
                })
            }
        };
        Ok(TensorF32 { shape: info.shape.clone(), data })
    }

    /// Reads an integer tensor (I32 or I64) as i64 values.
    pub fn read_i64(&self, name: &str) -> Result<Vec<i64>, ConvertError> {
        let info = self
            .info(name)
            .ok_or_else(|| ConvertError::Missing { name: name.to_string(), looked: self.path.display().to_string() })?;
        let b = self.bytes(info);
        match info.dtype.as_str() {
            "I32" => Ok(b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64).collect()),
            "I64" => Ok(b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect()),
            other => Err(ConvertError::Tensor { name: name.to_string(), why: format!("dtype {other} is not I32/I64") }),
        }
    }
}

/// The safetensors files of a checkpoint folder: those named in `model.safetensors.index.json`
/// when it exists, else every `model*.safetensors` (single file or shards), else every
/// `*.safetensors`; sorted by name.
pub fn open_folder(dir: &Path) -> Result<Vec<SafeTensors>, ConvertError> {
    let io = |source| ConvertError::Io { path: dir.to_path_buf(), source };
    let index = dir.join("model.safetensors.index.json");
    let mut files: Vec<PathBuf> = if index.exists() {
        let text =
            std::fs::read_to_string(&index).map_err(|source| ConvertError::Io { path: index.clone(), source })?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ConvertError::Config { path: index.clone(), why: e.to_string() })?;
        let map = v["weight_map"]
            .as_object()
            .ok_or_else(|| ConvertError::Config { path: index.clone(), why: "no `weight_map` object".into() })?;
        let mut names: Vec<&str> = map.values().filter_map(|f| f.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for n in &names {
            if n.contains('/') || n.contains('\\') || n.starts_with('.') {
                return Err(ConvertError::Config {
                    path: index.clone(),
                    why: format!("shard name {n:?} is not a plain file name"),
                });
            }
        }
        names.iter().map(|n| dir.join(n)).collect()
    } else {
        let mut all = Vec::new();
        for e in std::fs::read_dir(dir).map_err(io)? {
            let p = e.map_err(io)?.path();
            if p.extension().is_some_and(|x| x == "safetensors") {
                all.push(p);
            }
        }
        let is_model = |p: &PathBuf| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("model"));
        if all.iter().any(is_model) {
            all.retain(is_model);
        }
        all
    };
    files.sort();
    if files.is_empty() {
        return Err(ConvertError::Missing { name: "*.safetensors".into(), looked: dir.display().to_string() });
    }
    files.iter().map(|p| SafeTensors::open(p)).collect()
}

/// Finds `name` in any of `files` and reads it as f32.
pub fn read_any(files: &[SafeTensors], name: &str) -> Result<TensorF32, ConvertError> {
    for f in files {
        if f.info(name).is_some() {
            return f.read_f32(name);
        }
    }
    Err(ConvertError::Missing {
        name: name.to_string(),
        looked: files.iter().map(|f| f.path().display().to_string()).collect::<Vec<_>>().join(", "),
    })
}

/// Whether any of `files` holds `name`.
pub fn has_any(files: &[SafeTensors], name: &str) -> bool {
    files.iter().any(|f| f.info(name).is_some())
}
