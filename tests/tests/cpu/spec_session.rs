//! Multi-turn sessions on the toy target: a turn whose prompt continues the conversation runs
//! only the new tokens (`Target::extend`) and then generates exactly what one fresh prefill of the
//! whole conversation generates; the draft's context stays aligned across turns (the oracle draft
//! refuses a bonus that is not the AR token at its context length); any other prompt resets.

use flashtree::spec::{DecodingRule, GenerateConfig, Mode, Session, StopReason};
use flashtree_tests::toy::{ar_reference, Corruption, OracleDraft, ToyDraft, ToyModel, ToyTarget};
use std::ops::ControlFlow;

const L: usize = 15;

fn cfg(mode: Mode, max_tokens: usize) -> GenerateConfig {
    GenerateConfig { mode, budget: 22, max_tokens, eos: vec![], rule: DecodingRule::Greedy }
}

/// Turn 1, then turn 2 on `prompt + output + more`, for turn lengths that stop at the bonus and
/// inside an accepted path: the second turn reuses the caches and equals the AR continuation of
/// the whole conversation.
#[test]
fn a_continued_conversation_extends_the_caches_and_equals_a_fresh_prefill() {
    let m = ToyModel { seed: 9, vocab: 64 };
    let p1: Vec<u32> = vec![3, 14, 15, 9, 26];
    let more: Vec<u32> = vec![5, 35, 8, 9];
    for mode in [Mode::Ar, Mode::Chain, Mode::Tree] {
        for n1 in [1, 2, 7, 23, 40] {
            let mut s = Session::new(ToyTarget::new(m), Some(ToyDraft::new(m, L)));
            let (g1, st1) = s.generate(&p1, &cfg(mode, n1), |_| ControlFlow::Continue(())).unwrap();
            assert_eq!(g1, ar_reference(&m, &p1, n1), "{mode:?} turn 1");
            assert_eq!(st1.reused_tokens, 0);
            // The caches hold the prompt and the output, minus at most a final pending token.
            let held = s.committed_tokens().to_vec();
            let conv: Vec<u32> = p1.iter().chain(&g1).copied().collect();
            assert!(conv.starts_with(&held) && held.len() + 1 >= conv.len(), "{mode:?} n1 {n1}: {held:?}");
            let turn2: Vec<u32> = conv.iter().chain(&more).copied().collect();
            let (g2, st2) = s.generate(&turn2, &cfg(mode, 30), |_| ControlFlow::Continue(())).unwrap();
            assert_eq!(st2.reused_tokens, held.len(), "{mode:?} n1 {n1}: caches not reused");
            assert_eq!(g2, ar_reference(&m, &turn2, 30), "{mode:?} n1 {n1}: turn 2 differs from a fresh prefill");
        }
    }
}

/// The oracle draft counts its context rows and refuses a bonus that is not the AR token at that
/// position: over three turns (the last after an AR turn whose rows the draft never read) it
/// keeps accepting deep, so the features the session hands it are exactly the committed rows.
#[test]
fn the_drafts_context_follows_the_committed_rows_across_turns() {
    let m = ToyModel { seed: 4, vocab: 128 };
    let p1: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 7];
    // The conversation: turn 1's output, a user turn, turn 2's output, another user turn, turn 3.
    let user = [vec![11u32, 12, 13], vec![21u32, 22]];
    let lens = [37, 29, 41];
    let modes = [Mode::Tree, Mode::Ar, Mode::Chain];
    let mut conv = p1.clone();
    let mut prompts = Vec::new();
    for t in 0..3 {
        prompts.push(conv.clone());
        conv.extend(ar_reference(&m, &conv, lens[t]));
        if t < 2 {
            conv.extend(&user[t]);
        }
    }
    let draft = OracleDraft::new(conv.clone(), m.vocab, L, 0.0, 5, Corruption::Absent);
    let mut s = Session::new(ToyTarget::new(m), Some(draft));
    for t in 0..3 {
        let (out, st) = s.generate(&prompts[t], &cfg(modes[t], lens[t]), |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(out, ar_reference(&m, &prompts[t], lens[t]), "turn {t}");
        if t > 0 {
            assert!(st.reused_tokens > 0, "turn {t} did not reuse the caches");
        }
        if modes[t] != Mode::Ar {
            assert!(st.acceptance_length() > 5.0, "turn {t}: AL {}", st.acceptance_length());
        }
    }
}

/// A prompt that does not continue the cached tokens (an edited conversation, a shorter one, the
/// same one again) resets target and draft and still equals AR.
#[test]
fn a_prompt_that_does_not_continue_the_caches_resets_them() {
    let m = ToyModel { seed: 2, vocab: 64 };
    let p1: Vec<u32> = vec![9, 8, 7, 6];
    let mut s = Session::new(ToyTarget::new(m), Some(ToyDraft::new(m, L)));
    let (g1, _) = s.generate(&p1, &cfg(Mode::Tree, 20), |_| ControlFlow::Continue(())).unwrap();
    let mut edited: Vec<u32> = p1.iter().chain(&g1).copied().collect();
    edited[2] ^= 1;
    for prompt in [edited, p1[..2].to_vec(), p1.clone(), s.committed_tokens().to_vec()] {
        let (out, st) = s.generate(&prompt, &cfg(Mode::Tree, 20), |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(st.reused_tokens, 0, "{prompt:?}");
        assert_eq!(out, ar_reference(&m, &prompt, 20), "{prompt:?}");
    }
    // An explicit reset empties the caches: nothing is reused, the output is still AR's.
    let next: Vec<u32> = s.committed_tokens().iter().chain(&[1, 2]).copied().collect();
    s.reset().unwrap();
    assert!(s.committed_tokens().is_empty());
    let (out, st) = s.generate(&next, &cfg(Mode::Tree, 20), |_| ControlFlow::Continue(())).unwrap();
    assert_eq!((st.reused_tokens, out), (0, ar_reference(&m, &next, 20)));
}

/// `ControlFlow::Break` from `on_tokens` ends generation after that round: no further round runs,
/// the output is the AR prefix streamed so far, the stats say the caller stopped it, and the next
/// turn continues from the caches. Breaking at the first token (after the prefill) runs no round.
#[test]
fn the_callback_stops_generation_within_one_round() {
    let m = ToyModel { seed: 6, vocab: 64 };
    let p: Vec<u32> = vec![4, 40, 44];
    for mode in [Mode::Ar, Mode::Tree] {
        for stop_after_calls in [1, 2, 5] {
            let mut s = Session::new(ToyTarget::new(m), Some(ToyDraft::new(m, L)));
            let (mut calls, mut streamed) = (0, Vec::new());
            let (out, st) = s
                .generate(&p, &cfg(mode, 200), |t| {
                    calls += 1;
                    streamed.extend_from_slice(t);
                    if calls == stop_after_calls {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .unwrap();
            assert_eq!(calls, stop_after_calls, "{mode:?}: a round ran after Break");
            assert_eq!(st.steps, stop_after_calls - 1, "{mode:?}: rounds");
            assert_eq!(st.stop, StopReason::Caller);
            assert_eq!(out, streamed);
            assert_eq!(out, ar_reference(&m, &p, out.len()), "{mode:?}");
            assert!(out.len() < 200);
            let next: Vec<u32> = p.iter().chain(&out).copied().collect();
            let (more, st2) = s.generate(&next, &cfg(mode, 10), |_| ControlFlow::Continue(())).unwrap();
            assert!(st2.reused_tokens > 0 && st2.stop == StopReason::MaxTokens);
            assert_eq!(more, ar_reference(&m, &next, 10));
        }
    }
    // A stop that max_tokens or EOS would make anyway keeps their reason.
    let mut s = Session::new(ToyTarget::new(m), None::<ToyDraft>);
    let (_, st) = s.generate(&p, &cfg(Mode::Ar, 1), |_| ControlFlow::Break(())).unwrap();
    assert_eq!(st.stop, StopReason::MaxTokens);
    let eos = ar_reference(&m, &p, 3)[2];
    let c = GenerateConfig { eos: vec![eos], ..cfg(Mode::Ar, 50) };
    let (out, st) = s.generate(&p, &c, |_| ControlFlow::Break(())).unwrap();
    assert_eq!((out.len(), st.stop), (1, StopReason::Caller));
    let (out, st) = s.generate(&p, &c, |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(*out.last().unwrap(), eos);
    assert_eq!(st.stop, StopReason::Eos);
}

/// A target and a draft that report device time: the stats carry the sum of both, taken once
/// per turn (time left from before the turn is dropped), and the summary prints it.
#[test]
fn device_times_of_target_and_draft_reach_the_stats() {
    use flashtree::spec::{Draft, DraftTopK, PhaseTimes, SpecError, Target, VerifyBatch};
    use std::time::Duration;
    const MS: Duration = Duration::from_millis(1);
    /// Reports 1 ms of device verify per verify and 2 ms of commit per commit.
    struct Timed(ToyTarget, PhaseTimes);
    impl Target for Timed {
        type Features = <ToyTarget as Target>::Features;
        fn committed(&self) -> usize {
            self.0.committed()
        }
        fn reset(&mut self) -> Result<(), SpecError> {
            self.0.reset()
        }
        fn extend(&mut self, t: &[u32], r: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
            self.1.prefill += 5 * MS;
            self.0.extend(t, r)
        }
        fn verify(&mut self, b: &VerifyBatch, r: DecodingRule) -> Result<Vec<u32>, SpecError> {
            self.1.verify += MS;
            self.0.verify(b, r)
        }
        fn commit(&mut self, b: &VerifyBatch, path: &[usize]) -> Result<Self::Features, SpecError> {
            self.1.commit += 2 * MS;
            self.0.commit(b, path)
        }
        fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
            Ok(Some(std::mem::take(&mut self.1)))
        }
    }
    /// Reports 3 ms of device draft time per proposal.
    struct TimedDraft(ToyDraft, Duration);
    impl Draft for TimedDraft {
        type Features = <ToyDraft as Draft>::Features;
        fn depths(&self) -> usize {
            self.0.depths()
        }
        fn reset(&mut self) -> Result<(), SpecError> {
            self.0.reset()
        }
        fn propose(&mut self, f: &Self::Features, b: u32, k: usize) -> Result<DraftTopK, SpecError> {
            self.1 += 3 * MS;
            self.0.propose(f, b, k)
        }
        fn device_times(&mut self) -> Result<Option<PhaseTimes>, SpecError> {
            Ok(Some(PhaseTimes { draft: std::mem::take(&mut self.1), ..Default::default() }))
        }
    }
    let m = ToyModel { seed: 8, vocab: 64 };
    let mut target = Timed(ToyTarget::new(m), PhaseTimes::default());
    target.1.verify = 1000 * MS; // left from before: not this turn's
    let mut s = Session::new(target, Some(TimedDraft(ToyDraft::new(m, L), Duration::ZERO)));
    let (_, st) = s.generate(&[1, 2, 3], &cfg(Mode::Tree, 60), |_| ControlFlow::Continue(())).unwrap();
    let d = st.device.expect("device times");
    let rounds = st.steps as u32;
    assert_eq!((d.prefill, d.verify, d.commit, d.draft), (5 * MS, rounds * MS, 2 * rounds * MS, 3 * rounds * MS));
    assert!(st.summary().contains("device time: prefill 0.005s"), "{}", st.summary());
    // The round's breakdown: the device phases per round, the rest is the device waiting.
    assert!(st.summary().contains("= device draft 3.000 + verify 1.000 + commit 2.000 + "), "{}", st.summary());
    let mut beside = st.clone();
    beside.device = Some(PhaseTimes { commit_beside_draft: true, ..d });
    assert!(beside.summary().contains("+ commit beside the draft + "), "{}", beside.summary());
    let (_, st) = s.generate(&[1, 2, 3], &cfg(Mode::Ar, 5), |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(st.device.unwrap().verify, st.steps as u32 * MS);
}
