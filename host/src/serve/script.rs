//! Scripted replies for tests (`flashtree serve --script FILE`, a hidden flag): a target that
//! runs the real model but, when the text a turn adds contains a script's trigger, picks the
//! script's reply tokens (then EOS) instead of the model's — so tool calls, thinking and stop
//! sequences can be tested end to end with a tiny random model whose own output is noise.
//!
//! The wrapper sits under the speculative loop: prefill, tree verify and commit run on the real
//! target (caches, features and prefix reuse are the real ones), only the picked tokens change.
//! The token after the node at position `p` is script token `p + 1 − start`, where `start` is
//! the position of the turn's first generated token; past the script's end it is EOS.
//!
//! FILE is JSON: `[{"when": "trigger text", "reply": "text the model answers"}, …]`. A script
//! applies when its trigger occurs in the last [`TAIL_BYTES`] bytes of the prompt's text (the
//! one occurring last wins); no trigger = the model's own reply. The choice depends on the
//! prompt only, so a turn that reuses cached tokens picks what a cold run of it picks — except
//! that tokens added to the caches that are exactly the active script's next ones continue it
//! (how a turn paused and resumed on the same caches, the thinking budget's, stays scripted).

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::spec::{DecodingRule, SpecError, Target, VerifyBatch};
use crate::tokenizer::gguf::GgufTokenizer;

/// How far from the prompt's end a trigger is looked for (bytes of its decoded text).
pub const TAIL_BYTES: usize = 256;

/// One scripted reply.
#[derive(Debug, Clone, Deserialize)]
pub struct Script {
    /// The trigger, searched in the text a turn adds to the caches.
    pub when: String,
    /// The reply's text.
    pub reply: String,
}

/// Reads a script file (errors name it and what is wrong).
pub fn read(path: &Path) -> anyhow::Result<Vec<Script>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the script {}", path.display()))?;
    let scripts: Vec<Script> = serde_json::from_str(&text)
        .with_context(|| format!("{}: expected a JSON list of {{\"when\", \"reply\"}}", path.display()))?;
    if let Some(i) = scripts.iter().position(|s| s.when.is_empty()) {
        bail!("{}: script {i} has an empty `when`", path.display());
    }
    Ok(scripts)
}

/// A target whose picks follow a script after a trigger.
pub struct ScriptedTarget<T> {
    inner: T,
    tk: Arc<GgufTokenizer>,
    /// (trigger, reply tokens followed by EOS).
    scripts: Vec<(String, Vec<u32>)>,
    /// The active script: the position of its first token and its tokens.
    active: Option<(usize, Vec<u32>)>,
    /// The tokens in the inner target's caches.
    history: Vec<u32>,
}

impl<T: Target> ScriptedTarget<T> {
    /// Wraps `inner`; the replies are tokenised with `tk` and end with its first stop token.
    pub fn new(inner: T, scripts: &[Script], tk: Arc<GgufTokenizer>) -> anyhow::Result<Self> {
        let Some(&eos) = tk.stop_ids.first() else { bail!("--script: the tokenizer has no end-of-turn token") };
        let scripts = scripts
            .iter()
            .map(|s| {
                let mut ids = tk.tokenizer.encode(&s.reply).map_err(|e| anyhow::anyhow!("--script: {e}"))?;
                ids.push(eos);
                Ok((s.when.clone(), ids))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { inner, tk, scripts, active: None, history: Vec::new() })
    }

    /// Picks the script for the prompt now in the caches (`pending` = the model's own pick).
    fn choose(&mut self, pending: u32) -> u32 {
        let mut tail = Vec::new();
        for &id in self.history.iter().rev() {
            tail.splice(0..0, self.tk.tokenizer.token_bytes(id).unwrap_or(b"").iter().copied());
            if tail.len() >= TAIL_BYTES {
                break;
            }
        }
        let text = String::from_utf8_lossy(&tail[tail.len().saturating_sub(TAIL_BYTES)..]).into_owned();
        let best =
            self.scripts.iter().filter_map(|(when, ids)| Some((text.rfind(when.as_str())?, ids))).max_by_key(|x| x.0);
        self.active = best.map(|(_, ids)| (self.history.len(), ids.clone()));
        self.active.as_ref().map_or(pending, |(_, ids)| ids[0])
    }

    /// The script's token at `pos`, if a script is active (EOS past its end).
    fn at(&self, pos: usize) -> Option<u32> {
        let (start, ids) = self.active.as_ref()?;
        let k = pos.checked_sub(*start)?;
        ids.get(k).or(ids.last()).copied()
    }
}

impl<T: Target> Target for ScriptedTarget<T> {
    type Features = T::Features;

    fn max_nodes(&self) -> usize {
        self.inner.max_nodes()
    }

    fn committed(&self) -> usize {
        self.inner.committed()
    }

    fn reset(&mut self) -> Result<(), SpecError> {
        self.active = None;
        self.history.clear();
        self.inner.reset()
    }

    fn extend(&mut self, tokens: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
        let (pending, f) = self.inner.extend(tokens, rule)?;
        let at = self.history.len();
        self.history.extend_from_slice(tokens);
        // Tokens that are the active script's own next ones continue it (a turn resumed after
        // a pause: the thinking budget's answer, `super::budget`); anything else chooses anew.
        let follows = tokens.iter().enumerate().all(|(i, &t)| self.at(at + i) == Some(t));
        match self.at(self.history.len()) {
            Some(next) if follows => Ok((next, f)),
            _ => Ok((self.choose(pending), f)),
        }
    }

    fn prefill(&mut self, prompt: &[u32], rule: DecodingRule) -> Result<(u32, Self::Features), SpecError> {
        let (pending, f) = self.inner.prefill(prompt, rule)?;
        self.history = prompt.to_vec();
        Ok((self.choose(pending), f))
    }

    fn verify(&mut self, batch: &VerifyBatch, rule: DecodingRule) -> Result<Vec<u32>, SpecError> {
        let mut picks = self.inner.verify(batch, rule)?;
        for (pick, &pos) in picks.iter_mut().zip(batch.positions()) {
            if let Some(t) = self.at(pos + 1) {
                *pick = t;
            }
        }
        Ok(picks)
    }

    fn commit(&mut self, batch: &VerifyBatch, path: &[usize]) -> Result<Self::Features, SpecError> {
        let f = self.inner.commit(batch, path)?;
        self.history.extend(path.iter().map(|&i| batch.tokens()[i]));
        Ok(f)
    }

    fn device_times(&mut self) -> Result<Option<crate::spec::PhaseTimes>, SpecError> {
        self.inner.device_times()
    }

    fn supports_snapshots(&self) -> bool {
        self.inner.supports_snapshots()
    }

    fn save_snapshot(&mut self) -> Result<(), SpecError> {
        self.inner.save_snapshot()
    }

    /// The script is chosen again by the `extend` that follows (a restore is always followed by
    /// one: the rest of the prompt).
    fn restore_snapshot(&mut self) -> Result<usize, SpecError> {
        let at = self.inner.restore_snapshot()?;
        self.history.truncate(at);
        self.active = None;
        Ok(at)
    }
}
