//! [`DecodingRule`]: how a target turns a node's logits into the token after it. The loop passes
//! it to [`super::Target::verify`] and [`super::Target::extend`]; the walk follows the tokens the
//! rule picked, so the rule decides what "lossless" means for a run.

/// The token a target emits after a node. Greedy only today; issue 25's exact sampling rules
/// (temperature / top-p with sample-then-walk, ddtree.md §6) are added here as variants, and a
/// backend that does not implement one answers [`super::SpecError::Unsupported`] naming it.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodingRule {
    /// T = 0: the argmax of the logits (the lowest token id on ties; all-NaN logits are an
    /// error). Speculative output then equals greedy AR output token for token.
    #[default]
    Greedy,
}

impl DecodingRule {
    /// The rule's name for messages.
    pub fn name(self) -> &'static str {
        match self {
            DecodingRule::Greedy => "greedy",
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
    }
}
