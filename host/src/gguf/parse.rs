//! Parsing of the GGUF header (magic, version, key/values, tensor infos) from a byte slice.
//!
//! Invariants established for a returned [`GgufHeader`]: keys and tensor names are unique valid
//! UTF-8; every tensor has ≤ 4 dims, a known ggml type, `ne0` a multiple of the type's block
//! size, an element count and byte size that fit in `i64`, an aligned offset, and data inside the
//! file that overlaps no other tensor's. Nothing is allocated in proportion to a count read from
//! the file before that count has been checked against the bytes that remain.

use super::error::{GgufError, GgufErrorKind};
use super::value::{Value, ValueType};
use super::{GgmlType, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_NAME_LEN};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// `ne`: `dims[0]` is the contiguous (innermost) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    /// Bytes of data: `ne0 / block · type_size · ne1 · ne2 · ne3`.
    pub nbytes: u64,
}

impl TensorInfo {
    /// Number of elements (the product of `dims`; 1 for a 0-dim scalar).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of one row (`dims[0]` elements).
    pub fn row_bytes(&self) -> u64 {
        let ne0 = self.dims.first().copied().unwrap_or(1);
        self.ty.row_bytes(ne0).unwrap_or(0)
    }

    /// Number of rows (`ne1 · ne2 · ne3`).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// Everything before the tensor data.
#[derive(Clone, Debug)]
pub struct GgufHeader {
    /// The file this header came from (for error messages).
    pub file: PathBuf,
    pub version: u32,
    /// Key/value pairs in file order.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_start: u64,
    /// Bytes from `data_start` to the end of the file.
    pub data_len: u64,
    key_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

/// Most metadata array elements accepted in one file (all arrays together). A parsed element
/// takes ~32 bytes of memory whatever its encoded size, so bounding by bytes left alone would
/// let a large file of u8 arrays ask for 32× its size; real qwen35 files hold ≈ 0.75 M elements
/// (tokens, token types, merges).
pub const MAX_ARRAY_ELEMENTS: u64 = 1 << 24;

/// Most tensors / key-values accepted (real files: ≈ 900 / ≈ 40), for the same reason.
pub const MAX_TABLE_ENTRIES: u64 = 1 << 20;

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    file: &'a Path,
    /// Array elements still allowed (see [`MAX_ARRAY_ELEMENTS`]).
    element_budget: u64,
}

impl<'a> Cursor<'a> {
    fn err(&self, kind: GgufErrorKind) -> GgufError {
        GgufError { file: self.file.to_path_buf(), offset: Some(self.pos as u64), kind: Box::new(kind) }
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.err(GgufErrorKind::Truncated { what: what(), needed: n, available: self.remaining() }));
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        let start = self.pos;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => {
                self.pos = start;
                Err(self.err(GgufErrorKind::BadUtf8 { what: what() }))
            }
        }
    }

    /// Checks that `count` items of at least `min_each` bytes can still fit.
    fn check_count(&self, count: u64, min_each: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
        if count.saturating_mul(min_each) > self.remaining() {
            return Err(self.err(GgufErrorKind::CountTooLarge {
                what: what(),
                count,
                available: self.remaining(),
                min_each,
            }));
        }
        Ok(())
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("value of key {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => {
                let b = self.array::<1>(&what)?[0];
                if b > 1 {
                    self.pos -= 1;
                    return Err(self.err(GgufErrorKind::BadBool { key: key.to_string(), found: b }));
                }
                Value::Bool(b == 1)
            }
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(self.err(GgufErrorKind::ArrayTooDeep { key: key.to_string(), max: MAX_ARRAY_DEPTH }));
                }
                let tag = self.u32(&|| format!("array element type of key {key:?}"))?;
                let elem = ValueType::from_id(tag)
                    .ok_or_else(|| self.err(GgufErrorKind::BadValueType { key: key.to_string(), found: tag }))?;
                let count = self.u64(&|| format!("array length of key {key:?}"))?;
                self.check_count(count, elem.min_encoded_size(), &|| format!("array of key {key:?}"))?;
                if count > self.element_budget {
                    return Err(
                        self.err(GgufErrorKind::TooManyArrayElements { key: key.to_string(), max: MAX_ARRAY_ELEMENTS })
                    );
                }
                self.element_budget -= count;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array { elem, items }
            }
        })
    }
}

/// Parses the header of a GGUF file held in `bytes` (the whole file: tensor extents are checked
/// against `bytes.len()`). `file` is used in error messages only.
pub fn parse_header(bytes: &[u8], file: &Path) -> Result<GgufHeader, GgufError> {
    let mut c = Cursor { bytes, pos: 0, file, element_budget: MAX_ARRAY_ELEMENTS };
    let magic = c.array::<4>(&|| "magic".into())?;
    if magic != MAGIC {
        c.pos = 0;
        return Err(c.err(GgufErrorKind::BadMagic { found: magic }));
    }
    let version = c.u32(&|| "version".into())?;
    if version != 2 && version != 3 {
        c.pos = 4;
        return Err(c.err(GgufErrorKind::BadVersion { found: version }));
    }
    let n_tensors = c.u64(&|| "tensor count".into())?;
    let n_kv = c.u64(&|| "metadata count".into())?;
    // A key/value needs ≥ 8 (key length) + 4 (type) + 1 bytes; a tensor info ≥ 8 + 4 + 4 + 8.
    c.check_count(n_kv, 13, &|| "metadata key/values".into())?;
    for (count, what) in [(n_kv, "metadata key/values"), (n_tensors, "tensors")] {
        if count > MAX_TABLE_ENTRIES {
            return Err(c.err(GgufErrorKind::TableTooLarge { what: what.into(), count, max: MAX_TABLE_ENTRIES }));
        }
    }

    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut key_index = HashMap::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key_pos = c.pos;
        let key = c.string(&|| format!("key #{i}"))?;
        let tag = c.u32(&|| format!("value type of key {key:?}"))?;
        let ty = ValueType::from_id(tag)
            .ok_or_else(|| c.err(GgufErrorKind::BadValueType { key: key.clone(), found: tag }))?;
        let value = c.value(ty, &key, 0)?;
        if key_index.insert(key.clone(), metadata.len()).is_some() {
            c.pos = key_pos;
            return Err(c.err(GgufErrorKind::DuplicateKey { key }));
        }
        metadata.push((key, value));
    }

    c.check_count(n_tensors, 24, &|| "tensor infos".into())?;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let info_pos = c.pos;
        let name = c.string(&|| format!("name of tensor #{i}"))?;
        if name.len() > MAX_NAME_LEN {
            c.pos = info_pos;
            return Err(c.err(GgufErrorKind::NameTooLong { len: name.len(), name, max: MAX_NAME_LEN }));
        }
        let n_dims = c.u32(&|| format!("dimension count of tensor {name:?}"))?;
        if n_dims as usize > MAX_DIMS {
            return Err(c.err(GgufErrorKind::TooManyDims { name, n_dims, max: MAX_DIMS }));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(c.u64(&|| format!("dimension {d} of tensor {name:?}"))?);
        }
        let type_id = c.u32(&|| format!("type of tensor {name:?}"))?;
        let ty = GgmlType::from_id(type_id)
            .ok_or_else(|| c.err(GgufErrorKind::UnknownType { name: name.clone(), found: type_id }))?;
        let offset = c.u64(&|| format!("offset of tensor {name:?}"))?;
        let nbytes = tensor_nbytes(&dims, ty).map_err(|why| {
            c.err(GgufErrorKind::BadShape { name: name.clone(), dims: dims.clone(), ty: ty.name().to_string(), why })
        })?;
        if tensor_index.insert(name.clone(), tensors.len()).is_some() {
            c.pos = info_pos;
            return Err(c.err(GgufErrorKind::DuplicateTensor { name }));
        }
        tensors.push(TensorInfo { name, dims, ty, offset, nbytes });
    }

    let alignment = match key_index.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(&i) => {
            let v = &metadata[i].1;
            match v.as_integer() {
                Some(a) if a > 0 && a <= u32::MAX as i128 && (a as u64).is_power_of_two() => a as u64,
                _ => {
                    return Err(GgufError {
                        file: file.to_path_buf(),
                        offset: None,
                        kind: Box::new(match v.as_integer() {
                            Some(a) => GgufErrorKind::BadAlignment { found: a.clamp(0, u64::MAX as i128) as u64 },
                            None => GgufErrorKind::WrongKeyType {
                                key: "general.alignment".into(),
                                found: v.type_description(),
                                expected: "an unsigned integer".into(),
                            },
                        }),
                    })
                }
            }
        }
    };
    let end_of_infos = c.pos as u64;
    let data_start = end_of_infos.div_ceil(alignment) * alignment;
    if !tensors.is_empty() && data_start > bytes.len() as u64 {
        return Err(GgufError {
            file: file.to_path_buf(),
            offset: Some(end_of_infos),
            kind: Box::new(GgufErrorKind::Truncated {
                what: format!("padding before the data section (which starts at byte {data_start})"),
                needed: data_start - end_of_infos,
                available: bytes.len() as u64 - end_of_infos,
            }),
        });
    }
    let data_len = (bytes.len() as u64).saturating_sub(data_start);

    let err = |kind| GgufError { file: file.to_path_buf(), offset: None, kind: Box::new(kind) };
    for t in &tensors {
        if !t.offset.is_multiple_of(alignment) {
            return Err(err(GgufErrorKind::MisalignedTensor { name: t.name.clone(), offset: t.offset, alignment }));
        }
        let end = t.offset.checked_add(t.nbytes);
        if end.is_none_or(|e| e > data_len) {
            return Err(err(GgufErrorKind::TensorPastEnd {
                name: t.name.clone(),
                start: t.offset,
                end: end.unwrap_or(u64::MAX),
                data_len,
            }));
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| (tensors[i].offset, tensors[i].nbytes));
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        if a.nbytes > 0 && b.nbytes > 0 && a.offset + a.nbytes > b.offset {
            return Err(err(GgufErrorKind::OverlappingTensors {
                first: a.name.clone(),
                second: b.name.clone(),
                first_start: a.offset,
                first_end: a.offset + a.nbytes,
                second_start: b.offset,
            }));
        }
    }

    Ok(GgufHeader {
        file: file.to_path_buf(),
        version,
        metadata,
        tensors,
        alignment,
        data_start,
        data_len,
        key_index,
        tensor_index,
    })
}

/// Byte size of a tensor of `dims` and type `ty`, or why the shape is invalid.
pub fn tensor_nbytes(dims: &[u64], ty: GgmlType) -> Result<u64, String> {
    // The product of the non-zero dims bounds every partial product (also for n_rows,
    // n_elements), so checking it once makes later products overflow-free.
    let mut nonzero: u64 = 1;
    for &d in dims.iter().filter(|&&d| d != 0) {
        nonzero = nonzero
            .checked_mul(d)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| "element count overflows i64".to_string())?;
    }
    let ne0 = dims.first().copied().unwrap_or(1);
    let row = ty
        .row_bytes(ne0)
        .ok_or_else(|| format!("ne0 = {ne0} is not a multiple of the {} block size {}", ty.name(), ty.block_size()))?;
    let rows: u64 = dims.iter().skip(1).product();
    row.checked_mul(rows).filter(|&b| b <= i64::MAX as u64).ok_or_else(|| "byte size overflows i64".to_string())
}

impl GgufHeader {
    fn key_err(&self, kind: GgufErrorKind) -> GgufError {
        GgufError { file: self.file.clone(), offset: None, kind: Box::new(kind) }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The value of `key`, or an error naming the file and key.
    pub fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| self.key_err(GgufErrorKind::MissingKey { key: key.to_string() }))
    }

    fn wrong(&self, key: &str, v: &Value, expected: &str) -> GgufError {
        let found = match v {
            Value::Array { items, .. } => {
                format!("{} of length {}", v.type_description(), items.len())
            }
            Value::String(s) => format!("string {:?}", s.chars().take(40).collect::<String>()),
            other => format!("{} {:?}", other.type_description(), other),
        };
        self.key_err(GgufErrorKind::WrongKeyType { key: key.to_string(), found, expected: expected.to_string() })
    }

    /// An integer key of any width, as u64 (negative values are an error).
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.require(key)?;
        v.as_integer().and_then(|i| u64::try_from(i).ok()).ok_or_else(|| self.wrong(key, v, "a non-negative integer"))
    }

    /// An integer key of any width that fits in u32.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        let v = self.require(key)?;
        v.as_integer()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| self.wrong(key, v, "an integer in 0..=4294967295"))
    }

    /// A float key (F32/F64; integers accepted), as f32.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        let v = self.require(key)?;
        v.as_float().map(|f| f as f32).ok_or_else(|| self.wrong(key, v, "a float"))
    }

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| self.wrong(key, v, "a string"))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| self.wrong(key, v, "a bool"))
    }

    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| self.wrong(key, v, "an array"))
    }

    /// An array of integers (any width) as i64s.
    pub fn get_int_array(&self, key: &str) -> Result<Vec<i64>, GgufError> {
        let v = self.require(key)?;
        v.as_array()
            .and_then(|a| a.iter().map(|x| x.as_integer().and_then(|i| i64::try_from(i).ok())).collect())
            .ok_or_else(|| self.wrong(key, v, "an array of integers"))
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        let v = self.require(key)?;
        v.as_array()
            .and_then(|a| a.iter().map(|x| x.as_str()).collect())
            .ok_or_else(|| self.wrong(key, v, "an array of strings"))
    }

    /// Optional variants: `Ok(None)` when the key is absent, an error when it has the wrong type.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.get(key).map(|_| self.get_u32(key)).transpose()
    }

    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.get(key).map(|_| self.get_f32(key)).transpose()
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.get(key).map(|_| self.get_str(key)).transpose()
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.get(key).map(|_| self.get_bool(key)).transpose()
    }

    /// The tensor-table entry named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Absolute byte range of tensor `name` in the file.
    pub fn tensor_range(&self, name: &str) -> Result<std::ops::Range<usize>, GgufError> {
        let t =
            self.tensor(name).ok_or_else(|| self.key_err(GgufErrorKind::NoSuchTensor { name: name.to_string() }))?;
        // In range by construction (parse_header checked offset + nbytes ≤ data_len).
        let start = (self.data_start + t.offset) as usize;
        Ok(start..start + t.nbytes as usize)
    }
}
