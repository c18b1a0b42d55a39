//! `flashtree inspect`: what a model file holds and what it will cost in memory — architecture,
//! hyperparameters, per-type tensor counts and bytes, and a memory plan (weights, KV cache per
//! token in F16/Q8_0/Q4_0/TQ3_0, recurrent state, draft). Built as data ([`Report`]) so that the
//! table and JSON renderings are testable.

use crate::gguf::{GgmlType, Gguf};
use crate::model::{DraftModel, Qwen35Config};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Count and bytes of the tensors of one type.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TypeStats {
    pub count: usize,
    pub bytes: u64,
    pub elements: u64,
}

/// KV-cache cost per token for one cache type.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KvCost {
    pub cache_type: &'static str,
    pub bytes_per_token: u64,
    /// Bytes for `context_length` tokens.
    pub bytes_at_context: u64,
}

/// The memory plan of a target (+ draft).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MemoryPlan {
    pub weights_bytes: u64,
    pub context_length: u64,
    pub kv: Vec<KvCost>,
    /// Gated DeltaNet recurrent state (f32) + conv windows (f32), per sequence.
    pub recurrent_state_bytes: u64,
    pub conv_state_bytes: u64,
    pub draft_weights_bytes: Option<u64>,
}

/// Everything `inspect` reports about one model file or folder.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    pub path: PathBuf,
    pub kind: String,
    pub architecture: String,
    pub hyperparameters: Vec<(String, String)>,
    /// Keyed by ggml type name, in type-id order.
    pub tensor_types: BTreeMap<String, TypeStats>,
    pub tensor_count: usize,
    pub tensor_bytes: u64,
    pub parameters: u64,
    pub memory: Option<MemoryPlan>,
}

/// Bytes per 32 KV values of each cache type: F16 64, Q8_0 34, Q4_0 18, TQ3_0 14
/// (anchor-lucebox-dflash.md §6.1).
pub const KV_TYPES: [(&str, u64); 4] = [("F16", 64), ("Q8_0", 34), ("Q4_0", 18), ("TQ3_0", 14)];

fn type_stats<'a>(
    tensors: impl Iterator<Item = (GgmlType, u64, u64)> + 'a,
) -> (BTreeMap<String, TypeStats>, usize, u64, u64) {
    let mut by_id: BTreeMap<u32, (GgmlType, TypeStats)> = BTreeMap::new();
    let (mut n, mut bytes, mut params) = (0, 0, 0);
    for (ty, b, e) in tensors {
        let s = &mut by_id.entry(ty.id()).or_insert((ty, TypeStats::default())).1;
        s.count += 1;
        s.bytes += b;
        s.elements += e;
        n += 1;
        bytes += b;
        params += e;
    }
    let map = by_id.into_values().map(|(t, s)| (t.name().to_string(), s)).collect();
    (map, n, bytes, params)
}

/// The memory plan of a qwen35 target.
pub fn memory_plan(c: &Qwen35Config, weights_bytes: u64, draft_weights_bytes: Option<u64>) -> MemoryPlan {
    let attn_layers = c.attention_layers().len() as u64;
    let gdn_layers = (0..c.n_layer()).filter(|&i| c.is_recurrent(i)).count() as u64;
    let values_per_token =
        attn_layers.saturating_mul(c.head_count_kv as u64).saturating_mul((c.key_length + c.value_length) as u64);
    let ctx = c.context_length as u64;
    let kv = KV_TYPES
        .iter()
        .map(|&(name, per32)| {
            let bpt = values_per_token.saturating_mul(per32) / 32;
            KvCost { cache_type: name, bytes_per_token: bpt, bytes_at_context: bpt.saturating_mul(ctx) }
        })
        .collect();
    let prod = |xs: &[u64]| xs.iter().fold(1u64, |a, &x| a.saturating_mul(x));
    // f32 state [value heads, key dim, value dim] per GDN layer
    let state =
        prod(&[gdn_layers, c.ssm_time_step_rank as u64, c.ssm_state_size as u64, c.ssm_value_head_dim() as u64, 4]);
    // f32 window of the last (kernel − 1) inputs of every conv channel per GDN layer
    let conv = prod(&[gdn_layers, (c.ssm_conv_kernel as u64).saturating_sub(1), c.ssm_conv_channels() as u64, 4]);
    MemoryPlan {
        weights_bytes,
        context_length: ctx,
        kv,
        recurrent_state_bytes: state,
        conv_state_bytes: conv,
        draft_weights_bytes,
    }
}

/// Inspects a GGUF file (any architecture; qwen35 gets the full plan).
pub fn inspect_gguf(path: &Path, draft: Option<&Path>) -> Result<Report> {
    let g = Gguf::open(path)?;
    // a string from the file: escaped and cut before it is shown
    let arch = crate::cli::limits::cut(g.get_str("general.architecture").unwrap_or("<none>"));
    let (tensor_types, tensor_count, tensor_bytes, parameters) =
        type_stats(g.tensor_infos().map(|t| (t.ty, t.nbytes, t.n_elements())));
    let mut hyper = Vec::new();
    let mut memory = None;
    let mut kind = "GGUF".to_string();
    if arch == "qwen35" {
        let c = Qwen35Config::from_gguf(&g)?;
        c.validate(&g)?;
        kind = "qwen35 target (GGUF)".into();
        let attn = c.attention_layers();
        hyper = vec![
            (
                "layers".into(),
                format!(
                    "{} ({} Gated DeltaNet, {} full attention{})",
                    c.n_layer(),
                    c.n_layer() - attn.len(),
                    attn.len(),
                    if c.nextn_predict_layers > 0 {
                        format!(", +{} MTP", c.nextn_predict_layers)
                    } else {
                        String::new()
                    }
                ),
            ),
            ("hidden size".into(), c.embedding_length.to_string()),
            ("feed-forward".into(), c.feed_forward_length.to_string()),
            (
                "attention heads (q / kv × dim)".into(),
                format!("{} / {} × {}", c.head_count, c.head_count_kv, c.key_length),
            ),
            ("rope".into(), format!("{} dims, base {}", c.rope_dimension_count, c.rope_freq_base)),
            (
                "GDN heads (k / v × dim)".into(),
                format!("{} / {} × {}", c.ssm_group_count, c.ssm_time_step_rank, c.ssm_state_size),
            ),
            ("conv kernel".into(), c.ssm_conv_kernel.to_string()),
            ("vocabulary".into(), c.vocab_size.to_string()),
            ("context length".into(), c.context_length.to_string()),
            ("rms eps".into(), format!("{:e}", c.rms_norm_eps)),
            ("lm head".into(), if c.has_output { "output.weight".into() } else { "tied to token_embd".into() }),
        ];
        if let Some(ft) = c.file_type {
            hyper.push(("file type".into(), ft.to_string()));
        }
        let draft_bytes = match draft {
            Some(d) => {
                let dm = DraftModel::open(d)?;
                dm.config.check_target(&c, d)?;
                Some(dm.weight_bytes())
            }
            None => None,
        };
        memory = Some(memory_plan(&c, tensor_bytes, draft_bytes));
    } else if arch == "dflash" {
        let dm = DraftModel::from_dflash_gguf(path)?;
        kind = "DFlash draft (llama.cpp dflash GGUF)".into();
        hyper = draft_hyper(&dm);
    }
    Ok(Report {
        path: path.to_path_buf(),
        kind,
        architecture: arch,
        hyperparameters: hyper,
        tensor_types,
        tensor_count,
        tensor_bytes,
        parameters,
        memory,
    })
}

fn draft_hyper(dm: &DraftModel) -> Vec<(String, String)> {
    let c = &dm.config;
    vec![
        ("layers".into(), c.num_layers.to_string()),
        ("hidden size".into(), c.hidden_size.to_string()),
        ("attention heads (q / kv × dim)".into(), format!("{} / {} × {}", c.num_heads, c.num_kv_heads, c.head_dim)),
        ("feed-forward".into(), c.intermediate_size.to_string()),
        ("target layers".into(), format!("{:?}", c.target_layer_ids)),
        ("block size".into(), c.block_size.to_string()),
        ("mask token".into(), c.mask_token_id.to_string()),
        ("rope theta".into(), c.rope_theta.to_string()),
    ]
}

/// Inspects a z-lab draft folder.
pub fn inspect_draft_dir(dir: &Path) -> Result<Report> {
    let dm = DraftModel::from_zlab_dir(dir)?;
    let inv = dm.config.tensor_inventory();
    let (tensor_types, tensor_count, tensor_bytes, parameters) = type_stats(
        inv.iter().filter_map(|e| dm.tensor(&e.name)).map(|t| (t.ty, t.data.len() as u64, t.ne.iter().product())),
    );
    Ok(Report {
        path: dir.to_path_buf(),
        kind: "DFlash draft (z-lab folder)".into(),
        architecture: "DFlashDraftModel".into(),
        hyperparameters: draft_hyper(&dm),
        tensor_types,
        tensor_count,
        tensor_bytes,
        parameters,
        memory: None,
    })
}

/// Inspects `path`: a GGUF file, a draft folder, or a folder of models (every `*.gguf` — the
/// first shard only of a split set — and every draft folder in it; a draft folder named
/// `<stem>-dflash` is planned together with its target).
pub fn inspect_path(path: &Path) -> Result<Vec<Report>> {
    if path.is_file() {
        return Ok(vec![inspect_gguf(path, None)?]);
    }
    if path.join("config.json").is_file() {
        return Ok(vec![inspect_draft_dir(path)?]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("{}: not a GGUF file or a model folder", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    let drafts: Vec<&PathBuf> = entries.iter().filter(|p| p.join("config.json").is_file()).collect();
    let mut out = Vec::new();
    for p in &entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.ends_with(".gguf") && crate::gguf::split::split_name(p).is_none_or(|(_, no, _)| no == 1) {
            let stem = name.split('-').next().unwrap_or_default();
            let draft = drafts.iter().find(|d| {
                d.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(stem) && n.ends_with("-dflash"))
            });
            out.push(inspect_gguf(p, draft.map(|d| d.as_path()))?);
        }
    }
    for d in drafts {
        out.push(inspect_draft_dir(d)?);
    }
    if out.is_empty() {
        anyhow::bail!("{}: no GGUF files or draft folders found", path.display());
    }
    Ok(out)
}

/// `1234567` → `"1.23 MB (1.18 MiB)"`.
pub fn human_bytes(b: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let (mut v, mut i) = (b as f64, 0);
    while v >= 1000.0 && i < units.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    let bin = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut w, mut j) = (b as f64, 0);
    while w >= 1024.0 && j < bin.len() - 1 {
        w /= 1024.0;
        j += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {} ({w:.2} {})", units[i], bin[j])
    }
}

impl Report {
    /// A readable table.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}", self.path.display());
        let _ = writeln!(s, "  kind          {}", self.kind);
        let _ = writeln!(s, "  architecture  {}", self.architecture);
        for (k, v) in &self.hyperparameters {
            let _ = writeln!(s, "  {k:<32} {v}");
        }
        let _ = writeln!(
            s,
            "  tensors: {} ({} parameters, {})",
            self.tensor_count,
            self.parameters,
            human_bytes(self.tensor_bytes)
        );
        let _ = writeln!(s, "    {:<6} {:>7} {:>16} {:>28}", "type", "count", "elements", "bytes");
        for (t, st) in &self.tensor_types {
            let _ = writeln!(s, "    {:<6} {:>7} {:>16} {:>28}", t, st.count, st.elements, human_bytes(st.bytes));
        }
        if let Some(m) = &self.memory {
            let _ = writeln!(s, "  memory plan (one sequence):");
            let _ = writeln!(s, "    weights                       {}", human_bytes(m.weights_bytes));
            for kv in &m.kv {
                let _ = writeln!(
                    s,
                    "    KV cache {:<6} per token      {:<24} at {} tokens: {}",
                    kv.cache_type,
                    human_bytes(kv.bytes_per_token),
                    m.context_length,
                    human_bytes(kv.bytes_at_context)
                );
            }
            let _ = writeln!(s, "    recurrent state (f32)         {}", human_bytes(m.recurrent_state_bytes));
            let _ = writeln!(s, "    conv windows (f32)            {}", human_bytes(m.conv_state_bytes));
            match m.draft_weights_bytes {
                Some(d) => {
                    let _ = writeln!(s, "    draft weights                 {}", human_bytes(d));
                }
                None => {
                    let _ = writeln!(s, "    draft weights                 (no draft given)");
                }
            }
        }
        s
    }

    /// JSON rendering.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}
