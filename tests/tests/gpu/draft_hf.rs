//! The DFlash draft on the GPU (`engine::DraftEngine`) with the HF fixtures: target `c`
//! (transformers, converted to a BF16 GGUF by flashtree's converter as `engine_hf.rs` does) and its
//! drafts `draft-c-full` (two non-causal full-attention layers, head_dim 32, GQA group 4, taps
//! 1 and 3) and `draft-c-swa` (a causal sliding-window layer with window 384, then a full layer;
//! head_dim 64, GQA group 2, taps 0, 1, 3), both block 16, written by
//! `tools/fixtures/hf/gen_qwen35.py` with expected logits from that script's own PyTorch draft.
//!
//! * The GPU draft's logits for the fixture's block, fed the fixture's features (transformers'
//!   layer outputs of target `c`), are within 2e-3 (relative to the row's largest |logit|) of the
//!   PyTorch logits. Where that bound comes from: the weights are BF16 values both sides (the GPU
//!   packs them exactly; the LM head and embedding are the target's BF16 GGUF tensors, the same
//!   values), so the only differences are the GPU's designed roundings — every matmul input
//!   rounded to f16 (relative 2⁻¹¹ ≈ 4.9e-4 per element, independent signs, so a dot product of
//!   K terms moves by ≈ 2⁻¹¹/√3 of its size) and the context/block K and V stored as f16 (the same
//!   2⁻¹¹ on each key and value: scores move by ≈ 2⁻¹¹ of |q·k|, the output by ≈ 2⁻¹¹ of |v|) —
//!   plus f32 accumulation orders (≈ 1e-7). Through the two layers, the final norm and the head,
//!   that is a few 2⁻¹¹ at most, inside 2e-3 (≈ 4 × 2⁻¹¹); a wrong mask, position, tap or weight
//!   gives errors of order 1. The f16 matmul inputs alone put the CPU reference draft
//!   (`with_device_rounding`) 7.3e-4 / 8.0e-4 from PyTorch (measured on the CPU by
//!   `hf_drafts_device_rounding_reference_is_near_pytorch`, bounded there by 1.5e-3); the GPU must
//!   also be within 2e-3 of that reference, as on the tiny pair (`draft.rs`).
//! * Greedy speculation with the GPU draft (`tree`, `chain`, `anchor-tree`, budgets 1, 4, 22, 32)
//!   emits exactly GPU AR's tokens: 200 tokens after the fixture's first 40 tokens (context 320 =
//!   40 + 200 + a tree of 32, rounded up; `draft-c-swa`'s window covers 384 − 16 = 368 rows, which
//!   the GPU draft needs for a context of 320).
//! * A deliberately broken rollback (`CommitFault::DeltaNetFromRejectedSibling`) makes that
//!   comparison fail with each draft.

use std::ops::ControlFlow;
use std::path::PathBuf;

use flashtree::convert::out_type::OutType;
use flashtree::engine::{CommitFault, DraftEngine, Engine, GpuDraft, GpuTarget};
use flashtree::gguf::Gguf;
use flashtree::model::{DraftModel, Qwen35Config};
use flashtree::spec::{generate, DecodingRule, GenerateConfig, Mode, OracleDraft};
use flashtree_reference::model::tensor::with_device_rounding;
use flashtree_tests::gpu::gpu_or_skip;

use super::engine::rel_err;
use super::engine_hf::{convert, expected, hf_targets, loud, rows, tokens, Converted, HfTarget};

/// The HF target the drafts were made for.
const TARGET: &str = "c";
/// Its drafts (`tests/fixtures/hf/<name>`).
const DRAFTS: [&str; 2] = ["draft-c-full", "draft-c-swa"];
/// Draft logits vs the PyTorch draft and vs the device-rounding reference (module doc).
const TOL: f64 = 2e-3;
/// Prompt: the target fixture's first tokens.
const PROMPT: usize = 40;
/// Tokens generated per run (the issue asks for ≥ 200).
const GENERATE: usize = 200;
/// Engine and draft context: prompt + generated + a tree of 32, rounded up.
const CTX: usize = 320;

fn draft_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf").join(name)
}

/// Target `c` as a BF16 GGUF (the checkpoint's exact values) and the engine on it.
fn target(test: &str) -> (HfTarget, Converted, Engine) {
    let t = hf_targets()
        .into_iter()
        .find(|t| t.name == TARGET)
        .unwrap_or_else(|| panic!("HF fixture {TARGET} is missing or no longer has shapes the GPU kernels take"));
    let gguf = convert(&t, OutType::BF16, test);
    let gpu = flashtree::gpu::Gpu::try_new().expect("gpu");
    let g = Gguf::open(&gguf.path).expect("open the converted GGUF");
    let cfg = Qwen35Config::from_gguf(&g).expect("config");
    let e = Engine::load(gpu, &g, cfg, CTX, |_, _| {}).unwrap_or_else(|err| panic!("fixture {TARGET}: {err}"));
    (t, gguf, e)
}

/// The GPU draft `name` over the engine `e` (context [`CTX`]).
fn gpu_draft(e: &Engine, name: &str) -> (DraftModel, DraftEngine) {
    let model = DraftModel::open(&draft_dir(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
    let d = DraftEngine::load(e.gpu.clone(), e.weights(), &e.cfg, &model, CTX)
        .unwrap_or_else(|err| panic!("{name}: the GPU draft does not load: {err}"));
    (model, d)
}

/// A draft fixture's block: the target features of tokens `0..start`, the block
/// `[bonus, MASK × (B − 1)]` at `start`, and the PyTorch logits of slots `1..B`.
struct DraftCase {
    feats: Vec<Vec<f32>>,
    block: Vec<u32>,
    start: usize,
    want: Vec<Vec<f32>>,
}

fn draft_case(name: &str, block_size: usize) -> DraftCase {
    let exp = expected(&draft_dir(name));
    let feats = rows(&exp, "features");
    let block: Vec<u32> = exp.read_i64("block_tokens").expect("block_tokens").iter().map(|&t| t as u32).collect();
    let start = exp.read_i64("block_start").expect("block_start")[0] as usize;
    let want = rows(&exp, "logits");
    assert_eq!((feats.len(), block.len(), want.len()), (start, block_size, block_size - 1), "{name}: fixture shapes");
    DraftCase { feats, block, start, want }
}

/// The reference draft's logits for the fixture's block on the reference target `cpu`, with the
/// GPU's f16 rounding of matmul inputs (`with_device_rounding`) or exact.
fn reference_logits(
    dw: &flashtree_reference::model::dflash::DFlashWeights,
    cpu: &flashtree_reference::model::Qwen35Weights,
    c: &DraftCase,
    device_rounding: bool,
) -> Vec<Vec<f32>> {
    let run =
        || dw.forward(&cpu.token_embd, cpu.lm_head(), &c.feats, 0, &c.block, c.start).expect("reference draft").logits;
    if device_rounding {
        with_device_rounding(run)
    } else {
        run()
    }
}

/// CPU-only: the budget behind the GPU's 2e-3. The reference draft on the converted target
/// reproduces the PyTorch draft (exact arithmetic: ≤ 1e-4), and with the GPU's f16 rounding of
/// every matmul input it stays within 1.5e-3 of it (measured: 7.3e-4 on `draft-c-full`, 8.0e-4
/// on `draft-c-swa`; an f16 emulation in PyTorch that also rounds the K/V to f16 gives 9.0e-4 and
/// 1.1e-3), which leaves ≥ 5e-4 for the f16 K/V cache and the GPU's f32 summation orders.
#[test]
fn hf_drafts_device_rounding_reference_is_near_pytorch() {
    let t = hf_targets().into_iter().find(|t| t.name == TARGET).expect("HF fixture c");
    let gguf = convert(&t, OutType::BF16, "draft-budget");
    let cpu = flashtree::convert::gguf_load::load_qwen35(&gguf.path).expect("reference target loads");
    for name in DRAFTS {
        let (_, dw) = flashtree::convert::dflash::load_draft(&draft_dir(name)).expect("reference draft loads");
        let c = draft_case(name, dw.hparams.block_size);
        let worst = |got: &[Vec<f32>]| got.iter().zip(&c.want).map(|(a, b)| rel_err(a, b)).fold(0f64, f64::max);
        let (exact, emulated) =
            (worst(&reference_logits(&dw, &cpu, &c, false)), worst(&reference_logits(&dw, &cpu, &c, true)));
        loud(&format!(
            "{name}: the reference draft is within {exact:.2e} of the PyTorch draft, {emulated:.2e} with the GPU's \
             f16 matmul inputs"
        ));
        assert!(exact <= 1e-4, "{name}: the exact reference draft is {exact:e} from the PyTorch draft");
        assert!(
            emulated <= 1.5e-3,
            "{name}: the device-rounding reference draft is {emulated:e} from the PyTorch draft"
        );
    }
}

#[test]
fn gpu_draft_logits_match_the_pytorch_draft_on_the_hf_fixtures() {
    let test = "gpu_draft_logits_match_the_pytorch_draft_on_the_hf_fixtures";
    let Some(_) = gpu_or_skip(test) else { return };
    let (_t, gguf, e) = target(test);
    let cpu = flashtree::convert::gguf_load::load_qwen35(&gguf.path).expect("reference target loads");
    let vocab = e.cfg.vocab_size;
    for name in DRAFTS {
        let (_, mut d) = gpu_draft(&e, name);
        let (_, dw) = flashtree::convert::dflash::load_draft(&draft_dir(name)).expect("reference draft loads");
        let c = draft_case(name, dw.hparams.block_size);
        assert_eq!(c.feats[0].len(), d.feature_len(), "{name}: feature row length");

        d.reset();
        d.extend_context(&c.feats.concat()).unwrap();
        assert_eq!(d.context_len(), c.start);
        let (tok, _) = d.propose(c.block[0], 4).unwrap();
        let got = d.last_logits().unwrap();
        assert_eq!(got.len(), c.want.len() * vocab, "{name}: logits of slots 1..B");
        let emulated = reference_logits(&dw, &cpu, &c, true);
        let (mut worst, mut worst_emu) = (0f64, 0f64);
        for (r, row) in got.chunks(vocab).enumerate() {
            assert!(row.iter().all(|x| x.is_finite()), "{name}: slot {}: non-finite logits", r + 1);
            let (err, emu) = (rel_err(row, &c.want[r]), rel_err(row, &emulated[r]));
            assert!(err <= TOL, "{name}: slot {}: error {err:.3e} vs the PyTorch draft", r + 1);
            assert!(emu <= TOL, "{name}: slot {}: error {emu:.3e} vs the device-rounding reference", r + 1);
            (worst, worst_emu) = (worst.max(err), worst_emu.max(emu));
            let best =
                row.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
            assert_eq!(tok[r * 4], best.0 as u32, "{name}: slot {} top-1", r + 1);
        }
        loud(&format!(
            "{name} on the GPU, block at {}: logits within {worst:.2e} of the PyTorch draft, {worst_emu:.2e} of the \
             device-rounding reference",
            c.start
        ));
    }
}

#[test]
fn gpu_spec_with_the_hf_drafts_equals_gpu_ar() {
    let test = "gpu_spec_with_the_hf_drafts_equals_gpu_ar";
    let Some(_) = gpu_or_skip(test) else { return };
    let (t, _gguf, mut e) = target(test);
    let toks = tokens(&expected(&t.dir));
    let prompt = &toks[..PROMPT];
    let cfg =
        |mode, budget| GenerateConfig { mode, budget, max_tokens: GENERATE, eos: vec![], rule: DecodingRule::Greedy };
    let go = |_: &[u32]| ControlFlow::Continue(());
    let (ar, _) = generate(&mut GpuTarget::new(&mut e), None::<&mut GpuDraft>, prompt, &cfg(Mode::Ar, 0), go).unwrap();
    assert_eq!(ar.len(), GENERATE);
    for name in DRAFTS {
        let (model, d) = gpu_draft(&e, name);
        let layers = model.config.target_layer_ids.clone();
        let source = GpuTarget::with_capture(&mut e, &layers).unwrap().feature_source().unwrap();
        let mut draft = GpuDraft::new(d, source).unwrap();
        for mode in [Mode::Tree, Mode::Chain, Mode::AnchorTree] {
            for budget in [1, 4, 22, 32] {
                let mut target = GpuTarget::with_capture(&mut e, &layers).unwrap();
                let (out, stats) = generate(&mut target, Some(&mut draft), prompt, &cfg(mode, budget), go)
                    .unwrap_or_else(|err| panic!("{name} {mode:?} budget {budget}: {err}"));
                assert_eq!(out, ar, "{name} {mode:?} budget {budget}: output with the GPU draft differs from GPU AR");
                loud(&format!(
                    "{name} {mode:?} budget {budget}: {GENERATE} tokens equal to GPU AR; acceptance length {:.3}",
                    stats.acceptance_length()
                ));
            }
        }
    }
}

/// As `draft.rs`'s test on the tiny pair: the oracle (3 recorded tokens per round around the GPU
/// draft) gives deep accepted paths whose last node has rejected siblings; keeping such a
/// sibling's DeltaNet state must change the output, and the same run without the fault must not.
#[test]
fn a_broken_deltanet_rollback_makes_the_hf_tree_output_differ_from_ar() {
    let test = "a_broken_deltanet_rollback_makes_the_hf_tree_output_differ_from_ar";
    let Some(_) = gpu_or_skip(test) else { return };
    let (t, _gguf, mut e) = target(test);
    let toks = tokens(&expected(&t.dir));
    let prompt = &toks[..PROMPT];
    let cfg =
        |mode, budget| GenerateConfig { mode, budget, max_tokens: GENERATE, eos: vec![], rule: DecodingRule::Greedy };
    let go = |_: &[u32]| ControlFlow::Continue(());
    let (ar, _) = generate(&mut GpuTarget::new(&mut e), None::<&mut GpuDraft>, prompt, &cfg(Mode::Ar, 0), go).unwrap();
    let seq: Vec<u32> = prompt.iter().chain(&ar).copied().collect();
    for name in DRAFTS {
        let (model, d) = gpu_draft(&e, name);
        let layers = model.config.target_layer_ids.clone();
        let source = GpuTarget::with_capture(&mut e, &layers).unwrap().feature_source().unwrap();
        let mut draft = GpuDraft::new(d, source).unwrap();
        for fault in [None, Some(CommitFault::DeltaNetFromRejectedSibling)] {
            e.set_commit_fault(fault).unwrap();
            let mut target = GpuTarget::with_capture(&mut e, &layers).unwrap();
            let mut oracle = OracleDraft::new(&mut draft, seq.clone(), 3);
            let (out, stats) = generate(&mut target, Some(&mut oracle), prompt, &cfg(Mode::Tree, 22), go).unwrap();
            let first_diff = out.iter().zip(&ar).position(|(a, b)| a != b);
            loud(&format!(
                "{name}, fault {fault:?}: acceptance length {:.2}, first token differing from AR: {first_diff:?}",
                stats.acceptance_length()
            ));
            match fault {
                None => {
                    assert_eq!(out, ar, "{name}: without a fault the tree output must equal AR");
                    assert!(stats.acceptance_length() >= 3.5, "{name}: the oracle should accept ≈ 4 per round");
                }
                Some(_) => assert!(first_diff.is_some(), "{name}: a broken DeltaNet rollback went unnoticed"),
            }
        }
        e.set_commit_fault(None).unwrap();
    }
}
