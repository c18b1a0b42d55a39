//! Recurrent-state snapshots on the GPU engine (tiny synthetic pair): the restored DeltaNet
//! states and conv windows are the saved ones bit for bit, the tokens after a restore are those
//! of the first run, and a `Session` turn that goes back to a snapshot (tree mode with the GPU
//! draft, chain mode with the CPU draft on the feature store) generates bitwise what a cold run
//! of the same prompt generates (batch invariance: a node's result does not depend on how the
//! prompt was split into forwards).

use super::draft::pair;
use super::engine::{engine, tiny, tokens};
use flashtree::engine::{GpuDraft, GpuTarget};
use flashtree::spec::cpu::CpuDraft;
use flashtree::spec::{DecodingRule, Draft, GenerateConfig, HostDraft, Mode, Session, Target};
use std::ops::ControlFlow;

/// Save after 40 tokens (two forwards), run 37 more (the state moves on), restore: the state and
/// conv windows equal the saved ones bitwise, `n_past` is back at 40, and the same 37 tokens
/// give bitwise the same logits; a second restore works the same. Restoring with no snapshot
/// (none yet, or after a reset) is an error that leaves `n_past` alone.
#[test]
fn restoring_a_snapshot_gives_back_the_saved_recurrent_state_bit_for_bit() {
    let Some(mut e) = engine("restoring_a_snapshot_gives_back_the_saved_recurrent_state_bit_for_bit", 256) else {
        return;
    };
    let v = e.cfg.vocab_size;
    let (head, tail) = (tokens(81, 40, v), tokens(82, 37, v));
    assert!(e.restore_snapshot().is_err(), "no snapshot yet");
    e.prefill(&head).unwrap();
    assert!(e.restore_snapshot().is_err(), "no snapshot yet");
    assert_eq!(e.n_past(), 40);
    let saved = e.recurrent_state().unwrap();
    assert!(saved.iter().any(|&x| x != 0.0));
    e.save_snapshot().unwrap();
    assert_eq!(e.snapshot_position(), Some(40));
    let first = e.prefill(&tail).unwrap();
    let first_logits = e.logits(tail.len() % 32).unwrap();
    assert_ne!(e.recurrent_state().unwrap(), saved, "the tail moved the state");
    for round in 0..2 {
        assert_eq!(e.restore_snapshot().unwrap(), 40);
        assert_eq!(e.n_past(), 40);
        let got = e.recurrent_state().unwrap();
        let diff = got.iter().zip(&saved).position(|(a, b)| a.to_bits() != b.to_bits());
        assert_eq!(diff, None, "round {round}: restored state differs at value {diff:?}");
        assert_eq!(e.prefill(&tail).unwrap(), first);
        let logits = e.logits(tail.len() % 32).unwrap();
        assert!(logits.iter().zip(&first_logits).all(|(a, b)| a.to_bits() == b.to_bits()), "round {round}");
    }
    e.reset().unwrap();
    assert_eq!(e.snapshot_position(), None);
    assert!(e.restore_snapshot().is_err(), "a reset drops the snapshot");
    assert_eq!(e.n_past(), 0);
    assert!(e.plan.snapshot > 0 && e.plan.snapshot == e.plan.recurrent, "{}", e.plan);
}

fn cfg(mode: Mode, n: usize) -> GenerateConfig {
    GenerateConfig { mode, budget: 22, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy }
}

/// The turns of a thinking-template conversation as token ids: turn 1 = `hist + gen` with its
/// snapshot at `hist.len()`; turn 2 = `hist + gen + reply as re-rendered + user + gen` (differs
/// from the cached reply right after `gen`).
fn turns(v: usize) -> (Vec<u32>, usize, Vec<u32>) {
    let (hist, gen) = (tokens(91, 45, v), tokens(92, 4, v));
    let p1: Vec<u32> = hist.iter().chain(&gen).copied().collect();
    let mut p2 = p1.clone();
    p2.extend(tokens(93, 7, v).iter().chain(&tokens(94, 38, v)).chain(&gen));
    (p1, hist.len(), p2)
}

/// Turn 1 (saving at `s1`) then turn 2 through `warm`: turn 2's tokens and reused count, and the
/// draft back.
fn two_turns<T, D>(mut warm: Session<T, D>, mode: Mode, v: usize) -> (Vec<u32>, usize, Option<D>)
where
    T: Target,
    D: Draft<Features = T::Features>,
{
    let go = |_: &[u32]| ControlFlow::Continue(());
    let (p1, s1, p2) = turns(v);
    let (g1, _) = warm.generate_with_snapshot(&p1, Some(s1), &cfg(mode, 30), go).unwrap();
    assert!(g1.len() == 30 && warm.snapshot_position() == Some(s1));
    assert!(!p2.starts_with(warm.committed_tokens()), "turn 2 must diverge from the cached reply");
    let (g2, st2) = warm.generate(&p2, &cfg(mode, 40), go).unwrap();
    (g2, st2.reused_tokens, warm.into_parts().1)
}

/// Tree mode with the GPU draft and chain mode with the CPU draft (on the engine's feature
/// store): turn 2 goes back to turn 1's snapshot (reused = the snapshot's position) and its
/// tokens equal a cold run's bit for bit.
#[test]
fn a_session_turn_after_a_restore_equals_a_cold_run_bit_for_bit() {
    let Some((mut e, d, dw)) = pair("a_session_turn_after_a_restore_equals_a_cold_run_bit_for_bit", 512) else {
        return;
    };
    let t = tiny();
    let layers = dw.hparams.target_layer_ids.clone();
    let v = e.cfg.vocab_size;
    let (_, s1, p2) = turns(v);
    let go = |_: &[u32]| ControlFlow::Continue(());

    let source = GpuTarget::with_capture(&mut e, &layers).unwrap().feature_source().unwrap();
    let draft = GpuDraft::new(d, source).unwrap();
    let warm = Session::new(GpuTarget::with_capture(&mut e, &layers).unwrap(), Some(draft));
    let (g2, reused, draft) = two_turns(warm, Mode::Tree, v);
    let mut cold = Session::new(GpuTarget::with_capture(&mut e, &layers).unwrap(), draft);
    let (want, st) = cold.generate(&p2, &cfg(Mode::Tree, 40), go).unwrap();
    drop(cold);
    assert_eq!(st.reused_tokens, 0);
    assert_eq!(reused, s1, "tree, GPU draft: turn 2 did not go back to the snapshot");
    assert_eq!(g2, want, "tree, GPU draft: turn 2 after the restore differs from a cold run");

    let host_draft =
        |target: &GpuTarget<'_>| HostDraft::new(CpuDraft::new(&dw, &t.cpu), target.feature_source().unwrap());
    let target = GpuTarget::with_capture(&mut e, &layers).unwrap();
    let draft = host_draft(&target);
    let (g2, reused, _) = two_turns(Session::new(target, Some(draft)), Mode::Chain, v);
    let target = GpuTarget::with_capture(&mut e, &layers).unwrap();
    let draft = host_draft(&target);
    let (want, _) = Session::new(target, Some(draft)).generate(&p2, &cfg(Mode::Chain, 40), go).unwrap();
    assert_eq!(reused, s1, "chain, CPU draft: turn 2 did not go back to the snapshot");
    assert_eq!(g2, want, "chain, CPU draft: turn 2 after the restore differs from a cold run");
}
