//! The target's weights on the device, each matrix in its GGUF type packed for `qmm`
//! ([`QWeight`]), the MLP's gate and up interleaved for the fused SwiGLU product (a gate/up
//! [`QWeight`]), vectors as f32.
//!
//! Projections that share an input are stacked into one matrix (one `qmm` launch instead of
//! several) when their types have a lossless common type
//! ([`flashtree_quants::common_lossless_type`]: equal types, or Q4_K and Q5_K as Q5_K — a Q4_K
//! block is a Q5_K block with `qh = 0`, bitwise the same values, at 176/144 the bytes):
//!
//! * DeltaNet ([`GdnProj`]): qkv, gate, beta and alpha as one product when every DeltaNet layer's
//!   four have a common type (Q8_0, F16, BF16 files; Q4_K_M, whose qkv is Q5_K and the others
//!   Q4_K, with gate/beta/alpha promoted to Q5_K), else gate, beta and alpha as one.
//! * Attention ([`AttnProj`]): q (with its gate), k and v as one product, else q and k as one
//!   (Q4_K_M's `use_more_bits` layers, whose v is Q6_K), else three.
//!
//! Loading packs tensors on every host core in parallel and uploads them from one thread as
//! they are ready, with a progress bar on stderr; peak host memory is the mapped file plus a
//! few packed tensors in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use cudarc::driver::CudaSlice;
use flashtree_quants::promote::{promote, promoted_len};
use flashtree_quants::{common_lossless_type, dequantize};

use super::EngineError;
use crate::gguf::{GgmlType, Gguf};
use crate::gpu::qmatmul::{qmm_format, qmm_packed_bytes, qmm_swiglu_rows, PackedWeight, QWeight};
use crate::gpu::Gpu;
use crate::model::Qwen35Config;

/// The input projections of a DeltaNet layer: qkv (`[conv_ch, in]`, the conv inputs `mixed`),
/// gate (`[inner, in]`, `z`), beta and alpha (`[n_v, in]` each). Merged matrices stack the raw
/// rows in that order (each part promoted to the common type) before packing, so a product row
/// is the concatenation of the separate products' rows; `qmm` rows are independent, so each row
/// gets its own matrix's arithmetic, except that the K split is chosen from the merged shape
/// (`qmm_ksplit`: see `forward.rs`).
pub enum GdnProj {
    /// All four as one matrix `[conv_ch + inner + 2·n_v, in]`, product rows `[mixed | z | b | a]`
    /// (every DeltaNet layer of the model, so the `mixed` arena has one row stride).
    All(QWeight),
    /// qkv alone; gate, beta and alpha as one matrix `[inner + 2·n_v, in]`, rows `[z | b | a]`.
    Zba { qkv: QWeight, zba: QWeight },
    /// Four matrices.
    Split { qkv: QWeight, gate: QWeight, beta: QWeight, alpha: QWeight },
}

impl GdnProj {
    fn matrices(&self) -> Vec<&QWeight> {
        match self {
            GdnProj::All(w) => vec![w],
            GdnProj::Zba { qkv, zba } => vec![qkv, zba],
            GdnProj::Split { qkv, gate, beta, alpha } => vec![qkv, gate, beta, alpha],
        }
    }

    /// Device bytes of the packed matrices.
    pub fn bytes(&self) -> usize {
        self.matrices().iter().map(|w| w.device_bytes()).sum()
    }
}

/// The input projections of an attention layer: q (`[2·n_head·hd, in]`, per head `[q | gate]`),
/// k and v (`[n_kv·hd, in]` each), stacked like [`GdnProj`]'s.
pub enum AttnProj {
    /// One matrix `[2·n_head·hd + 2·n_kv·hd, in]`, product rows `[q | k | v]`.
    Qkv(QWeight),
    /// q and k as one matrix, product rows `[q | k]`; v alone (v of another type, e.g. Q6_K
    /// beside Q4_K in Q4_K_M's `use_more_bits` layers).
    QkV { qk: QWeight, v: QWeight },
    /// Three matrices.
    Split { q: QWeight, k: QWeight, v: QWeight },
}

impl AttnProj {
    fn matrices(&self) -> Vec<&QWeight> {
        match self {
            AttnProj::Qkv(w) => vec![w],
            AttnProj::QkV { qk, v } => vec![qk, v],
            AttnProj::Split { q, k, v } => vec![q, k, v],
        }
    }

    /// Device bytes of the packed matrices.
    pub fn bytes(&self) -> usize {
        self.matrices().iter().map(|w| w.device_bytes()).sum()
    }
}

/// The lossless common type of the tensors `names` of layer `l` (`None` when one is missing —
/// reported by its own load job — or there is none).
fn common_type(g: &Gguf, l: usize, names: &[&str]) -> Option<GgmlType> {
    let tys: Option<Vec<GgmlType>> = names.iter().map(|s| g.tensor(&format!("blk.{l}.{s}")).map(|t| t.ty)).collect();
    common_lossless_type(&tys?)
}

/// How a layer's projections are merged ([`GdnProj`], [`AttnProj`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Merge {
    /// DeltaNet [`GdnProj::All`], attention [`AttnProj::Qkv`].
    All,
    /// DeltaNet [`GdnProj::Zba`], attention [`AttnProj::QkV`].
    Part,
    Split,
}

const GDN_ZBA: [&str; 3] = ["attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight"];
const GDN_ALL: [&str; 4] = ["attn_qkv.weight", "attn_gate.weight", "ssm_beta.weight", "ssm_alpha.weight"];
const ATTN_QK: [&str; 2] = ["attn_q.weight", "attn_k.weight"];
const ATTN_QKV: [&str; 3] = ["attn_q.weight", "attn_k.weight", "attn_v.weight"];

/// The merge of layer `l` of `cfg` in `g`. DeltaNet: [`Merge::All`] when every DeltaNet layer's
/// four projections have a lossless common type, else [`Merge::Part`] when this layer's gate,
/// beta and alpha have one. Attention: [`Merge::All`] when q, k, v have one, else
/// [`Merge::Part`] when q and k have one.
fn merge_of(cfg: &Qwen35Config, g: &Gguf, l: usize) -> Merge {
    if cfg.is_recurrent(l) {
        if (0..cfg.n_layer()).filter(|&l| cfg.is_recurrent(l)).all(|l| common_type(g, l, &GDN_ALL).is_some()) {
            Merge::All
        } else if common_type(g, l, &GDN_ZBA).is_some() {
            Merge::Part
        } else {
            Merge::Split
        }
    } else if common_type(g, l, &ATTN_QKV).is_some() {
        Merge::All
    } else if common_type(g, l, &ATTN_QK).is_some() {
        Merge::Part
    } else {
        Merge::Split
    }
}

/// The row stride of the DeltaNet `mixed` arena: `conv_ch + inner + 2·n_v` when the layers'
/// four projections are one product ([`GdnProj::All`]), else `conv_ch`.
pub fn gdn_mixed_stride(cfg: &Qwen35Config, g: &Gguf) -> usize {
    let ch = cfg.ssm_conv_channels();
    match (0..cfg.n_layer()).find(|&l| cfg.is_recurrent(l)) {
        Some(l) if merge_of(cfg, g, l) == Merge::All => ch + cfg.ssm_inner_size + 2 * cfg.ssm_time_step_rank,
        _ => ch,
    }
}

/// The mixer of a layer.
pub enum MixerWeights {
    Attention {
        proj: AttnProj,
        o: QWeight,
        q_norm: CudaSlice<f32>,
        k_norm: CudaSlice<f32>,
    },
    DeltaNet {
        proj: GdnProj,
        out: QWeight,
        conv: CudaSlice<f32>,
        dt_bias: CudaSlice<f32>,
        ssm_a: CudaSlice<f32>,
        norm: CudaSlice<f32>,
    },
}

/// One trunk layer.
pub struct LayerWeights {
    pub attn_norm: CudaSlice<f32>,
    pub post_norm: CudaSlice<f32>,
    pub mixer: MixerWeights,
    /// Gate and up interleaved (`QWeight::swiglu`).
    pub gate_up: QWeight,
    pub down: QWeight,
}

impl LayerWeights {
    /// Whether any matrix of the layer has a type for which `pred` holds.
    pub fn uses_type(&self, pred: impl Fn(GgmlType) -> bool) -> bool {
        let mut tys = vec![self.gate_up.ty(), self.down.ty()];
        match &self.mixer {
            MixerWeights::Attention { proj, o, .. } => {
                tys.push(o.ty());
                tys.extend(proj.matrices().iter().map(|w| w.ty()));
            }
            MixerWeights::DeltaNet { proj, out, .. } => {
                tys.push(out.ty());
                tys.extend(proj.matrices().iter().map(|w| w.ty()));
            }
        }
        tys.into_iter().any(pred)
    }
}

/// Every weight of the target.
pub struct TargetWeights {
    /// `token_embd` as stored in the file (rows gathered by the `embed` kernel).
    pub embd_ty: GgmlType,
    pub embd: CudaSlice<u8>,
    pub output_norm: CudaSlice<f32>,
    pub head: QWeight,
    pub layers: Vec<LayerWeights>,
}

/// What one load job produces.
enum Job {
    /// A matrix packed for `qmm`: tensor name, `[out, in]`.
    Matrix(String, usize, usize),
    /// Matrices `[out_t, in]` of types with a lossless common type, each promoted to it
    /// ([`flashtree_quants::promote`]), stacked (rows concatenated in order) and packed as one
    /// `[Σ out_t, in]`: names and `out_t`, `in`.
    Stack(Vec<(String, usize)>, usize),
    /// Gate and up of an MLP: names, `ff`, `in`.
    GateUp(String, String, usize, usize),
    /// A tensor's raw bytes.
    Raw(String),
    /// A float vector as f32.
    Vector(String),
}

enum Packed {
    Matrix(PackedWeight),
    Bytes(Vec<u8>),
    Floats(Vec<f32>),
}

/// Device bytes each matrix takes once packed; the planner's weight line.
pub fn weight_bytes(cfg: &Qwen35Config, g: &Gguf) -> Result<u64, EngineError> {
    let mut total = 0u64;
    for (job, _) in jobs(cfg, g)? {
        total += match &job {
            Job::Matrix(name, out, inp) => packed_len(g, name, *out, *inp)? as u64,
            Job::Stack(parts, inp) => {
                let ty = stack_type(g, parts)?;
                let out = parts.iter().map(|(_, o)| o).sum();
                qmm_packed_bytes(ty, out, *inp).map_err(|e| EngineError::Weights(format!("{}: {e}", parts[0].0)))?
                    as u64
            }
            Job::GateUp(gate, _, ff, inp) => 2 * packed_len(g, gate, qmm_swiglu_rows(*ff) / 2, *inp)? as u64,
            Job::Raw(name) => tensor(g, name)?.1.len() as u64,
            Job::Vector(name) => 4 * g.tensor(name).map(|t| t.n_elements()).unwrap_or(0),
        };
    }
    Ok(total)
}

fn packed_len(g: &Gguf, name: &str, out: usize, inp: usize) -> Result<usize, EngineError> {
    let (ty, _) = tensor(g, name)?;
    qmm_packed_bytes(ty, out, inp).map_err(|e| EngineError::Weights(format!("{name}: {e}")))
}

fn tensor<'g>(g: &'g Gguf, name: &str) -> Result<(GgmlType, &'g [u8]), EngineError> {
    let info = g.tensor(name).ok_or_else(|| EngineError::Weights(format!("tensor {name} is missing")))?;
    let data = g.tensor_data(name).map_err(|e| EngineError::Weights(format!("{name}: {e}")))?;
    Ok((info.ty, data))
}

/// The lossless common type of a stack's parts, or an error naming their types.
fn stack_type(g: &Gguf, parts: &[(String, usize)]) -> Result<GgmlType, EngineError> {
    let mut tys = Vec::with_capacity(parts.len());
    for (name, _) in parts {
        tys.push(tensor(g, name)?.0);
    }
    common_lossless_type(&tys).ok_or_else(|| {
        let list: Vec<String> = parts.iter().zip(&tys).map(|((n, _), t)| format!("{n} is {}", t.name())).collect();
        EngineError::Weights(format!(
            "{}: no lossless common type to stack them as one matrix (equal types, or Q4_K with Q5_K)",
            list.join(", ")
        ))
    })
}

/// The jobs in load order, each with the index of its result slot.
fn jobs(cfg: &Qwen35Config, g: &Gguf) -> Result<Vec<(Job, usize)>, EngineError> {
    let d = cfg.embedding_length;
    let mut v = vec![
        Job::Raw("token_embd.weight".into()),
        Job::Vector("output_norm.weight".into()),
        Job::Matrix(if cfg.has_output { "output.weight" } else { "token_embd.weight" }.into(), cfg.vocab_size, d),
    ];
    let ff = cfg.feed_forward_length;
    for l in 0..cfg.n_layer() {
        let n = |s: &str| format!("blk.{l}.{s}");
        v.push(Job::Vector(n("attn_norm.weight")));
        v.push(Job::Vector(n("post_attention_norm.weight")));
        v.push(Job::GateUp(n("ffn_gate.weight"), n("ffn_up.weight"), ff, d));
        v.push(Job::Matrix(n("ffn_down.weight"), d, ff));
        if cfg.is_recurrent(l) {
            let inner = cfg.ssm_inner_size;
            let vh = cfg.ssm_time_step_rank;
            let qkv = (n("attn_qkv.weight"), cfg.ssm_conv_channels());
            let zba = [(n("attn_gate.weight"), inner), (n("ssm_beta.weight"), vh), (n("ssm_alpha.weight"), vh)];
            match merge_of(cfg, g, l) {
                Merge::All => v.push(Job::Stack([vec![qkv], zba.to_vec()].concat(), d)),
                Merge::Part => {
                    v.push(Job::Matrix(qkv.0, qkv.1, d));
                    v.push(Job::Stack(zba.to_vec(), d));
                }
                Merge::Split => {
                    v.push(Job::Matrix(qkv.0, qkv.1, d));
                    v.extend(zba.into_iter().map(|(name, out)| Job::Matrix(name, out, d)));
                }
            }
            v.push(Job::Matrix(n("ssm_out.weight"), d, inner));
            v.push(Job::Vector(n("ssm_conv1d.weight")));
            v.push(Job::Vector(n("ssm_dt.bias")));
            v.push(Job::Vector(n("ssm_a")));
            v.push(Job::Vector(n("ssm_norm.weight")));
        } else {
            let hd = cfg.key_length;
            let q = (n("attn_q.weight"), 2 * cfg.head_count * hd);
            let k = (n("attn_k.weight"), cfg.head_count_kv * hd);
            let vv = (n("attn_v.weight"), cfg.head_count_kv * cfg.value_length);
            match merge_of(cfg, g, l) {
                Merge::All => v.push(Job::Stack(vec![q, k, vv], d)),
                Merge::Part => {
                    v.push(Job::Stack(vec![q, k], d));
                    v.push(Job::Matrix(vv.0, vv.1, d));
                }
                Merge::Split => v.extend([q, k, vv].into_iter().map(|(name, out)| Job::Matrix(name, out, d))),
            }
            v.push(Job::Matrix(n("attn_output.weight"), d, cfg.head_count * cfg.value_length));
            v.push(Job::Vector(n("attn_q_norm.weight")));
            v.push(Job::Vector(n("attn_k_norm.weight")));
        }
    }
    Ok(v.into_iter().enumerate().map(|(i, j)| (j, i)).collect())
}

fn run_job(g: &Gguf, job: &Job) -> Result<Packed, EngineError> {
    let err = |name: &str, e: &dyn std::fmt::Display| EngineError::Weights(format!("{name}: {e}"));
    let supported = |name: &str, ty: GgmlType| {
        if qmm_format(ty).is_none() {
            return Err(EngineError::Weights(format!(
                "{name} is {}: the GPU matmul supports Q4_K, Q5_K, Q6_K, Q8_0, F16, BF16 and F32",
                ty.name()
            )));
        }
        Ok(())
    };
    Ok(match job {
        Job::Matrix(name, out, inp) => {
            let (ty, raw) = tensor(g, name)?;
            supported(name, ty)?;
            Packed::Matrix(PackedWeight::pack(ty, raw, *out, *inp).map_err(|e| err(name, &e))?)
        }
        Job::Stack(parts, inp) => {
            let (first, _) = &parts[0];
            let ty = stack_type(g, parts)?;
            supported(first, ty)?;
            let mut raw = Vec::new();
            for (name, out) in parts {
                let (t, r) = tensor(g, name)?;
                if t == ty {
                    raw.extend_from_slice(r);
                } else {
                    raw.reserve(promoted_len(t, ty, r.len()));
                    let elements = out.checked_mul(*inp).ok_or_else(|| err(name, &"[out, in] overflows"))?;
                    raw.extend_from_slice(&promote(t, ty, r, elements).map_err(|e| err(name, &e))?);
                }
            }
            let out = parts.iter().map(|(_, o)| o).sum();
            Packed::Matrix(PackedWeight::pack(ty, &raw, out, *inp).map_err(|e| err(first, &e))?)
        }
        Job::GateUp(gate, up, ff, inp) => {
            let (tg, rg) = tensor(g, gate)?;
            let (tu, ru) = tensor(g, up)?;
            if tg != tu {
                return Err(EngineError::Weights(format!(
                    "{gate} is {} but {up} is {}: the fused SwiGLU product needs one type",
                    tg.name(),
                    tu.name()
                )));
            }
            Packed::Matrix(PackedWeight::pack_gate_up(tg, rg, ru, *ff, *inp).map_err(|e| err(gate, &e))?)
        }
        Job::Raw(name) => Packed::Bytes(tensor(g, name)?.1.to_vec()),
        Job::Vector(name) => {
            let (ty, raw) = tensor(g, name)?;
            Packed::Floats(dequantize(ty, raw).map_err(|e| err(name, &e))?)
        }
    })
}

enum Slot {
    Matrix(QWeight),
    Bytes(CudaSlice<u8>),
    Floats(CudaSlice<f32>),
}

/// Packs and uploads every weight of `cfg` from `g`. `progress` is called with (bytes done,
/// bytes total) after each tensor.
pub fn load(
    gpu: &Gpu,
    cfg: &Qwen35Config,
    g: &Gguf,
    mut progress: impl FnMut(u64, u64),
) -> Result<TargetWeights, EngineError> {
    let jobs = jobs(cfg, g)?;
    let total: u64 = g.tensor_bytes();
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 32);
    let next = AtomicUsize::new(0);
    let mut slots: Vec<Option<Slot>> = (0..jobs.len()).map(|_| None).collect();
    let mut done = 0u64;
    std::thread::scope(|s| -> Result<(), EngineError> {
        // Bounded: at most `threads` packed tensors wait for the uploader.
        let (tx, rx) = mpsc::sync_channel::<(usize, Result<Packed, EngineError>)>(threads);
        for _ in 0..threads {
            let tx = tx.clone();
            let (jobs, next) = (&jobs, &next);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((job, slot)) = jobs.get(i) else { break };
                let r = run_job(g, job);
                let failed = r.is_err();
                if tx.send((*slot, r)).is_err() || failed {
                    // On failure stop handing out work: the uploader reports the first error.
                    next.store(jobs.len(), Ordering::Relaxed);
                    break;
                }
            });
        }
        drop(tx);
        for (slot, r) in rx {
            let packed = match r {
                Ok(p) => p,
                Err(e) => {
                    next.store(jobs.len(), Ordering::Relaxed);
                    return Err(e);
                }
            };
            let up = match packed {
                Packed::Matrix(m) => {
                    done += m.bytes().len() as u64;
                    Slot::Matrix(m.upload(gpu)?)
                }
                Packed::Bytes(b) => {
                    done += b.len() as u64;
                    Slot::Bytes(gpu.upload(&b)?)
                }
                Packed::Floats(f) => {
                    done += 4 * f.len() as u64;
                    Slot::Floats(gpu.upload(&f)?)
                }
            };
            slots[slot] = Some(up);
            progress(done.min(total), total);
        }
        Ok(())
    })?;
    let mut next_slot = Slots { it: slots.into_iter(), jobs: jobs.iter().map(|(j, _)| j) };
    let embd = next_slot.bytes()?;
    let output_norm = next_slot.floats()?;
    // Matrices come back with their type and shape from the packing; the slots are taken in
    // job order ([`jobs`]).
    let head = next_slot.matrix()?;
    let mut layers = Vec::with_capacity(cfg.n_layer());
    for l in 0..cfg.n_layer() {
        let attn_norm = next_slot.floats()?;
        let post_norm = next_slot.floats()?;
        let gate_up = next_slot.matrix()?;
        let down = next_slot.matrix()?;
        let mixer = if cfg.is_recurrent(l) {
            MixerWeights::DeltaNet {
                proj: match merge_of(cfg, g, l) {
                    Merge::All => GdnProj::All(next_slot.matrix()?),
                    Merge::Part => GdnProj::Zba { qkv: next_slot.matrix()?, zba: next_slot.matrix()? },
                    Merge::Split => GdnProj::Split {
                        qkv: next_slot.matrix()?,
                        gate: next_slot.matrix()?,
                        beta: next_slot.matrix()?,
                        alpha: next_slot.matrix()?,
                    },
                },
                out: next_slot.matrix()?,
                conv: next_slot.floats()?,
                dt_bias: next_slot.floats()?,
                ssm_a: next_slot.floats()?,
                norm: next_slot.floats()?,
            }
        } else {
            MixerWeights::Attention {
                proj: match merge_of(cfg, g, l) {
                    Merge::All => AttnProj::Qkv(next_slot.matrix()?),
                    Merge::Part => AttnProj::QkV { qk: next_slot.matrix()?, v: next_slot.matrix()? },
                    Merge::Split => {
                        AttnProj::Split { q: next_slot.matrix()?, k: next_slot.matrix()?, v: next_slot.matrix()? }
                    }
                },
                o: next_slot.matrix()?,
                q_norm: next_slot.floats()?,
                k_norm: next_slot.floats()?,
            }
        };
        layers.push(LayerWeights { attn_norm, post_norm, mixer, gate_up, down });
    }
    let embd_ty = g.tensor("token_embd.weight").map(|t| t.ty).unwrap_or(GgmlType::F32);
    Ok(TargetWeights { embd_ty, embd, output_norm, head, layers })
}

/// The loaded slots, taken in job order.
struct Slots<'j, I: Iterator<Item = &'j Job>> {
    it: std::vec::IntoIter<Option<Slot>>,
    jobs: I,
}

impl<'j, I: Iterator<Item = &'j Job>> Slots<'j, I> {
    fn name(&mut self) -> String {
        match self.jobs.next() {
            Some(Job::Matrix(n, ..) | Job::GateUp(n, ..) | Job::Raw(n) | Job::Vector(n)) => n.clone(),
            Some(Job::Stack(parts, _)) => parts.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(" + "),
            None => "a tensor".into(),
        }
    }
    fn matrix(&mut self) -> Result<QWeight, EngineError> {
        let name = self.name();
        match self.it.next().flatten() {
            Some(Slot::Matrix(m)) => Ok(m),
            _ => Err(EngineError::Weights(format!("{name} was not loaded as a matrix"))),
        }
    }
    fn bytes(&mut self) -> Result<CudaSlice<u8>, EngineError> {
        let name = self.name();
        match self.it.next().flatten() {
            Some(Slot::Bytes(b)) => Ok(b),
            _ => Err(EngineError::Weights(format!("{name} was not loaded as bytes"))),
        }
    }
    fn floats(&mut self) -> Result<CudaSlice<f32>, EngineError> {
        let name = self.name();
        match self.it.next().flatten() {
            Some(Slot::Floats(f)) => Ok(f),
            _ => Err(EngineError::Weights(format!("{name} was not loaded as floats"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{synth, QuantMix, SynthOptions, SynthShape};

    /// An 8-layer tiny Q4_K_M target (DeltaNet layers 0–2 and 4–6, attention layers 3 and 7):
    /// `attn_v` is Q6_K in the first attention layer (llama.cpp's `use_more_bits`), Q4_K in the
    /// second; `attn_qkv` is Q5_K, gate/beta/alpha Q4_K.
    fn tiny8(mix: QuantMix) -> (Gguf, Qwen35Config) {
        let dir = std::env::temp_dir().join(format!("flashtree-weights-{}-{}", mix.name(), std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = synth(&SynthOptions {
            shape: SynthShape { n_layer: 8, ..SynthShape::tiny() },
            draft: None,
            mix,
            seed: 3,
            out_dir: dir.clone(),
            name: "tiny8".into(),
            tiktoken: None,
        })
        .unwrap();
        let g = Gguf::open(&out.target).unwrap();
        let cfg = Qwen35Config::from_gguf(&g).unwrap();
        let _ = std::fs::remove_dir_all(&dir); // the file stays mapped
        (g, cfg)
    }

    /// Q4_K_M merges every DeltaNet layer's four projections (gate/beta/alpha promoted to Q5_K),
    /// q + k + v where v is Q4_K and q + k where it is Q6_K; the stacked matrices are counted at
    /// their promoted size.
    #[test]
    fn q4_k_m_merges_deltanet_all_and_attention_qkv_or_qk() {
        let (g, cfg) = tiny8(QuantMix::Q4KM);
        let ty = |s: &str| g.tensor(s).unwrap().ty;
        assert_eq!((ty("blk.3.attn_v.weight"), ty("blk.7.attn_v.weight")), (GgmlType::Q6_K, GgmlType::Q4_K));
        assert_eq!((ty("blk.0.attn_qkv.weight"), ty("blk.0.ssm_beta.weight")), (GgmlType::Q5_K, GgmlType::Q4_K));
        for l in [0, 1, 2, 4, 5, 6] {
            assert_eq!(merge_of(&cfg, &g, l), Merge::All, "DeltaNet layer {l}");
        }
        assert_eq!(merge_of(&cfg, &g, 3), Merge::Part, "q + k, v (Q6_K) alone");
        assert_eq!(merge_of(&cfg, &g, 7), Merge::All, "q + k + v");
        let (ch, inner, vh) = (cfg.ssm_conv_channels(), cfg.ssm_inner_size, cfg.ssm_time_step_rank);
        assert_eq!(gdn_mixed_stride(&cfg, &g), ch + inner + 2 * vh);
        let all = jobs(&cfg, &g).unwrap();
        let stacks: Vec<(GgmlType, usize)> = all
            .iter()
            .filter_map(|(j, _)| match j {
                Job::Stack(parts, _) => Some((stack_type(&g, parts).unwrap(), parts.iter().map(|(_, o)| o).sum())),
                _ => None,
            })
            .collect();
        let (d, hd, kv) = (cfg.embedding_length, cfg.key_length, cfg.head_count_kv * cfg.key_length);
        let qk = 2 * cfg.head_count * hd + kv;
        assert_eq!(stacks.iter().filter(|s| **s == (GgmlType::Q5_K, ch + inner + 2 * vh)).count(), 6);
        assert!(stacks.contains(&(GgmlType::Q4_K, qk)) && stacks.contains(&(GgmlType::Q4_K, qk + kv)), "{stacks:?}");
        // The plan's weight line counts the DeltaNet stack as Q5_K.
        let stacked = qmm_packed_bytes(GgmlType::Q5_K, ch + inner + 2 * vh, d).unwrap() as u64;
        let as_q4k = qmm_packed_bytes(GgmlType::Q4_K, inner + 2 * vh, d).unwrap() as u64;
        assert!(stacked > qmm_packed_bytes(GgmlType::Q5_K, ch, d).unwrap() as u64 + as_q4k);
        let total = weight_bytes(&cfg, &g).unwrap();
        let listed: u64 = all
            .iter()
            .map(|(j, _)| match j {
                Job::Stack(parts, inp) => {
                    qmm_packed_bytes(stack_type(&g, parts).unwrap(), parts.iter().map(|(_, o)| o).sum(), *inp).unwrap()
                        as u64
                }
                _ => 0,
            })
            .sum();
        assert!(listed >= 6 * stacked && total > listed);
    }

    /// One type everywhere (Q8_0): every projection group is one matrix.
    #[test]
    fn one_type_merges_everything() {
        let (g, cfg) = tiny8(QuantMix::Q8_0);
        for l in 0..8 {
            assert_eq!(merge_of(&cfg, &g, l), Merge::All, "layer {l}");
        }
    }
}
