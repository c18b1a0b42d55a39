//! Reading hyperparameters from a JSON `config.json` (HF targets, z-lab drafts) with the same
//! rules as the GGUF readers: every size is an integer inside stated bounds before anything is
//! sized from it, floats are positive and finite, and every error names the file and the key.

use super::error::ModelError;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

/// Largest `config.json` read (real ones are a few KiB; a larger file is not a config).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Reads `path` as a JSON config (at most [`MAX_CONFIG_BYTES`]).
pub fn read_config_text(path: &Path) -> Result<String, ModelError> {
    let io = |e: std::io::Error| ModelError::Io { file: path.to_path_buf(), msg: e.to_string() };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_CONFIG_BYTES {
        return Err(ModelError::config(
            path,
            "config.json",
            format!("{len} bytes; a config is at most {MAX_CONFIG_BYTES} bytes"),
        ));
    }
    std::fs::read_to_string(path).map_err(io)
}

/// A parsed JSON config and the file it came from.
pub struct JsonConfig<'a> {
    pub root: &'a Json,
    pub file: PathBuf,
}

impl<'a> JsonConfig<'a> {
    pub fn new(root: &'a Json, file: &Path) -> Self {
        JsonConfig { root, file: file.to_path_buf() }
    }

    /// The value at `path` (object keys), `None` when absent or `null`.
    pub fn get(&self, path: &[&str]) -> Option<&'a Json> {
        path.iter().try_fold(self.root, |v, k| v.get(k)).filter(|v| !v.is_null())
    }

    /// The first of `paths` that is present.
    pub fn get_any(&self, paths: &[&[&str]]) -> Option<(&'a Json, String)> {
        paths.iter().find_map(|p| self.get(p).map(|v| (v, p.join("."))))
    }

    pub fn err(&self, key: &str, msg: impl Into<String>) -> ModelError {
        ModelError::config(&self.file, key, msg)
    }

    /// An integer in `min..=max` at `path`, `None` when absent.
    pub fn uint_in(&self, path: &[&str], min: u64, max: u64) -> Result<Option<usize>, ModelError> {
        match self.get(path) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if (min..=max).contains(&n) => usize::try_from(n)
                    .map(Some)
                    .map_err(|_| self.err(&path.join("."), format!("{n} does not fit this machine's usize"))),
                _ => Err(self.err(&path.join("."), format!("{} is not an integer in {min}..={max}", short(v)))),
            },
        }
    }

    /// An integer in `1..=max` at `path`, `None` when absent.
    pub fn uint(&self, path: &[&str], max: u64) -> Result<Option<usize>, ModelError> {
        self.uint_in(path, 1, max)
    }

    /// A required integer in `1..=max`.
    pub fn req(&self, path: &[&str], max: u64) -> Result<usize, ModelError> {
        self.uint(path, max)?
            .ok_or_else(|| self.err(&path.join("."), format!("missing (expected an integer in 1..={max})")))
    }

    /// A positive finite number at `path`, `None` when absent.
    pub fn positive(&self, path: &[&str]) -> Result<Option<f64>, ModelError> {
        match self.get(path) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|f| f.is_finite() && *f > 0.0 && (*f as f32).is_finite() && (*f as f32) > 0.0)
                .map(Some)
                .ok_or_else(|| self.err(&path.join("."), format!("{} is not a positive finite number", short(v)))),
        }
    }

    /// A bool at `path`, `None` when absent.
    pub fn bool(&self, path: &[&str]) -> Result<Option<bool>, ModelError> {
        match self.get(path) {
            None => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(&path.join("."), format!("expected true or false, found {}", short(v)))),
        }
    }

    /// An array of at most `max_len` entries at `path`, `None` when absent.
    pub fn array(&self, path: &[&str], max_len: usize) -> Result<Option<&'a [Json]>, ModelError> {
        match self.get(path) {
            None => Ok(None),
            Some(Json::Array(a)) if a.len() <= max_len => Ok(Some(a.as_slice())),
            Some(Json::Array(a)) => {
                Err(self.err(&path.join("."), format!("{} entries, expected at most {max_len}", a.len())))
            }
            Some(v) => Err(self.err(&path.join("."), format!("expected an array, found {}", short(v)))),
        }
    }
}

/// A JSON value for an error message, cut to 60 characters.
pub fn short(v: &Json) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}
