//! Turns a stream of token bytes into streamable text.
//!
//! Two things make this more than concatenation: a UTF-8 character can be split across
//! tokens (its bytes are held until the character is whole), and a stop string must never
//! reach the client (text that could be the start of one is held until it can't be).

use crate::runtime::TokenId;

/// What one token produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextPiece {
    /// Nothing to send yet: the token's bytes are held back.
    Held,
    /// Text to send, with the ids of every token since the last piece.
    Text { text: String, token_ids: Vec<TokenId> },
    /// A stop string matched: send `text` (what came before it) and finish.
    Stopped { text: String, token_ids: Vec<TokenId> },
}

#[derive(Debug, Default)]
pub struct TextStream {
    stops: Vec<String>,
    /// The stop string that matched ends the text rather than being cut off.
    include_stop: bool,
    /// Bytes of an incomplete trailing UTF-8 character.
    partial: Vec<u8>,
    /// Decoded text that may be the start of a stop string.
    held: String,
    pending_ids: Vec<TokenId>,
}

impl TextStream {
    pub fn new(stops: &[String]) -> Self {
        let stops = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        Self { stops, ..Self::default() }
    }

    /// The matched stop string is sent as the text's end (vLLM's `include_stop_str_in_output`).
    pub fn including_stops(mut self) -> Self {
        self.include_stop = true;
        self
    }

    pub fn push(&mut self, token: TokenId, bytes: &[u8]) -> TextPiece {
        self.pending_ids.push(token);
        self.partial.extend_from_slice(bytes);
        decode_complete_prefix(&mut self.partial, &mut self.held);

        if let Some((at, len)) = self.earliest_stop() {
            self.held.truncate(if self.include_stop { at + len } else { at });
            return TextPiece::Stopped {
                text: std::mem::take(&mut self.held),
                token_ids: std::mem::take(&mut self.pending_ids),
            };
        }
        let keep = self.stop_prefix_suffix_len();
        if self.held.len() == keep {
            return TextPiece::Held;
        }
        let tail = self.held.split_off(self.held.len() - keep);
        TextPiece::Text {
            text: std::mem::replace(&mut self.held, tail),
            token_ids: std::mem::take(&mut self.pending_ids),
        }
    }

    /// As `push`, without looking for stop strings (vLLM's `min_tokens`: none ends the
    /// output before it is that long): only an unfinished character is held.
    pub fn push_unchecked(&mut self, token: TokenId, bytes: &[u8]) -> TextPiece {
        self.pending_ids.push(token);
        self.partial.extend_from_slice(bytes);
        decode_complete_prefix(&mut self.partial, &mut self.held);
        if self.held.is_empty() {
            return TextPiece::Held;
        }
        TextPiece::Text { text: std::mem::take(&mut self.held), token_ids: std::mem::take(&mut self.pending_ids) }
    }

    /// Everything still held, at the end of generation (an unfinished character becomes
    /// U+FFFD). `None` when nothing is left.
    pub fn finish(&mut self) -> Option<(String, Vec<TokenId>)> {
        let mut text = std::mem::take(&mut self.held);
        text.push_str(&String::from_utf8_lossy(&self.partial));
        self.partial.clear();
        let ids = std::mem::take(&mut self.pending_ids);
        (!text.is_empty() || !ids.is_empty()).then_some((text, ids))
    }

    /// Where the earliest stop string starts in `held`, and its length.
    fn earliest_stop(&self) -> Option<(usize, usize)> {
        self.stops.iter().filter_map(|s| Some((self.held.find(s.as_str())?, s.len()))).min_by_key(|&(at, _)| at)
    }

    /// Length of the longest suffix of `held` that is a proper prefix of a stop string.
    fn stop_prefix_suffix_len(&self) -> usize {
        let longest_stop = self.stops.iter().map(String::len).max().unwrap_or(0);
        let start_min = self.held.len().saturating_sub(longest_stop.saturating_sub(1));
        (start_min..self.held.len())
            .filter(|&i| self.held.is_char_boundary(i))
            .find(|&i| {
                let suffix = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(suffix))
            })
            .map_or(0, |i| self.held.len() - i)
    }
}

/// Moves the longest valid UTF-8 prefix of `bytes` into `out`; invalid sequences become
/// U+FFFD, an incomplete trailing character stays in `bytes`.
fn decode_complete_prefix(bytes: &mut Vec<u8>, out: &mut String) {
    let mut consumed = 0;
    loop {
        match std::str::from_utf8(&bytes[consumed..]) {
            Ok(s) => {
                out.push_str(s);
                consumed = bytes.len();
                break;
            }
            Err(e) => {
                let valid = consumed + e.valid_up_to();
                // from_utf8 just validated this range, so the fallback never applies.
                out.push_str(std::str::from_utf8(&bytes[consumed..valid]).unwrap_or_default());
                match e.error_len() {
                    Some(bad) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        consumed = valid + bad;
                    }
                    None => {
                        consumed = valid;
                        break;
                    }
                }
            }
        }
    }
    bytes.drain(..consumed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(p: TextPiece) -> String {
        match p {
            TextPiece::Text { text, .. } | TextPiece::Stopped { text, .. } => text,
            TextPiece::Held => String::new(),
        }
    }

    #[test]
    fn multibyte_character_split_across_tokens_is_held_until_whole() {
        let mut s = TextStream::new(&[]);
        let euro = "€".as_bytes();
        assert_eq!(s.push(1, &euro[..1]), TextPiece::Held);
        assert_eq!(s.push(2, &euro[1..2]), TextPiece::Held);
        assert_eq!(s.push(3, &euro[2..]), TextPiece::Text { text: "€".into(), token_ids: vec![1, 2, 3] });
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut s = TextStream::new(&[]);
        assert_eq!(text(s.push(1, b"a\xffb")), "a\u{FFFD}b");
    }

    #[test]
    fn stop_string_across_tokens_is_never_emitted() {
        let mut s = TextStream::new(&["END".to_string()]);
        assert_eq!(text(s.push(1, b"hello E")), "hello ");
        assert_eq!(s.push(2, b"N"), TextPiece::Held);
        assert_eq!(s.push(3, b"D and more"), TextPiece::Stopped { text: String::new(), token_ids: vec![2, 3] });
    }

    #[test]
    fn false_start_of_stop_string_is_released() {
        let mut s = TextStream::new(&["END".to_string()]);
        assert_eq!(text(s.push(1, b"E")), "");
        assert_eq!(text(s.push(2, b"X")), "EX");
    }

    #[test]
    fn earliest_of_several_stops_wins_and_text_before_it_is_kept() {
        let mut s = TextStream::new(&["world".to_string(), "lo".to_string()]);
        assert_eq!(s.push(7, b"hello world"), TextPiece::Stopped { text: "hel".into(), token_ids: vec![7] });
    }

    #[test]
    fn finish_flushes_held_text_and_incomplete_bytes() {
        let mut s = TextStream::new(&["STOP".to_string()]);
        assert_eq!(text(s.push(1, b"a ST")), "a ");
        s.push(2, &"é".as_bytes()[..1]);
        assert_eq!(s.finish(), Some(("ST\u{FFFD}".to_string(), vec![2])));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn multibyte_text_near_a_stop_prefix_splits_on_char_boundaries() {
        let mut s = TextStream::new(&["éX".to_string()]);
        assert_eq!(text(s.push(1, "aé".as_bytes())), "a");
        assert_eq!(text(s.push(2, b"y")), "éy");
    }

    #[test]
    fn unchecked_pieces_pass_stop_strings_and_release_what_was_held() {
        let mut s = TextStream::new(&["END".to_string()]);
        assert_eq!(text(s.push(1, b"a E")), "a ");
        // Stops not looked for yet: the held "E" and an "END" go out, a split character waits.
        assert_eq!(text(s.push_unchecked(2, b"ND b")), "END b");
        let e_acute = "é".as_bytes();
        assert_eq!(s.push_unchecked(3, &e_acute[..1]), TextPiece::Held);
        assert_eq!(s.push_unchecked(4, &e_acute[1..]), TextPiece::Text { text: "é".into(), token_ids: vec![3, 4] });
        // Looked for again from here on.
        assert_eq!(s.push(5, b" END"), TextPiece::Stopped { text: " ".into(), token_ids: vec![5] });
    }

    #[test]
    fn an_included_stop_string_ends_the_text() {
        let mut s = TextStream::new(&["END".to_string()]).including_stops();
        assert_eq!(text(s.push(1, b"hello E")), "hello ");
        assert_eq!(s.push(2, b"ND and more"), TextPiece::Stopped { text: "END".into(), token_ids: vec![2] });
    }
}
