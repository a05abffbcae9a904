//! Scanning text as it streams in: where a JSON value ends, and how much of a marker a
//! piece of text may be the start of.

/// Where a JSON value ends, found as its text streams in: brackets are counted outside
/// strings. The bytes it looks at are ASCII, so every end it reports is a char boundary.
#[derive(Debug, Default, Clone)]
pub(super) struct JsonScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl JsonScan {
    /// Already inside one object (a call's, past its header).
    pub(super) fn inside_object() -> Self {
        Self { depth: 1, ..Self::default() }
    }

    /// Reads `text` on from where the last call stopped; the offset just past the value's
    /// end if it is in `text`.
    pub(super) fn feed(&mut self, text: &str) -> Option<usize> {
        for (i, byte) in text.bytes().enumerate() {
            if self.in_string {
                match byte {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

/// Bytes at the end of `text` that begin `marker` (held back: they may become it).
pub(super) fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}
