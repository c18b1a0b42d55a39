//! [`DecodingRule`]: how a target turns a node's logits into the token after it. The loop passes
//! it to [`super::Target::verify`] and [`super::Target::extend`]; the walk follows the tokens the
//! rule picked, so the rule decides what "lossless" means for a run.
//!
//! **Exact sampling with trees** (`docs/sampling.md`): a target evaluates the rule at every node
//! of a verify batch, on that node's own logits, with the random stream of the position the
//! picked token will occupy; the walk accepts the child whose token equals the pick and stops
//! when none does. Only the visited nodes' picks are emitted, one per absolute position, each
//! drawn from the target's distribution given exactly the emitted history with a uniform that
//! depends on nothing but `(seed, position)`. So every emitted token is distributed as AR
//! sampling gives it, whatever the draft proposed and whatever tree was built, and a seed gives
//! the same tokens in AR, chain and tree mode at any budget (up to logits that differ in the last
//! bits between a backend's chain and tree forwards: a pick flips only when the uniform falls
//! within that rounding of a cumulative boundary). The textbook `min(1, p/q)` acceptance is
//! *not* used: it is exact only for draft tokens sampled from `q`, and trees are built
//! deterministically from the draft's top-K.
//!
//! Repetition / presence / frequency penalties are not offered (they would need each node's path
//! history in the rule; left for later).

use super::sample;
use super::SpecError;

/// The token a target emits after a node. A backend that does not implement a rule answers
/// [`super::SpecError::Unsupported`] naming it.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default)]
pub enum DecodingRule {
    /// T = 0: the argmax of the logits (the lowest token id on ties; all-NaN logits are an
    /// error). Speculative output then equals greedy AR output token for token.
    #[default]
    Greedy,
    /// Seeded sampling ([`flashtree_reference::sample::draw`] is the definition, shared by the
    /// CPU backend and the device kernel). With logits `l` (NaN and −∞ entries never picked):
    /// 1. temperature: `temperature = 0` is [`DecodingRule::Greedy`] exactly (the same argmax,
    ///    the other fields ignored); else each token's weight relative to the most likely one is
    ///    `w = e^{(l − l_max)/T}` (f64), held in fixed point `W = ⌊w · 2^44⌋` so every sum is
    ///    exact (tokens with `p < p_max · 2^-44` get none);
    /// 2. tokens ordered by `l` descending, ties by token id ascending;
    /// 3. top-k: keep the first `top_k` tokens (`0` = all);
    /// 4. top-p: keep the shortest prefix whose weight is at least `top_p` of the kept total
    ///    (`1` = all; at least one token);
    /// 5. min-p: keep the leading tokens with `p ≥ min_p · p_max` (`0` = all);
    /// 6. draw the 53-bit uniform of the counter-based stream `(seed, position)`
    ///    ([`sample::uniform`]; `position` = the absolute position the picked token will
    ///    occupy) and pick, in token-id order, the first kept token whose cumulative weight
    ///    exceeds `⌊u · Σ W⌋`: token `i` with probability `W_i / Σ W` exactly.
    ///
    /// Ranges (checked by [`DecodingRule::validate`]): `temperature` finite and ≥ 0, `top_p` in
    /// (0, 1], `min_p` in [0, 1].
    Sample {
        /// Softmax temperature (0 = greedy).
        temperature: f32,
        /// Keep the `top_k` most likely tokens (0 = no limit).
        top_k: usize,
        /// Nucleus mass (1 = no limit).
        top_p: f32,
        /// Minimum probability relative to the most likely token (0 = no limit).
        min_p: f32,
        /// The seed of the random stream.
        seed: u64,
    },
}

/// Field-wise equality, the floats compared by bits (a validated rule holds no NaN).
impl PartialEq for DecodingRule {
    fn eq(&self, other: &Self) -> bool {
        use DecodingRule::*;
        match (*self, *other) {
            (Greedy, Greedy) => true,
            (
                Sample { temperature: t, top_k: k, top_p: p, min_p: m, seed: s },
                Sample { temperature: t2, top_k: k2, top_p: p2, min_p: m2, seed: s2 },
            ) => {
                t.to_bits() == t2.to_bits()
                    && k == k2
                    && p.to_bits() == p2.to_bits()
                    && m.to_bits() == m2.to_bits()
                    && s == s2
            }
            _ => false,
        }
    }
}

impl Eq for DecodingRule {}

impl DecodingRule {
    /// A [`DecodingRule::Sample`], validated.
    pub fn sample(temperature: f32, top_k: usize, top_p: f32, min_p: f32, seed: u64) -> Result<Self, SpecError> {
        let r = DecodingRule::Sample { temperature, top_k, top_p, min_p, seed };
        r.validate()?;
        Ok(r)
    }

    /// The rule's name for messages.
    pub fn name(self) -> &'static str {
        match self {
            DecodingRule::Greedy => "greedy",
            DecodingRule::Sample { .. } => "sampling",
        }
    }

    /// Whether the rule is the argmax ([`DecodingRule::Greedy`], or sampling at T = 0): a
    /// backend with only a device argmax implements exactly these.
    pub fn is_greedy(self) -> bool {
        match self {
            DecodingRule::Greedy => true,
            DecodingRule::Sample { temperature, .. } => temperature == 0.0,
        }
    }

    /// Checks the ranges of a [`DecodingRule::Sample`], naming the field and what was expected.
    pub fn validate(self) -> Result<(), SpecError> {
        let DecodingRule::Sample { temperature, top_p, min_p, .. } = self else {
            return Ok(());
        };
        let bad = |what: String| Err(SpecError::Config(what));
        if !(temperature.is_finite() && temperature >= 0.0) {
            return bad(format!("temperature {temperature}: expected a finite value ≥ 0"));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return bad(format!("top_p {top_p}: expected a value in (0, 1]"));
        }
        if !(0.0..=1.0).contains(&min_p) {
            return bad(format!("min_p {min_p}: expected a value in [0, 1]"));
        }
        Ok(())
    }

    /// The token this rule picks from `logits` for absolute position `position` (the position
    /// the picked token will occupy; only sampling reads it). Errors: logits with no pickable
    /// entry (all NaN, or all NaN/−∞ when sampling), an invalid rule.
    pub fn pick(self, logits: &[f32], position: usize) -> Result<u32, SpecError> {
        match self {
            _ if self.is_greedy() => sample::greedy(logits),
            DecodingRule::Greedy => sample::greedy(logits),
            DecodingRule::Sample { temperature, top_k, top_p, min_p, seed } => {
                self.validate()?;
                sample::sample(logits, &sample::sample_rule(temperature, top_k, top_p, min_p, seed), position as u64)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SpecError;

    #[test]
    fn an_unsupported_rule_is_named_with_the_backend() {
        let e = SpecError::unsupported(DecodingRule::Greedy, "the test backend").to_string();
        assert!(e.contains("greedy") && e.contains("the test backend"), "{e}");
        assert_eq!(DecodingRule::default(), DecodingRule::Greedy);
        let s = DecodingRule::sample(0.7, 0, 1.0, 0.0, 1).unwrap();
        assert!(SpecError::unsupported(s, "x").to_string().contains("sampling"));
    }

    #[test]
    fn ranges_are_checked_by_name() {
        for (t, p, m, field) in [
            (-0.1, 1.0, 0.0, "temperature"),
            (f32::NAN, 1.0, 0.0, "temperature"),
            (f32::INFINITY, 1.0, 0.0, "temperature"),
            (1.0, 0.0, 0.0, "top_p"),
            (1.0, 1.5, 0.0, "top_p"),
            (1.0, f32::NAN, 0.0, "top_p"),
            (1.0, 1.0, -0.5, "min_p"),
            (1.0, 1.0, 1.01, "min_p"),
        ] {
            let e = DecodingRule::sample(t, 0, p, m, 0).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
            // A rule built directly is checked where it is used.
            let r = DecodingRule::Sample { temperature: t, top_k: 0, top_p: p, min_p: m, seed: 0 };
            if t != 0.0 {
                assert!(r.pick(&[0.0, 1.0], 3).is_err(), "{field}");
            }
        }
        assert!(DecodingRule::sample(0.0, 5, 1.0, 1.0, 0).is_ok());
    }

    #[test]
    fn zero_temperature_is_the_argmax_whatever_the_seed() {
        let logits = [0.5, 2.0, 2.0, -1.0, f32::NAN];
        for seed in 0..50 {
            let r = DecodingRule::sample(0.0, 1, 0.1, 0.9, seed).unwrap();
            assert!(r.is_greedy());
            for pos in 0..10 {
                assert_eq!(r.pick(&logits, pos).unwrap(), DecodingRule::Greedy.pick(&logits, pos).unwrap());
            }
        }
        assert_eq!(DecodingRule::Greedy.pick(&logits, 0).unwrap(), 1);
        assert!(!DecodingRule::sample(0.1, 0, 1.0, 0.0, 0).unwrap().is_greedy());
        assert!(DecodingRule::Greedy.pick(&[f32::NAN], 0).is_err());
    }

    #[test]
    fn equality_compares_every_field() {
        let a = DecodingRule::sample(0.7, 4, 0.9, 0.05, 3).unwrap();
        assert_eq!(a, a);
        assert_ne!(a, DecodingRule::sample(0.7, 4, 0.9, 0.05, 4).unwrap());
        assert_ne!(a, DecodingRule::sample(0.7, 4, 0.9, 0.06, 3).unwrap());
        assert_ne!(a, DecodingRule::Greedy);
    }
}
