//! A reasoning model's output read as it streams: what it thinks between `<think>` and
//! `</think>` apart from the answer after, the markers in neither, and how many tokens it
//! thought (a budget forces the closing marker at its end).
//!
//! Text-level, after stop strings and UTF-8 are settled, because the markers are not
//! single tokens in every vocabulary (Qwen3's are added tokens of their own; a model given a thinking
//! template writes `<`, `think`, `>`). Text that may be the start of a marker is held until
//! it is or is not; whitespace around the markers is dropped from both parts (the `\n\n` a
//! model writes after `</think>` is layout, not answer; llama-server keeps it in both).

use rillm_backend::{Reasoning, ThinkingStart};

use crate::runtime::{TokenId, Tokenizer};

pub(crate) const OPEN: &str = "<think>";
pub(crate) const CLOSE: &str = "</think>";
/// Fed at a thinking budget's end, as Qwen3's template writes an empty thought.
pub(crate) const FORCED_CLOSE: &str = "\n</think>\n\n";

/// How a request's choices read their output: where it starts, how output with no
/// opening marker reads, the thinking budget, and the tokens that close a thought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThinkingPlan {
    pub start: Phase,
    pub unmarked: ThinkingStart,
    /// Thinking tokens at most (`None`: the model's own; 0 never reaches the engine: the
    /// prompt closes the thought).
    pub budget: Option<u32>,
    /// [`FORCED_CLOSE`]'s tokens, fed where the server closes the thought.
    pub close: Vec<TokenId>,
}

impl ThinkingPlan {
    /// The plan for a request with `reasoning`: where its output starts, read from the
    /// prompt's end. A budget of 0 closes the thought in the prompt itself (as Qwen3's
    /// template does for `enable_thinking: false`); a constrained reply whose prompt leaves
    /// it undecided gets the thought opened there, so its grammar knows where the answer
    /// starts.
    pub fn for_prompt(
        reasoning: &Reasoning,
        prompt: &mut Vec<TokenId>,
        constrained: bool,
        tokenizer: &dyn Tokenizer,
    ) -> Self {
        let mut start = phase_after_prompt(&prompt_tail(prompt, tokenizer));
        let suffix = match (reasoning.budget, start) {
            (Some(0), Phase::Thinking) => FORCED_CLOSE.to_owned(),
            (Some(0), Phase::Undecided) => format!("{OPEN}\n{FORCED_CLOSE}"),
            (Some(0), Phase::Answer) => String::new(),
            (_, Phase::Undecided) if constrained => format!("{OPEN}\n"),
            _ => String::new(),
        };
        if !suffix.is_empty() {
            prompt.extend(tokenizer.tokenize(&suffix, false, true));
            start = phase_after_prompt(&suffix);
        }
        let budget = reasoning.budget.filter(|&limit| limit > 0);
        let close = tokenizer.tokenize(FORCED_CLOSE, false, true);
        Self { start, unmarked: reasoning.unmarked_start, budget, close }
    }

    pub fn split(&self) -> ThinkingSplit {
        ThinkingSplit::new(self.start, self.unmarked)
    }
}

/// The text of a prompt's last tokens: enough to hold a marker and the turn opening.
fn prompt_tail(prompt: &[TokenId], tokenizer: &dyn Tokenizer) -> String {
    let mut bytes = Vec::new();
    for &token in &prompt[prompt.len().saturating_sub(16)..] {
        tokenizer.append_token_bytes(token, &mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Where the reading is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Nothing but whitespace yet: an opening marker may still come.
    Undecided,
    Thinking,
    Answer,
}

/// A run of text for one part, with the ids of the tokens since the last piece sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    pub reasoning: bool,
    pub text: String,
    pub token_ids: Vec<TokenId>,
}

/// One choice's reading of its output.
#[derive(Debug, Clone)]
pub(crate) struct ThinkingSplit {
    phase: Phase,
    /// The phase output with no opening marker is in.
    unmarked: Phase,
    /// Text not yet sent: a marker's possible start, or whitespace that may end a part.
    held: String,
    held_ids: Vec<TokenId>,
    /// The current part has sent text (its leading whitespace is dropped until it has).
    part_started: bool,
    /// Tokens spent thinking; tokens read while undecided, until it is decided.
    thinking_tokens: u32,
    undecided_tokens: u32,
}

impl ThinkingSplit {
    /// A reading that starts in `phase` (`Undecided` where the prompt did not say), where
    /// unmarked output is read as `unmarked` says.
    pub fn new(phase: Phase, unmarked: ThinkingStart) -> Self {
        let unmarked = match unmarked {
            ThinkingStart::Thinking => Phase::Thinking,
            ThinkingStart::Answer => Phase::Answer,
        };
        Self {
            phase,
            unmarked,
            held: String::new(),
            held_ids: Vec::new(),
            part_started: false,
            thinking_tokens: 0,
            undecided_tokens: 0,
        }
    }

    /// Whether the output is still thinking (or may be: undecided, read as thinking).
    pub fn is_thinking(&self) -> bool {
        match self.phase {
            Phase::Thinking => true,
            Phase::Undecided => self.unmarked == Phase::Thinking,
            Phase::Answer => false,
        }
    }

    /// Whether the answer has begun (a constraint applies from here).
    pub fn is_answering(&self) -> bool {
        self.phase == Phase::Answer
    }

    /// Tokens spent thinking so far, the markers included.
    pub fn thinking_tokens(&self) -> u32 {
        self.thinking_tokens + if self.is_thinking() { self.undecided_tokens } else { 0 }
    }

    /// Reads one piece of output text and the tokens it came from: the pieces to send.
    pub fn push(&mut self, text: &str, token_ids: Vec<TokenId>) -> Vec<Piece> {
        let tokens = token_ids.len() as u32;
        match self.phase {
            Phase::Thinking => self.thinking_tokens += tokens,
            Phase::Undecided => self.undecided_tokens += tokens,
            Phase::Answer => {}
        }
        self.held.push_str(text);
        self.held_ids.extend(token_ids);
        let mut pieces = Vec::new();
        loop {
            let before = self.phase;
            match self.phase {
                Phase::Undecided => self.decide(),
                Phase::Thinking => self.think(&mut pieces),
                Phase::Answer => self.answer(&mut pieces),
            }
            if self.phase == before {
                break;
            }
        }
        self.attach_ids(&mut pieces);
        pieces
    }

    /// Everything held, at the output's end: an unfinished marker is text after all.
    pub fn finish(&mut self) -> Vec<Piece> {
        if self.phase == Phase::Undecided {
            self.settle(self.unmarked);
        }
        let reasoning = self.phase == Phase::Thinking;
        let text = std::mem::take(&mut self.held);
        let text = if self.part_started { text.trim_end() } else { text.trim() };
        let mut pieces = Vec::new();
        if !text.is_empty() {
            pieces.push(Piece { reasoning, text: text.to_owned(), token_ids: Vec::new() });
        }
        if pieces.is_empty() && !self.held_ids.is_empty() {
            pieces.push(Piece { reasoning, text: String::new(), token_ids: Vec::new() });
        }
        self.attach_ids(&mut pieces);
        pieces
    }

    /// Undecided: an opening marker after whitespace opens thinking; anything else is
    /// unmarked output; a marker's possible start (or whitespace alone) waits.
    fn decide(&mut self) {
        let start = self.held.trim_start();
        if let Some(rest) = start.strip_prefix(OPEN) {
            self.held = rest.to_owned();
            self.settle(Phase::Thinking);
        } else if !OPEN.starts_with(start) {
            self.settle(self.unmarked);
        }
    }

    fn settle(&mut self, phase: Phase) {
        if phase == Phase::Thinking {
            self.thinking_tokens += self.undecided_tokens;
        }
        self.undecided_tokens = 0;
        self.phase = phase;
    }

    /// Thinking: up to a closing marker is reasoning, after it the answer; text that may
    /// end the thought (whitespace, a marker's start) waits.
    fn think(&mut self, pieces: &mut Vec<Piece>) {
        if let Some(at) = self.held.find(CLOSE) {
            let rest = self.held.split_off(at + CLOSE.len());
            self.held.truncate(at);
            let thought = std::mem::take(&mut self.held);
            self.send(pieces, true, thought.trim_end());
            if pieces.last().is_none_or(|p| !p.reasoning) {
                // The marker's tokens go with the thought, even with no text to send.
                pieces.push(Piece { reasoning: true, text: String::new(), token_ids: Vec::new() });
            }
            self.held = rest;
            self.phase = Phase::Answer;
            self.part_started = false;
            return;
        }
        let keep = marker_start_len(&self.held, CLOSE);
        let body_end = self.held.len() - keep;
        let body_end = self.held[..body_end].trim_end().len();
        let tail = self.held.split_off(body_end);
        let thought = std::mem::replace(&mut self.held, tail);
        self.send(pieces, true, &thought);
    }

    fn answer(&mut self, pieces: &mut Vec<Piece>) {
        let text = std::mem::take(&mut self.held);
        self.send(pieces, false, &text);
    }

    /// Sends `text` as part of the current part, its leading whitespace dropped while the
    /// part has sent nothing.
    fn send(&mut self, pieces: &mut Vec<Piece>, reasoning: bool, text: &str) {
        let text = if self.part_started { text } else { text.trim_start() };
        if text.is_empty() {
            return;
        }
        self.part_started = true;
        pieces.push(Piece { reasoning, text: text.to_owned(), token_ids: Vec::new() });
    }

    /// The ids read since the last piece go with the last piece sent.
    fn attach_ids(&mut self, pieces: &mut [Piece]) {
        if let Some(last) = pieces.last_mut() {
            last.token_ids = std::mem::take(&mut self.held_ids);
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `marker`.
fn marker_start_len(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

/// Where a prompt leaves the output: inside a thought the template opened, after one it
/// closed (Qwen3's `enable_thinking: false` writes an empty one), or undecided. Read from
/// the prompt's last characters.
pub(crate) fn phase_after_prompt(prompt_tail: &str) -> Phase {
    let open = prompt_tail.rfind(OPEN);
    let close = prompt_tail.rfind(CLOSE);
    let after = |at: usize, marker: &str| prompt_tail[at + marker.len()..].trim().is_empty();
    match (open, close) {
        (Some(o), c) if c.is_none_or(|c| c < o) && after(o, OPEN) => Phase::Thinking,
        (_, Some(c)) if after(c, CLOSE) => Phase::Answer,
        _ => Phase::Undecided,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` one token each; returns (reasoning, answer, reasoning tokens).
    fn read(phase: Phase, unmarked: ThinkingStart, chunks: &[&str]) -> (String, String, u32) {
        let mut split = ThinkingSplit::new(phase, unmarked);
        let mut pieces = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            pieces.extend(split.push(chunk, vec![i as u32]));
        }
        pieces.extend(split.finish());
        let ids: usize = pieces.iter().map(|p| p.token_ids.len()).sum();
        assert_eq!(ids, chunks.len(), "every token id is sent once: {pieces:?}");
        let part = |reasoning: bool| {
            pieces.iter().filter(|p| p.reasoning == reasoning).map(|p| p.text.as_str()).collect::<String>()
        };
        (part(true), part(false), split.thinking_tokens())
    }

    /// Qwen3 writes its own opening marker; the markers are single tokens.
    #[test]
    fn qwen3_output_with_its_markers_splits_into_thought_and_answer() {
        let chunks = ["<think>", "\n", "The user", " greets me.", "\n", "</think>", "\n\n", "Hello", "!"];
        let (thought, answer, tokens) = read(Phase::Undecided, ThinkingStart::Answer, &chunks);
        assert_eq!(thought, "The user greets me.");
        assert_eq!(answer, "Hello!");
        assert_eq!(tokens, 6, "the opening marker through the closing one");
    }

    /// DeepSeek-R1's template opens the thought in the prompt; the model closes it.
    #[test]
    fn deepseek_r1_output_inside_a_thought_the_prompt_opened() {
        let chunks = ["Okay", ", 2+2", " is 4", ".\n</", "think", ">\n\n", "**4**"];
        let (thought, answer, tokens) = read(Phase::Thinking, ThinkingStart::Thinking, &chunks);
        assert_eq!((thought.as_str(), answer.as_str()), ("Okay, 2+2 is 4.", "**4**"));
        assert_eq!(tokens, 6);
    }

    /// DeepSeek-R1 distills sometimes drop the opening marker though the prompt lacks it.
    #[test]
    fn a_missing_opening_marker_is_read_by_the_parser_s_rule() {
        let chunks = ["Let me think", ".</think>", "Four."];
        assert_eq!(read(Phase::Undecided, ThinkingStart::Thinking, &chunks).0, "Let me think.");
        assert_eq!(read(Phase::Undecided, ThinkingStart::Thinking, &chunks).1, "Four.");
        // Qwen3's rule: no opening marker, no thought (the closing one is then text).
        let (thought, answer, tokens) = read(Phase::Undecided, ThinkingStart::Answer, &chunks);
        assert_eq!((thought.as_str(), answer.as_str(), tokens), ("", "Let me think.</think>Four.", 0));
    }

    #[test]
    fn a_reply_cut_inside_its_thought_is_all_reasoning() {
        let (thought, answer, tokens) = read(Phase::Thinking, ThinkingStart::Thinking, &["Hmm", ", maybe", " </th"]);
        assert_eq!((thought.as_str(), answer.as_str(), tokens), ("Hmm, maybe </th", "", 3));
    }

    #[test]
    fn a_marker_split_across_pieces_never_shows_in_either_part() {
        let chunks = ["<", "th", "ink>", "a<b", " <", "/", "thin", "k", "> c"];
        let (thought, answer, _) = read(Phase::Undecided, ThinkingStart::Answer, &chunks);
        assert_eq!((thought.as_str(), answer.as_str()), ("a<b", "c"));
    }

    #[test]
    fn a_closing_marker_s_tokens_go_with_the_thought() {
        let mut split = ThinkingSplit::new(Phase::Thinking, ThinkingStart::Thinking);
        assert_eq!(split.push("Hmm", vec![1]), vec![Piece { reasoning: true, text: "Hmm".into(), token_ids: vec![1] }]);
        let closed = split.push("</think>", vec![2]);
        assert_eq!(closed, vec![Piece { reasoning: true, text: String::new(), token_ids: vec![2] }]);
        assert_eq!(
            split.push("\n\nYes", vec![3, 4]),
            vec![Piece { reasoning: false, text: "Yes".into(), token_ids: vec![3, 4] }]
        );
    }

    #[test]
    fn the_prompt_s_end_says_where_output_starts() {
        assert_eq!(phase_after_prompt("<|im_start|>assistant\n<think>\n"), Phase::Thinking);
        assert_eq!(phase_after_prompt("assistant\n<think>\n\n</think>\n\n"), Phase::Answer);
        assert_eq!(phase_after_prompt("<|im_start|>assistant\n"), Phase::Undecided);
        assert_eq!(phase_after_prompt("use <think> tags\n<|im_start|>assistant\n"), Phase::Undecided);
    }
}
