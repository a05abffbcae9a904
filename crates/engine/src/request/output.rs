//! What a sequence has generated and how it reaches its caller: the token ids, the text
//! stream that turns their bytes into whole characters and holds stop strings back, a
//! reasoning model's thought split from its answer, and the log-probabilities waiting for
//! the text piece their tokens end up in.

use std::collections::VecDeque;

use rillm_backend::{StreamEvent, TokenLogprob};
use tokio::sync::mpsc::UnboundedSender;

use super::text_stream::{TextPiece, TextStream};
use super::thinking::{Piece, ThinkingSplit};
use crate::runtime::TokenId;

#[derive(Debug, Default)]
pub(crate) struct Output {
    /// Every sampled or forced token, in order.
    ids: Vec<TokenId>,
    text: TextStream,
    /// Log-probabilities of tokens not yet sent, in token order: each text piece takes as
    /// many as it has token ids.
    unsent_logprobs: VecDeque<TokenLogprob>,
    /// One token's bytes (a buffer reused).
    token_bytes: Vec<u8>,
    /// A reasoning model's output: thought and answer sent apart (`None`: text as it is).
    thinking: Option<ThinkingSplit>,
}

/// What taking in one token's text did.
pub(crate) enum Streamed {
    /// Sent or held back; the output goes on.
    GoesOn,
    /// A stop string matched: the text before it was sent.
    Stopped,
}

impl Output {
    pub fn new(text: TextStream, thinking: Option<ThinkingSplit>) -> Self {
        Self { text, thinking, ..Self::default() }
    }

    /// Whether the output is (or may still be) a thought.
    pub fn is_thinking(&self) -> bool {
        self.thinking.as_ref().is_some_and(ThinkingSplit::is_thinking)
    }

    /// Whether the answer has begun: from here a constraint applies (at once where the
    /// output is not split).
    pub fn is_answering(&self) -> bool {
        self.thinking.as_ref().is_none_or(ThinkingSplit::is_answering)
    }

    /// Tokens spent thinking so far.
    pub fn thinking_tokens(&self) -> u32 {
        self.thinking.as_ref().map_or(0, ThinkingSplit::thinking_tokens)
    }

    pub fn ids(&self) -> &[TokenId] {
        &self.ids
    }

    pub fn len(&self) -> u32 {
        self.ids.len() as u32
    }

    pub fn last(&self) -> Option<TokenId> {
        self.ids.last().copied()
    }

    /// A buffer for one token's bytes, cleared.
    pub fn token_bytes(&mut self) -> &mut Vec<u8> {
        self.token_bytes.clear();
        &mut self.token_bytes
    }

    pub fn note_logprob(&mut self, logprob: TokenLogprob) {
        self.unsent_logprobs.push_back(logprob);
    }

    /// Forgets the last noted log-probability: its token was not taken.
    pub fn drop_last_logprob(&mut self) {
        self.unsent_logprobs.pop_back();
    }

    /// Counts `token` as generated (its text comes with `stream`).
    pub fn push_id(&mut self, token: TokenId) {
        self.ids.push(token);
    }

    /// Streams the text of the token just pushed, whose bytes are in `token_bytes`; stop
    /// strings are looked for unless `unchecked` (before `min_tokens`).
    pub fn stream(&mut self, token: TokenId, unchecked: bool, to: &Events) -> Streamed {
        let piece = if unchecked {
            self.text.push_unchecked(token, &self.token_bytes)
        } else {
            self.text.push(token, &self.token_bytes)
        };
        match piece {
            TextPiece::Held => Streamed::GoesOn,
            TextPiece::Text { text, token_ids } => {
                self.send(text, token_ids, to);
                Streamed::GoesOn
            }
            TextPiece::Stopped { text, token_ids } => {
                if !text.is_empty() {
                    self.send(text, token_ids, to);
                }
                Streamed::Stopped
            }
        }
    }

    /// Sends whatever text is held back.
    pub fn flush(&mut self, to: &Events) {
        if let Some((text, token_ids)) = self.text.finish() {
            self.send(text, token_ids, to);
        }
        let rest = self.thinking.as_mut().map(ThinkingSplit::finish).unwrap_or_default();
        for piece in rest {
            self.send_piece(piece, to);
        }
    }

    fn send(&mut self, text: String, token_ids: Vec<TokenId>, to: &Events) {
        let Some(split) = self.thinking.as_mut() else {
            return self.send_piece(Piece { reasoning: false, text, token_ids }, to);
        };
        for piece in split.push(&text, token_ids) {
            self.send_piece(piece, to);
        }
    }

    fn send_piece(&mut self, piece: Piece, to: &Events) {
        let Piece { reasoning, text, token_ids } = piece;
        let take = token_ids.len().min(self.unsent_logprobs.len());
        let logprobs = self.unsent_logprobs.drain(..take).collect();
        let index = to.index;
        let event = if reasoning {
            StreamEvent::Reasoning { index, text, token_ids, logprobs }
        } else {
            StreamEvent::Text { index, text, token_ids, logprobs }
        };
        // A failed send means the caller is gone; the scheduler reaps it before the next step.
        let _ = to.sender.send(event);
    }
}

/// Where a choice's events go.
pub(crate) struct Events<'a> {
    pub sender: &'a UnboundedSender<StreamEvent>,
    pub index: u32,
}
