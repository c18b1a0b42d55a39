//! Recurrent-state snapshots on the CPU backend (tiny random qwen35 + its DFlash draft): a turn
//! saves the DeltaNet states and conv windows at a position `s` of its prompt; a later prompt
//! that shares the first `s` tokens but not the rest (a thinking template that drops the last
//! reply's `<think>` block) goes back to `s` and runs only its own tokens after it, and
//! generates what a cold run of the same prompt generates — in AR, chain and tree modes, with
//! the draft's context rows truncated to `s` (or its unread rows cut there).
//!
//! Model: `tests/fixtures/hf/a` (2 Gated DeltaNet + 2 attention layers) with `draft-full`.

use flashtree::convert::dflash::load_draft;
use flashtree::convert::qwen35::load_hf;
use flashtree::spec::cpu::{check_pair, CpuDraft, CpuTarget};
use flashtree::spec::{DecodingRule, Draft, GenerateConfig, Mode, Session, Stats, Target};
use flashtree_reference::model::dflash::DFlashWeights;
use flashtree_reference::model::Qwen35Weights;
use std::ops::ControlFlow;
use std::path::PathBuf;

fn models() -> (Qwen35Weights, DFlashWeights) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf");
    let (_, w) = load_hf(&dir.join("a")).unwrap();
    let (_, d) = load_draft(&dir.join("draft-full")).unwrap();
    check_pair(&w, &d).unwrap();
    (w, d)
}

fn cfg(mode: Mode, n: usize) -> GenerateConfig {
    GenerateConfig { mode, budget: 22, max_tokens: n, eos: vec![], rule: DecodingRule::Greedy }
}

type Pair<'w> = Session<CpuTarget<'w>, CpuDraft<'w>>;

fn session<'w>(w: &'w Qwen35Weights, d: &'w DFlashWeights) -> Pair<'w> {
    Session::new(CpuTarget::new(w, d.hparams.target_layer_ids.clone()), Some(CpuDraft::new(d, w)))
}

fn run(s: &mut Pair<'_>, prompt: &[u32], at: Option<usize>, c: &GenerateConfig) -> (Vec<u32>, Stats) {
    s.generate_with_snapshot(prompt, at, c, |_| ControlFlow::Continue(())).unwrap()
}

/// The conversation as token ids: `HISTORY` (system + user, ends at the snapshot), a generation
/// prompt `GEN` (`<|im_start|>assistant\n<think>\n` in a real template), then the reply.
const HISTORY: [u32; 23] = [3, 141, 59, 26, 53, 58, 97, 9, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19, 71, 69, 39];
const GEN: [u32; 4] = [11, 12, 13, 14];
/// Turn 2's re-rendering of turn 1's reply (without its reasoning) and the next user message.
const REPLY_AS_RENDERED: [u32; 6] = [200, 201, 202, 203, 204, 205];
const USER2: [u32; 9] = [17, 230, 4, 99, 61, 7, 7, 21, 88];

/// Turn 1 saves at the end of `HISTORY`; turn 2 is `HISTORY + GEN + reply re-rendered + USER2 +
/// GEN` (it diverges right after turn 1's generation prompt): it reuses exactly `HISTORY`, its
/// tokens equal a cold run's, and its rounds equal those of a cold run split the same way (the
/// draft saw the same context rows). Turn 3 diverges after turn 2's snapshot the same way.
/// Turn 1 stops at several lengths, so the draft has read past the snapshot, or (AR, or a
/// one-token reply) nothing.
#[test]
fn a_turn_that_diverges_after_the_snapshot_prefills_only_its_suffix_and_equals_a_cold_run() {
    let (w, d) = models();
    for mode in [Mode::Ar, Mode::Chain, Mode::Tree] {
        for n1 in [1, 9, 30] {
            let mut s = session(&w, &d);
            let s1 = HISTORY.len();
            let p1: Vec<u32> = HISTORY.iter().chain(&GEN).copied().collect();
            let (g1, st1) = run(&mut s, &p1, Some(s1), &cfg(mode, n1));
            assert_eq!((st1.reused_tokens, s.snapshot_position()), (0, Some(s1)), "{mode:?} n1 {n1}");
            assert!(!g1.is_empty());

            let mut p2: Vec<u32> = HISTORY.iter().chain(&GEN).chain(&REPLY_AS_RENDERED).copied().collect();
            p2.extend(USER2);
            let s2 = p2.len();
            p2.extend(GEN);
            // (A one-token reply is only pending: the caches hold `p1`, which turn 2 extends.)
            let held = s.committed_tokens().to_vec();
            let want = if p2.starts_with(&held) { held.len() } else { s1 };
            assert_eq!(want == s1, n1 > 1);
            let (g2, st2) = run(&mut s, &p2, Some(s2), &cfg(mode, 25));
            assert_eq!(st2.reused_tokens, want, "{mode:?} n1 {n1}: turn 2 reused {} tokens", st2.reused_tokens);
            assert_eq!(s.snapshot_position(), Some(s2));
            let (cold, _) = run(&mut session(&w, &d), &p2, None, &cfg(mode, 25));
            assert_eq!(g2, cold, "{mode:?} n1 {n1}: turn 2 differs from a cold run");
            let (split, cold_st) = run(&mut session(&w, &d), &p2, Some(s1), &cfg(mode, 25));
            assert_eq!(g2, split);
            assert_eq!(
                (st2.steps, &st2.accepted_depth),
                (cold_st.steps, &cold_st.accepted_depth),
                "{mode:?} n1 {n1}: the draft proposed differently after the restore"
            );

            // Turn 3 drops turn 2's reply the same way and reuses through turn 2's snapshot.
            let mut p3 = p2[..s2].to_vec();
            p3.extend(GEN.iter().chain(&[222, 223]).chain(&USER2[..3]).chain(&GEN));
            let (g3, st3) = run(&mut s, &p3, None, &cfg(mode, 20));
            assert_eq!(st3.reused_tokens, s2, "{mode:?} n1 {n1}: turn 3");
            let (cold, _) = run(&mut session(&w, &d), &p3, None, &cfg(mode, 20));
            assert_eq!(g3, cold, "{mode:?} n1 {n1}: turn 3 differs from a cold run");
            assert_eq!(s.snapshot_position(), Some(s2), "a snapshot inside the reused prefix stays");
        }
    }
}

/// A prompt shorter than the cached tokens but longer than the snapshot (the same conversation
/// asked again with another ending) also goes back; one that differs before the snapshot, or
/// ends at it, starts over; one that extends the cached tokens extends them.
#[test]
fn only_a_prompt_that_shares_the_tokens_before_the_snapshot_goes_back_to_it() {
    let (w, d) = models();
    let c = cfg(Mode::Tree, 12);
    let mut s = session(&w, &d);
    let s1 = HISTORY.len();
    let p1: Vec<u32> = HISTORY.iter().chain(&GEN).copied().collect();
    let (g1, _) = run(&mut s, &p1, Some(s1), &c);
    let held = s.committed_tokens().to_vec();
    assert!(held.len() > s1 + 1);

    let mut prefix_of_held = held[..s1 + 1].to_vec();
    prefix_of_held[s1] ^= 1;
    for (prompt, reused) in [(held[..s1 + 2].to_vec(), s1), (prefix_of_held, s1)] {
        let (out, st) = run(&mut s, &prompt, None, &c);
        assert_eq!(st.reused_tokens, reused, "{prompt:?}");
        assert_eq!(out, run(&mut session(&w, &d), &prompt, None, &c).0);
    }
    // Ending at the snapshot leaves nothing to run after it: a cold run.
    let (_, st) = run(&mut s, &HISTORY, None, &c);
    assert_eq!(st.reused_tokens, 0);
    assert_eq!(s.snapshot_position(), None, "a cold run drops the snapshot");

    let mut edited: Vec<u32> = p1.iter().chain(&g1).copied().collect();
    let (_, st) = run(&mut s, &edited, Some(s1), &c);
    assert_eq!(st.reused_tokens, 0);
    edited[2] ^= 1;
    let (out, st) = run(&mut s, &edited, Some(s1), &c);
    assert_eq!(st.reused_tokens, 0, "differs before the snapshot");
    assert_eq!(out, run(&mut session(&w, &d), &edited, None, &c).0);

    // Continuing the cached tokens extends them (and saves nothing inside the reused part).
    let before = s.committed_tokens().len();
    let more: Vec<u32> = s.committed_tokens().iter().chain(&USER2).copied().collect();
    let (_, st) = run(&mut s, &more, Some(3), &c);
    assert_eq!(st.reused_tokens, before);
    assert_eq!(s.snapshot_position(), Some(s1));
    // A snapshot position past the prompt is refused before anything runs.
    assert!(s.generate_with_snapshot(&HISTORY, Some(HISTORY.len() + 1), &c, |_| ControlFlow::Continue(())).is_err());
}

/// Restoring with no snapshot (none saved, or dropped by a reset) is an error that leaves the
/// caches as they were; a snapshot restores as often as asked; the draft refuses to keep more
/// rows than it holds.
#[test]
fn restore_without_a_snapshot_is_an_error_and_a_snapshot_restores_repeatedly() {
    let (w, d) = models();
    let mut t = CpuTarget::new(&w, d.hparams.target_layer_ids.clone());
    assert!(t.supports_snapshots());
    let e = t.restore_snapshot().unwrap_err().to_string();
    assert!(e.contains("no snapshot"), "{e}");
    let (first, _) = t.extend(&HISTORY[..10], DecodingRule::Greedy).unwrap();
    let e = t.restore_snapshot().unwrap_err().to_string();
    assert!(e.contains("no snapshot"), "{e}");
    assert_eq!(t.committed(), 10);
    t.save_snapshot().unwrap();
    let (a, _) = t.extend(&HISTORY[10..], DecodingRule::Greedy).unwrap();
    for _ in 0..2 {
        assert_eq!(t.restore_snapshot().unwrap(), 10);
        assert_eq!(t.committed(), 10);
        let (b, _) = t.extend(&HISTORY[10..], DecodingRule::Greedy).unwrap();
        assert_eq!(a, b, "the same tokens after the restore pick the same next token");
    }
    t.reset().unwrap();
    assert!(t.restore_snapshot().is_err(), "a reset drops the snapshot");
    assert_eq!(t.committed(), 0);
    let (again, _) = t.extend(&HISTORY[..10], DecodingRule::Greedy).unwrap();
    assert_eq!(first, again);

    let mut draft = CpuDraft::new(&d, &w);
    assert!(draft.supports_truncation());
    let width = d.hparams.target_layer_ids.len() * d.hparams.n_embd;
    draft.propose(&vec![vec![0.25; width]; 5], 3, 2).unwrap();
    let e = draft.truncate_context(6).unwrap_err().to_string();
    assert!(e.contains("holds 5"), "{e}");
    draft.truncate_context(2).unwrap();
    draft.truncate_context(2).unwrap();
}
