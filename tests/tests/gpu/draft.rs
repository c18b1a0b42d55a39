//! The DFlash draft on the GPU (`engine::DraftEngine`) against the reference draft on the tiny
//! synthetic pair, fed with the same target features (the GPU engine's layer taps).
//!
//! Tolerance of the logits (relative to the row's largest |logit|): the GPU draft rounds every
//! matmul input to f16 (2⁻¹¹ relative) and stores its context and block K/V as f16. The reference
//! run inside `with_device_rounding` applies the first of these; the f16 K/V (2⁻¹¹ relative on
//! each key and value) moves the attention output by about that much of |v|, so the GPU must
//! match within 2e-3 (the bound), as the target engine does; a wrong kernel or a wrong
//! position, mask or weight shows up as errors of order 1.

use super::engine::{engine, rel_err, tiny, tokens};
use flashtree::engine::{ContextKv, DraftEngine, GpuDraft, GpuTarget};
use flashtree::model::DraftModel;
use flashtree::spec::{generate, DecodingRule, FeatureSource, GenerateConfig, HostDraft, Mode, Target};
use flashtree_reference::model::tensor::with_device_rounding;
use std::ops::ControlFlow;

/// The tiny pair: the GPU engine (context `ctx`), the GPU draft over it, the reference draft.
pub(crate) fn pair(
    test: &str,
    ctx: usize,
) -> Option<(flashtree::engine::Engine, DraftEngine, flashtree_reference::model::dflash::DFlashWeights)> {
    pair_with(test, ctx, ContextKv::AllLayers)
}

/// [`pair`] with the draft's context k/v computed as `layout` says.
fn pair_with(
    test: &str,
    ctx: usize,
    layout: ContextKv,
) -> Option<(flashtree::engine::Engine, DraftEngine, flashtree_reference::model::dflash::DFlashWeights)> {
    let e = engine(test, ctx)?;
    let t = tiny();
    let (_, dw) = flashtree::convert::dflash::load_draft(&t.draft).expect("draft loads");
    let model = DraftModel::open(&t.draft).expect("draft opens");
    let d = DraftEngine::load_with(e.gpu.clone(), e.weights(), &e.cfg, &model, ctx, layout).expect("GPU draft loads");
    Some((e, d, dw))
}

/// Prompts of 1–300 tokens: the draft's logits for the block after the prompt match the
/// reference draft's on the same features, and appending the context in other chunkings gives
/// bitwise the same logits — with every layer's context k/v in one product (the tiny draft's
/// types allow it) and with one product per layer.
#[test]
fn gpu_draft_logits_match_the_reference_draft() {
    draft_logits_match_the_reference("gpu_draft_logits_match_the_reference_draft", ContextKv::AllLayers, true);
}

#[test]
fn gpu_draft_logits_match_the_reference_draft_with_per_layer_context_kv() {
    let test = "gpu_draft_logits_match_the_reference_draft_with_per_layer_context_kv";
    draft_logits_match_the_reference(test, ContextKv::PerLayer, false);
}

fn draft_logits_match_the_reference(test: &str, layout: ContextKv, stacked: bool) {
    let Some((mut e, mut d, dw)) = pair_with(test, 512, layout) else {
        return;
    };
    assert_eq!(d.context_kv_stacked(), stacked, "{layout:?}: context k/v in one product");
    let t = tiny();
    let layers = dw.hparams.target_layer_ids.clone();
    let vocab = e.cfg.vocab_size;
    let bs = dw.hparams.block_size;
    for (case, len) in [1usize, 2, 17, 33, 120, 300].into_iter().enumerate() {
        let prompt = tokens(900 + case as u64, len, vocab);
        let (bonus, features) = {
            let mut target = GpuTarget::with_capture(&mut e, &layers).unwrap();
            let (bonus, h) = target.prefill(&prompt, DecodingRule::Greedy).unwrap();
            (bonus, target.feature_source().unwrap().host_rows(&h).unwrap())
        };
        assert_eq!(features.len(), len);
        let mut block = vec![dw.hparams.mask_token_id; bs];
        block[0] = bonus;
        let fwd = || dw.forward(&t.cpu.token_embd, t.cpu.lm_head(), &features, 0, &block, len).unwrap();
        let want = with_device_rounding(fwd);
        let exact = fwd();

        d.reset();
        d.extend_context(&features.concat()).unwrap();
        assert_eq!(d.context_len(), len);
        let (tok, lp) = d.propose(bonus, 4).unwrap();
        let got = d.last_logits().unwrap();
        assert_eq!(tok.len(), (bs - 1) * 4);
        assert!(lp.iter().all(|x| x.is_finite() && *x <= 0.0), "log-probs {lp:?}");
        let (mut worst, mut worst_exact) = (0f64, 0f64);
        for (r, row) in got.chunks(vocab).enumerate() {
            let err = rel_err(row, &want.logits[r]);
            worst = worst.max(err);
            worst_exact = worst_exact.max(rel_err(row, &exact.logits[r]));
            assert!(err <= 2e-3, "prompt of {len}: drafted position {} off by {err:.3e} of the row's max", r + 1);
            // The top-1 of each row is the row's argmax.
            let best =
                row.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
            assert_eq!(tok[r * 4], best.0 as u32, "prompt of {len}: row {r} top-1");
        }
        eprintln!(
            "prompt of {len}: GPU draft logits within {worst:.2e} of the device-rounding reference, {worst_exact:.2e} of the exact one"
        );

        // Other chunkings of the same context rows: bitwise the same block.
        let flat = features.concat();
        let fl = d.feature_len();
        for piece in [1usize, 7, 32] {
            d.reset();
            for rows in flat.chunks(piece * fl) {
                d.extend_context(rows).unwrap();
            }
            d.propose(bonus, 4).unwrap();
            let again = d.last_logits().unwrap();
            assert!(
                again.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                "prompt of {len}: context appended {piece} rows at a time gives other logits"
            );
        }
    }
}

/// Greedy speculation with the draft on the GPU (target and draft both on the device) emits
/// exactly the GPU's greedy AR tokens at budgets 1, 4, 22, 32 and 48, chain and anchor tree, 210
/// tokens each; the acceptance length is printed beside the CPU draft's.
#[test]
fn gpu_spec_with_the_gpu_draft_equals_gpu_ar() {
    let Some((mut e, d, dw)) = pair("gpu_spec_with_the_gpu_draft_equals_gpu_ar", 512) else {
        return;
    };
    let t = tiny();
    let layers = dw.hparams.target_layer_ids.clone();
    let prompt = tokens(41, 11, e.cfg.vocab_size);
    let n = 210;
    let cfg = |mode, budget| GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
    let go = |_: &[u32]| ControlFlow::Continue(());
    let (ar, _) = generate(&mut GpuTarget::new(&mut e), None::<&mut GpuDraft>, &prompt, &cfg(Mode::Ar, 0), go).unwrap();
    assert_eq!(ar.len(), n);
    let source = GpuTarget::with_capture(&mut e, &layers).unwrap().feature_source().unwrap();
    let mut draft = GpuDraft::new(d, source).unwrap();
    for (mode, budget) in [
        (Mode::Tree, 1),
        (Mode::Tree, 4),
        (Mode::Tree, 22),
        (Mode::Tree, 32),
        (Mode::Tree, 48),
        (Mode::Chain, 22),
        (Mode::AnchorTree, 22),
    ] {
        let mut target = GpuTarget::with_capture(&mut e, &layers).unwrap();
        let (out, stats) = generate(&mut target, Some(&mut draft), &prompt, &cfg(mode, budget), go).unwrap();
        assert_eq!(out, ar, "{mode:?} budget {budget}: output with the GPU draft differs from GPU AR");
        let mut target = GpuTarget::with_capture(&mut e, &layers).unwrap();
        let mut cpu =
            HostDraft::new(flashtree::spec::cpu::CpuDraft::new(&dw, &t.cpu), target.feature_source().unwrap());
        let (_, cpu_stats) = generate(&mut target, Some(&mut cpu), &prompt, &cfg(mode, budget), go).unwrap();
        eprintln!(
            "{mode:?} budget {budget}: {n} tokens equal to AR; acceptance length {:.3} (GPU draft), {:.3} (CPU draft)",
            stats.acceptance_length(),
            cpu_stats.acceptance_length()
        );
    }
}

/// A deliberately broken rollback — every commit advances the DeltaNet state along a rejected
/// sibling of the last accepted node — makes the GPU tree output differ from GPU AR, while the
/// same run without the fault equals it. Deep accepted paths with siblings come from
/// `spec::OracleDraft` (3 recorded tokens per round around the GPU draft).
#[test]
fn a_broken_deltanet_rollback_makes_the_tree_output_differ_from_ar() {
    use flashtree::engine::CommitFault;
    use flashtree::spec::OracleDraft;
    let Some((mut e, d, dw)) = pair("a_broken_deltanet_rollback_makes_the_tree_output_differ_from_ar", 512) else {
        return;
    };
    let layers = dw.hparams.target_layer_ids.clone();
    let prompt = tokens(77, 9, e.cfg.vocab_size);
    let n = 160;
    let cfg = |mode, budget| GenerateConfig { mode, budget, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy };
    let go = |_: &[u32]| ControlFlow::Continue(());
    let (ar, _) = generate(&mut GpuTarget::new(&mut e), None::<&mut GpuDraft>, &prompt, &cfg(Mode::Ar, 0), go).unwrap();
    let seq: Vec<u32> = prompt.iter().chain(&ar).copied().collect();
    let source = GpuTarget::with_capture(&mut e, &layers).unwrap().feature_source().unwrap();
    let mut draft = GpuDraft::new(d, source).unwrap();
    for fault in [None, Some(CommitFault::DeltaNetFromRejectedSibling)] {
        e.set_commit_fault(fault).unwrap();
        let mut target = GpuTarget::with_capture(&mut e, &layers).unwrap();
        let mut oracle = OracleDraft::new(&mut draft, seq.clone(), 3);
        let (out, stats) = generate(&mut target, Some(&mut oracle), &prompt, &cfg(Mode::Tree, 22), go).unwrap();
        let first_diff = out.iter().zip(&ar).position(|(a, b)| a != b);
        eprintln!(
            "fault {fault:?}: acceptance length {:.2}, first token differing from AR: {first_diff:?}",
            stats.acceptance_length()
        );
        match fault {
            None => {
                assert_eq!(out, ar, "without a fault the tree output must equal AR");
                assert!(stats.acceptance_length() >= 3.5, "the oracle should accept ≈ 4 per round");
            }
            Some(_) => assert!(first_diff.is_some(), "a broken DeltaNet rollback went unnoticed"),
        }
    }
    e.set_commit_fault(None).unwrap();
}

/// A draft with a sliding-window layer (the tiny draft's config with `layer_types` =
/// `[sliding_attention, full_attention]`, window 64): the sliding layer attends causally inside
/// the block and, for a block slot at position `p`, only the context rows at positions `> p − 64`:
/// the GPU logits match the reference (which applies the causal mask and the window) for contexts
/// inside and well past the window; a window under 32 keys is refused.
#[test]
fn gpu_draft_with_a_sliding_layer_matches_the_reference() {
    let test = "gpu_draft_with_a_sliding_layer_matches_the_reference";
    let Some(mut e) = engine(test, 192) else {
        return;
    };
    let t = tiny();
    let dir = std::env::temp_dir().join(format!("flashtree-draft-swa-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(&t.draft).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let cfg_path = dir.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["layer_types"] = serde_json::json!(["sliding_attention", "full_attention"]);
    cfg["sliding_window"] = serde_json::json!(64);
    cfg["use_sliding_window"] = serde_json::json!(true);
    std::fs::write(&cfg_path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    let (_, dw) = flashtree::convert::dflash::load_draft(&dir).expect("draft loads");
    assert_eq!(dw.hparams.sliding, vec![true, false]);
    let mut model = DraftModel::open(&dir).unwrap();
    model.config.sliding_window = Some(16);
    let err = DraftEngine::load(e.gpu.clone(), e.weights(), &e.cfg, &model, 192).err().expect("refused");
    assert!(err.to_string().contains("window 16"), "{err}");
    let model = DraftModel::open(&dir).unwrap();
    let mut d = DraftEngine::load(e.gpu.clone(), e.weights(), &e.cfg, &model, 192).expect("GPU draft loads");
    let layers = dw.hparams.target_layer_ids.clone();
    let bs = dw.hparams.block_size;
    let vocab = e.cfg.vocab_size;
    for len in [1usize, 17, 30, 47, 48, 100, 170] {
        let prompt = tokens(300 + len as u64, len, vocab);
        let (bonus, features) = {
            let mut target = GpuTarget::with_capture(&mut e, &layers).unwrap();
            let (bonus, h) = target.prefill(&prompt, DecodingRule::Greedy).unwrap();
            (bonus, target.feature_source().unwrap().host_rows(&h).unwrap())
        };
        let mut block = vec![dw.hparams.mask_token_id; bs];
        block[0] = bonus;
        let want =
            with_device_rounding(|| dw.forward(&t.cpu.token_embd, t.cpu.lm_head(), &features, 0, &block, len).unwrap());
        d.reset();
        d.extend_context(&features.concat()).unwrap();
        d.propose(bonus, 4).unwrap();
        let got = d.last_logits().unwrap();
        let worst = got.chunks(vocab).enumerate().map(|(r, row)| rel_err(row, &want.logits[r])).fold(0f64, f64::max);
        eprintln!("sliding draft, prompt of {len}: within {worst:.2e} of the reference");
        assert!(worst <= 2e-3, "prompt of {len}: {worst:.3e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
