//! A model that is one GGUF file or a set of split shards `<stem>-00001-of-0000N.gguf`
//! (§1.5): each shard is a complete GGUF file; the first carries the model metadata, and every
//! shard carries `split.no` (0-based), `split.count` and `split.tensors.count`.

use super::error::{GgufError, GgufErrorKind};
use super::parse::{GgufHeader, TensorInfo};
use super::reader::GgufFile;
use std::collections::HashMap;
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// One or more shards presented as one tensor namespace. Derefs to the first shard's header
/// for metadata; use [`Gguf::tensor`] / [`Gguf::tensor_data`] / [`Gguf::tensor_infos`] for
/// tensors (they span all shards).
pub struct Gguf {
    shards: Vec<GgufFile>,
    /// (shard, index in that shard's table) in shard order then table order.
    order: Vec<(usize, usize)>,
    by_name: HashMap<String, (usize, usize)>,
}

/// `(stem, no, count)` when `path`'s file name is `<stem>-NNNNN-of-MMMMM.gguf`.
pub fn split_name(path: &Path) -> Option<(String, u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let base = name.strip_suffix(".gguf")?;
    let (rest, count) = base.rsplit_once("-of-")?;
    let (stem, no) = rest.rsplit_once('-')?;
    if no.len() != 5 || count.len() != 5 {
        return None;
    }
    Some((stem.to_string(), no.parse().ok()?, count.parse().ok()?))
}

/// The file name of shard `no` (1-based) of `count`.
pub fn shard_file_name(stem: &str, no: u32, count: u32) -> String {
    format!("{stem}-{no:05}-of-{count:05}.gguf")
}

fn split_err(file: &Path, msg: String) -> GgufError {
    GgufError { file: file.to_path_buf(), offset: None, kind: Box::new(GgufErrorKind::Split(msg)) }
}

impl Gguf {
    /// Opens a single file, or — given any shard of a split set — all shards of the set.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf, GgufError> {
        let path = path.as_ref();
        let paths: Vec<PathBuf> = match split_name(path) {
            Some((stem, _, count)) if count >= 1 => {
                let dir = path.parent().unwrap_or(Path::new(""));
                (1..=count).map(|i| dir.join(shard_file_name(&stem, i, count))).collect()
            }
            _ => vec![path.to_path_buf()],
        };
        let shards = paths.iter().map(GgufFile::open).collect::<Result<Vec<_>, _>>()?;
        Gguf::from_shards(shards)
    }

    /// Assembles already opened shards (in order) and checks their split keys.
    pub fn from_shards(shards: Vec<GgufFile>) -> Result<Gguf, GgufError> {
        let n = shards.len();
        let Some(first) = shards.first() else {
            return Err(split_err(Path::new("<none>"), "no files given".into()));
        };
        let total: usize = shards.iter().map(|s| s.tensors.len()).sum();
        let declared_count = first.opt_u32("split.count")?;
        if n == 1 && declared_count.unwrap_or(1) > 1 {
            return Err(split_err(
                first.path(),
                format!(
                    "this file is shard {} of a {}-file split set, but its name does not follow \
                     <stem>-NNNNN-of-MMMMM.gguf; rename the shards or open them by that pattern",
                    first.opt_u32("split.no")?.unwrap_or(0) + 1,
                    declared_count.unwrap_or(1)
                ),
            ));
        }
        if n > 1 {
            for (i, s) in shards.iter().enumerate() {
                let no = s.get_u32("split.no")?;
                let count = s.get_u32("split.count")?;
                if no as usize != i || count as usize != n {
                    return Err(split_err(
                        s.path(),
                        format!("split.no = {no}, split.count = {count}; expected {i} and {n}"),
                    ));
                }
                let tc = s.get_u64("split.tensors.count")?;
                if tc as usize != total {
                    return Err(split_err(
                        s.path(),
                        format!("split.tensors.count = {tc}, but the {n} shards hold {total} tensors"),
                    ));
                }
            }
        }
        let mut order = Vec::with_capacity(total);
        let mut by_name = HashMap::with_capacity(total);
        for (si, s) in shards.iter().enumerate() {
            for (ti, t) in s.tensors.iter().enumerate() {
                if by_name.insert(t.name.clone(), (si, ti)).is_some() {
                    return Err(GgufError {
                        file: s.path().clone(),
                        offset: None,
                        kind: Box::new(GgufErrorKind::DuplicateTensor { name: t.name.clone() }),
                    });
                }
                order.push((si, ti));
            }
        }
        Ok(Gguf { shards, order, by_name })
    }

    /// The shards, in order.
    pub fn shards(&self) -> &[GgufFile] {
        &self.shards
    }

    /// The path of the first shard.
    pub fn path(&self) -> &Path {
        self.shards[0].path()
    }

    /// Every tensor of every shard, in shard order then table order.
    pub fn tensor_infos(&self) -> impl Iterator<Item = &TensorInfo> {
        self.order.iter().map(|&(s, t)| &self.shards[s].tensors[t])
    }

    /// Number of tensors over all shards.
    pub fn tensor_count(&self) -> usize {
        self.order.len()
    }

    /// The tensor named `name` in any shard.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&(s, t)| &self.shards[s].tensors[t])
    }

    /// The raw bytes of tensor `name` (zero-copy from its shard's map).
    pub fn tensor_data(&self, name: &str) -> Result<&[u8], GgufError> {
        match self.by_name.get(name) {
            Some(&(s, _)) => self.shards[s].tensor_data(name),
            None => Err(GgufError {
                file: self.path().to_path_buf(),
                offset: None,
                kind: Box::new(GgufErrorKind::NoSuchTensor { name: name.to_string() }),
            }),
        }
    }

    /// Total bytes of tensor data over all shards.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensor_infos().map(|t| t.nbytes).sum()
    }
}

impl Deref for Gguf {
    type Target = GgufHeader;
    fn deref(&self) -> &GgufHeader {
        self.shards[0].header()
    }
}
