//! Stop sequences over streamed text: text is released only once no stop string can still
//! start inside it, so a client never sees the beginning of a stop string.

/// Finds the first of `stops` in text pushed piece by piece.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not released (a suffix that may begin a stop string).
    held: String,
    /// A stop string was found; everything after it is dropped.
    hit: bool,
    /// Which one (index into `stops` as given, empty ones counted).
    which: Option<usize>,
    /// Index in the caller's list of each kept stop string.
    index: Vec<usize>,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are never matched).
    pub fn new(stops: Vec<String>) -> Self {
        let (index, stops) = stops.into_iter().enumerate().filter(|(_, s)| !s.is_empty()).unzip();
        Self { stops, held: String::new(), hit: false, which: None, index }
    }

    /// Whether a stop string was found.
    pub fn hit(&self) -> bool {
        self.hit
    }

    /// The index (in the list given to [`new`](Self::new)) of the stop string found.
    pub fn which(&self) -> Option<usize> {
        self.which
    }

    /// Takes `piece` and returns the text now safe to release: everything before the first stop
    /// string (then [`hit`](Self::hit) is true), else everything but the longest suffix that is a
    /// proper prefix of some stop string. Cost: O(held × stops) per piece.
    pub fn push(&mut self, piece: &str) -> String {
        if self.hit {
            return String::new();
        }
        self.held.push_str(piece);
        let found = self.stops.iter().enumerate().filter_map(|(k, s)| Some((self.held.find(s.as_str())?, k))).min();
        if let Some((at, k)) = found {
            self.hit = true;
            self.which = Some(self.index[k]);
            let out = self.held[..at].to_string();
            self.held.clear();
            return out;
        }
        let keep = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.held[i..])))
            .unwrap_or(self.held.len());
        let out = self.held[..keep].to_string();
        self.held.drain(..keep);
        out
    }

    /// The text still held (generation ended without completing a stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            out.push_str(&m.push(p));
        }
        let hit = m.hit();
        out.push_str(&m.finish());
        (out, hit)
    }

    #[test]
    fn a_stop_split_across_pieces_is_cut_and_never_released() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("abc E"), "abc ");
        assert_eq!(m.push("N"), "");
        assert_eq!(m.push("Dxyz"), "");
        assert!(m.hit());
        assert_eq!(m.which(), Some(0));
        assert_eq!(m.finish(), "");
        let mut m = StopMatcher::new(vec!["".into(), "zz".into(), "y".into()]);
        assert_eq!(m.push("xyzz"), "x");
        assert_eq!(m.which(), Some(2));
    }

    #[test]
    fn the_earliest_stop_wins_and_text_without_stops_passes_whole() {
        assert_eq!(run(&["cd", "b"], &["abcd"]), ("a".into(), true));
        assert_eq!(run(&["zz"], &["a", "z", "b"]), ("azb".into(), false));
        assert_eq!(run(&[], &["héllo", " wörld"]), ("héllo wörld".into(), false));
        assert_eq!(run(&["ö"], &["héllo", " wörld"]), ("héllo w".into(), true));
        assert_eq!(run(&["xy"], &["ax"]), ("ax".into(), false));
    }
}
