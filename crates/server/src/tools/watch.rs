//! Ends generation where a reply repeats a call. Small models loop: the same call, name and
//! arguments, until `max_tokens`, or, handed a tool's result, the very call that result
//! answers. The formats drop the repeat from what they send (`ToolCallParser`); this watch
//! reads each choice's text as it comes and says what to do with the choice's generation:
//! end it at a repeat, or, where the repeat of an answered call is all the reply has made
//! and the request can be answered without calls, restart it as that answer
//! (`Constraint::Restartable`).

use std::sync::Arc;

use rillm_backend::ToolCallFormat;

use super::{AnsweredCall, Repeat, ToolCallParser};

/// How a request's calls are read back: their format, whether a repeated call is kept
/// (`--keep-repeated-calls`) or ends the reply, the calls the conversation has results of,
/// and whether a reply that only repeats one of those can restart as the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReading {
    pub format: ToolCallFormat,
    pub keep_repeats: bool,
    pub answered: Arc<Vec<AnsweredCall>>,
    pub can_restart: bool,
}

impl CallReading {
    /// A parser of one reply's calls, their ids starting `id_prefix`.
    pub fn parser(&self, id_prefix: impl Into<String>) -> ToolCallParser {
        let parser = ToolCallParser::new(id_prefix, self.format);
        if self.keep_repeats {
            parser.keeping_repeats()
        } else {
            parser.after(self.answered.to_vec())
        }
    }

    /// A watch over a request's `choices`, unless repeats are kept.
    pub fn repeat_watch(&self, choices: u32) -> Option<RepeatWatch> {
        (!self.keep_repeats).then(|| RepeatWatch {
            choices: (0..choices.max(1)).map(|_| (self.parser(""), false)).collect(),
            reading: self.clone(),
        })
    }
}

/// What to do with a choice's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    GoOn,
    /// It repeated a call: end it there.
    End,
    /// It repeated a call the conversation has the result of, and nothing else: make it
    /// again as the answer.
    Restart,
}

/// Each choice's calls, read to see when one repeats.
#[derive(Debug)]
pub struct RepeatWatch {
    /// Each choice's parser, and whether it was given its verdict.
    choices: Vec<(ToolCallParser, bool)>,
    reading: CallReading,
}

impl RepeatWatch {
    /// Reads more of choice `index`'s text; its verdict, given once (`GoOn` after).
    pub fn read(&mut self, index: u32, text: &str) -> Verdict {
        let Some((parser, judged)) = self.choices.get_mut(index as usize) else { return Verdict::GoOn };
        if *judged {
            return Verdict::GoOn;
        }
        parser.push(text);
        let verdict = match parser.repeat() {
            None => Verdict::GoOn,
            Some(Repeat::Answered { alone: true }) if self.reading.can_restart => Verdict::Restart,
            Some(_) => Verdict::End,
        };
        *judged = verdict != Verdict::GoOn;
        verdict
    }

    /// Choice `index` started again: read it from its start, its calls no longer compared
    /// with the answered ones (it follows the answer's constraint now).
    pub fn restarted(&mut self, index: u32) {
        if let Some(choice) = self.choices.get_mut(index as usize) {
            *choice = (ToolCallParser::new("", self.reading.format), false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CALL: &str = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n";

    fn reading(answered: Vec<AnsweredCall>, can_restart: bool) -> CallReading {
        CallReading { format: ToolCallFormat::Hermes, keep_repeats: false, answered: Arc::new(answered), can_restart }
    }

    #[test]
    fn a_choice_ends_once_at_its_first_repeat_and_the_others_go_on() {
        let mut watch = reading(Vec::new(), true).repeat_watch(2).expect("watched");
        assert_eq!(watch.read(0, CALL), Verdict::GoOn);
        assert_eq!(watch.read(1, CALL), Verdict::GoOn);
        assert_eq!(watch.read(0, &CALL[..20]), Verdict::GoOn);
        assert_eq!(watch.read(0, &CALL[20..]), Verdict::End, "the repeat is complete");
        assert_eq!(watch.read(0, CALL), Verdict::GoOn, "once");
        assert_eq!(watch.read(1, "more text"), Verdict::GoOn);
        assert!(CallReading { keep_repeats: true, ..reading(Vec::new(), true) }.repeat_watch(1).is_none());
    }

    #[test]
    fn a_reply_that_only_repeats_an_answered_call_restarts_as_the_answer() {
        let answered = vec![AnsweredCall { name: "f".into(), arguments: json!({"x": 1}) }];
        let mut watch = reading(answered.clone(), true).repeat_watch(1).expect("watched");
        assert_eq!(watch.read(0, CALL), Verdict::Restart);
        // Read again from its start, it is not compared with the answered calls.
        watch.restarted(0);
        assert_eq!(watch.read(0, CALL), Verdict::GoOn);
        // Where the request has no answer to restart into, or the reply said something
        // first, the repeat only ends it.
        let mut watch = reading(answered.clone(), false).repeat_watch(1).expect("watched");
        assert_eq!(watch.read(0, CALL), Verdict::End);
        let mut watch = reading(answered, true).repeat_watch(1).expect("watched");
        assert_eq!(watch.read(0, &format!("Checking. {CALL}")), Verdict::End);
        // Other arguments are a new call.
        let other = CALL.replace("\"x\": 1", "\"x\": 2");
        let mut watch = reading(vec![AnsweredCall { name: "f".into(), arguments: json!({"x": 1}) }], true)
            .repeat_watch(1)
            .expect("watched");
        assert_eq!(watch.read(0, &other), Verdict::GoOn);
    }
}
