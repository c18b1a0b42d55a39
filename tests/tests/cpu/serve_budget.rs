//! The thinking budget's turn (`flashtree::serve::budget::generate`) on the toy target, in every
//! mode and for budgets that end at a round's bonus or inside its accepted path: the output is
//! the first N tokens of AR, the closing tokens, then exactly the AR continuation of all of that
//! (the answer resumes on the same caches without a reset); a model that closes its thinking
//! within the budget gives what it gives without one; `max_tokens` bounds the whole.

use std::ops::ControlFlow;

use flashtree::serve::budget::{generate, ThinkBudget};
use flashtree::spec::{DecodingRule, GenerateConfig, Mode, Session};
use flashtree_tests::toy::{ar_reference, ToyDraft, ToyModel, ToyTarget};

const L: usize = 15;

fn cfg(mode: Mode, max_tokens: usize) -> GenerateConfig {
    GenerateConfig { mode, budget: 22, max_tokens, eos: vec![], rule: DecodingRule::Greedy }
}

/// Runs one budgeted turn on fresh caches: (output, tokens seen by the callback, stats).
fn turn(
    m: ToyModel,
    mode: Mode,
    prompt: &[u32],
    max: usize,
    budget: &ThinkBudget,
    close_id: u32,
) -> (Vec<u32>, Vec<u32>, flashtree::spec::Stats) {
    let mut s = Session::new(ToyTarget::new(m), Some(ToyDraft::new(m, L)));
    let bytes = |id: u32| -> &'static [u8] {
        if id == close_id {
            b"</think>"
        } else {
            b"a"
        }
    };
    let mut seen = Vec::new();
    let (out, stats) = generate(&mut s, prompt, None, &cfg(mode, max), Some(budget), bytes, |ids| {
        seen.extend_from_slice(ids);
        ControlFlow::Continue(())
    })
    .unwrap();
    (out, seen, stats)
}

#[test]
fn a_spent_budget_appends_the_closing_tokens_and_the_answer_continues_as_ar() {
    let m = ToyModel { seed: 11, vocab: 64 };
    let prompt: Vec<u32> = vec![3, 14, 15, 9, 26];
    let max = 60;
    let free = ar_reference(&m, &prompt, max);
    // An id the model does not write within the whole reply: the thinking never closes itself.
    let close_id = (0..m.vocab).find(|t| !free.contains(t)).expect("an unused id");
    let close = vec![close_id, 7, 7];
    for mode in [Mode::Ar, Mode::Chain, Mode::Tree] {
        for n in [1, 2, 7, 23, 40] {
            let b = ThinkBudget { tokens: n, close: close.clone() };
            let (out, seen, stats) = turn(m, mode, &prompt, max, &b, close_id);
            let mut want = free[..n].to_vec();
            want.extend(&close);
            let sequence: Vec<u32> = prompt.iter().chain(&want).copied().collect();
            want.extend(ar_reference(&m, &sequence, max - n - close.len()));
            assert_eq!(out, want, "{mode:?} budget {n}");
            assert_eq!(seen, out, "{mode:?} budget {n}: the callback saw every token");
            assert_eq!((stats.generated, stats.prompt_tokens), (max, prompt.len()));
        }
    }
    // No room left for the closing tokens and one more: the reply stops at max_tokens.
    let b = ThinkBudget { tokens: 40, close: close.clone() };
    let (out, _, _) = turn(m, Mode::Tree, &prompt, 43, &b, close_id);
    assert_eq!(out, free[..40]);
}

#[test]
fn a_model_that_closes_its_thinking_within_the_budget_is_not_interrupted() {
    let m = ToyModel { seed: 5, vocab: 64 };
    let prompt: Vec<u32> = vec![1, 2, 3, 4];
    let max = 50;
    let free = ar_reference(&m, &prompt, max);
    for at in [0, 3, 9] {
        // The model's own token at `at` reads as `</think>` (its first occurrence is where it
        // closes; the budget is past it).
        let close_id = free[at];
        let first = free.iter().position(|&t| t == close_id).unwrap();
        for mode in [Mode::Ar, Mode::Chain, Mode::Tree] {
            let b = ThinkBudget { tokens: first + 1 + 10, close: vec![60, 61] };
            let (out, seen, stats) = turn(m, mode, &prompt, max, &b, close_id);
            assert_eq!(out, free, "{mode:?}, closed at {first}");
            assert_eq!(seen, free);
            assert_eq!(stats.generated, max);
            // Closed by the budget's last token: the same.
            let b = ThinkBudget { tokens: first + 1, close: vec![60, 61] };
            assert_eq!(turn(m, mode, &prompt, max, &b, close_id).0, free, "{mode:?}, budget {}", first + 1);
        }
    }
}
