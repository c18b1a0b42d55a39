//! HF `tokenizer.json` (+ `tokenizer_config.json`, `chat_template.jinja`) → GGUF `tokenizer.*`
//! metadata for a byte-level BPE (`gpt2`) vocabulary (gguf-format-and-quants.md §6).

use super::ConvertError;
use crate::gguf::{GgufWriter, Value, ValueType};
use serde_json::Value as Json;
use std::path::Path;

const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

fn read_json(path: &Path) -> Result<Option<Json>, ConvertError> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConvertError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ConvertError::Config { path: path.to_path_buf(), why: e.to_string() })
}

/// Adds `tokenizer.ggml.*` (and `tokenizer.chat_template`) when `dir/tokenizer.json` exists;
/// does nothing otherwise. The token list is padded to `n_vocab` with `[PAD<id>]` (UNUSED).
pub fn add_tokenizer_metadata(w: &mut GgufWriter, dir: &Path, n_vocab: usize) -> Result<(), ConvertError> {
    let tj_path = dir.join("tokenizer.json");
    let Some(tj) = read_json(&tj_path)? else {
        return Ok(());
    };
    let bad = |why: String| ConvertError::Config { path: tj_path.clone(), why };
    let model = tj.get("model").ok_or_else(|| bad("no `model`".into()))?;
    if model.get("type").and_then(Json::as_str) != Some("BPE") {
        return Err(bad("only BPE tokenizers are converted".into()));
    }
    let vocab = model.get("vocab").and_then(Json::as_object).ok_or_else(|| bad("no `model.vocab`".into()))?;
    let mut tokens: Vec<Option<String>> = vec![None; n_vocab];
    let mut types = vec![UNUSED; n_vocab];
    let mut place = |tok: &str, id: u64, ty: i32| -> Result<(), ConvertError> {
        let i = usize::try_from(id)
            .ok()
            .filter(|&i| i < n_vocab)
            .ok_or_else(|| bad(format!("token {tok:?} has id {id} ≥ vocab_size {n_vocab}")))?;
        tokens[i] = Some(tok.to_string());
        types[i] = ty;
        Ok(())
    };
    for (tok, id) in vocab {
        place(tok, id.as_u64().ok_or_else(|| bad(format!("token {tok:?}: id is not an integer")))?, NORMAL)?;
    }
    for at in tj.get("added_tokens").and_then(Json::as_array).map(Vec::as_slice).unwrap_or(&[]) {
        let (Some(tok), Some(id)) = (at.get("content").and_then(Json::as_str), at.get("id").and_then(Json::as_u64))
        else {
            return Err(bad("added token without content/id".into()));
        };
        let special = at.get("special").and_then(Json::as_bool).unwrap_or(false);
        place(tok, id, if special { CONTROL } else { USER_DEFINED })?;
    }
    let tokens: Vec<String> =
        tokens.into_iter().enumerate().map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]"))).collect();
    let merges: Vec<String> = model
        .get("merges")
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .map(|m| match m {
            Json::String(s) => Ok(s.clone()),
            Json::Array(p) if p.len() == 2 => match (p[0].as_str(), p[1].as_str()) {
                (Some(a), Some(b)) => Ok(format!("{a} {b}")),
                _ => Err(bad("merge pair is not two strings".into())),
            },
            _ => Err(bad("merge is neither \"a b\" nor [a, b]".into())),
        })
        .collect::<Result<_, _>>()?;
    let id_of = |s: &str| tokens.iter().position(|t| t == s).map(|i| i as u32);
    w.set("tokenizer.ggml.model", Value::String("gpt2".into()));
    w.set("tokenizer.ggml.pre", Value::String("qwen35".into()));
    w.set("tokenizer.ggml.tokens", Value::string_array(tokens.iter().cloned()));
    w.set(
        "tokenizer.ggml.token_type",
        Value::Array { elem: ValueType::I32, items: types.into_iter().map(Value::I32).collect() },
    );
    w.set("tokenizer.ggml.merges", Value::string_array(merges));
    let tc = read_json(&dir.join("tokenizer_config.json"))?;
    let tok_str = |key: &str| -> Option<String> {
        let v = tc.as_ref()?.get(key)?;
        v.as_str().map(str::to_string).or_else(|| v.get("content").and_then(Json::as_str).map(str::to_string))
    };
    for (key, gguf) in [("eos_token", "eos_token_id"), ("bos_token", "bos_token_id"), ("pad_token", "padding_token_id")]
    {
        if let Some(id) = tok_str(key).and_then(|s| id_of(&s)) {
            w.set(format!("tokenizer.ggml.{gguf}"), Value::U32(id));
        }
    }
    w.set("tokenizer.ggml.add_bos_token", Value::Bool(false));
    let template = match std::fs::read_to_string(dir.join("chat_template.jinja")) {
        Ok(t) => Some(t),
        Err(_) => tok_str("chat_template"),
    };
    if let Some(t) = template {
        w.set("tokenizer.chat_template", Value::String(t));
    }
    Ok(())
}
