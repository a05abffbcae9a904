//! Structured outputs: a request's [`Constraint`] compiled into an llguidance matcher, and
//! what a constrained sequence does at each step.
//!
//! Compiling happens in `submit`, on the caller's thread (the server submits constrained
//! requests from its blocking pool), never on the engine thread, and a compiled constraint
//! is cached by its text, so a repeated schema costs a clone. On the engine thread a
//! constrained sequence asks its matcher for the mask of allowed tokens before sampling and
//! tells it the token sampled. Then it takes the tokens the grammar forces next (the
//! `{"name": "` of a schema, closing brackets) as generated without sampling them: they go
//! to the model together with the step that computes the next free choice, not a forward
//! pass each (jump-forward). That needs a canonical tokenizer env (`llama::grammar_tok_env`).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use rillm_backend::{Constraint, ConstraintSnapshot, Rejected};
use serde_json::{json, Value};
use toktrie::{SimpleVob, TokEnv};

use crate::runtime::TokenId;

/// Compiled constraints kept for reuse. A compiled JSON schema is a few hundred KB at most.
const CACHE_ENTRIES: usize = 256;

/// Most forced tokens a sequence feeds in one step; the grammar forces the rest one by one
/// (its mask then allows a single token). Keeps a step within its batch limit.
pub(crate) const MAX_FORCED_PER_STEP: usize = 32;

/// The layout of JSON output unless a schema's own `x-guidance` says otherwise: the
/// separators `json.dumps` writes, no other whitespace. Fixed separators are forced tokens
/// (jump-forward feeds them without a forward pass each); with llguidance's default
/// flexible whitespace the model samples every separator and may wander into whitespace.
fn default_json_layout() -> Value {
    json!({"whitespace_flexible": false, "key_separator": ": ", "item_separator": ", "})
}

/// Counters for `/metrics`, shared by the compiler and the engine thread.
#[derive(Debug, Default)]
pub(crate) struct ConstraintCounters {
    compiles: AtomicU64,
    compile_micros: AtomicU64,
    compile_failures: AtomicU64,
    cache_hits: AtomicU64,
    constrained_tokens: AtomicU64,
    forced_tokens: AtomicU64,
    failures: AtomicU64,
    resamples: AtomicU64,
    answers_chosen: AtomicU64,
}

impl ConstraintCounters {
    pub fn snapshot(&self) -> ConstraintSnapshot {
        ConstraintSnapshot {
            compiles: self.compiles.load(Relaxed),
            compile_micros: self.compile_micros.load(Relaxed),
            compile_failures: self.compile_failures.load(Relaxed),
            cache_hits: self.cache_hits.load(Relaxed),
            constrained_tokens: self.constrained_tokens.load(Relaxed),
            forced_tokens: self.forced_tokens.load(Relaxed),
            failures: self.failures.load(Relaxed),
            resamples: self.resamples.load(Relaxed),
            answers_chosen: self.answers_chosen.load(Relaxed),
        }
    }

    /// A constrained sequence could not go on (an engine bug: every token it takes passed
    /// the grammar's mask or the lazy check first).
    pub fn record_failure(&self) {
        self.failures.fetch_add(1, Relaxed);
    }

    /// A token sampled before a lazy grammar's trigger would have opened it and broken it:
    /// the row was sampled again without such tokens.
    pub fn record_resample(&self) {
        self.resamples.fetch_add(1, Relaxed);
    }

    /// A reply under calls or an answer could not open a call as the model wrote it: it is
    /// the answer, under the answer's own constraint (`decode::answer_instead`).
    pub fn record_answer_chosen(&self) {
        self.answers_chosen.fetch_add(1, Relaxed);
    }

    pub fn record_tokens(&self, sampled: u64, forced: u64) {
        self.constrained_tokens.fetch_add(sampled + forced, Relaxed);
        self.forced_tokens.fetch_add(forced, Relaxed);
    }
}

/// Turns constraints into fresh matchers, one per request.
pub(crate) struct GrammarCompiler {
    factory: ParserFactory,
    /// Keyed by the constraint's kind and text; values are matchers that consumed nothing.
    cache: Mutex<lru::LruCache<String, Matcher>>,
}

impl GrammarCompiler {
    /// `tok_env` is the model's vocabulary as llguidance sees it; built once per model.
    pub fn new(tok_env: &TokEnv) -> Result<Self, String> {
        let mut factory = ParserFactory::new_simple(tok_env).map_err(|e| e.to_string())?;
        // Warnings and errors come back to the caller in the 400, not on stderr.
        factory.quiet();
        let entries = NonZeroUsize::new(CACHE_ENTRIES).unwrap_or(NonZeroUsize::MIN);
        Ok(Self { factory, cache: Mutex::new(lru::LruCache::new(entries)) })
    }

    /// A matcher for `constraint` at the start of generation. Costs a clone when the same
    /// constraint was compiled before; else a compile, bounded by llguidance's parser limits.
    pub fn matcher(&self, constraint: &Constraint, counters: &ConstraintCounters) -> Result<Matcher, Rejected> {
        let grammar = grammar_for(constraint)?;
        let key = cache_key(constraint, &grammar);
        if let Some(matcher) = self.lock_cache().get(&key) {
            counters.cache_hits.fetch_add(1, Relaxed);
            return Ok(matcher.clone());
        }
        let started = Instant::now();
        let matcher = Matcher::new(self.factory.create_parser(grammar));
        counters.compile_micros.fetch_add(started.elapsed().as_micros() as u64, Relaxed);
        if let Some(error) = matcher.get_error() {
            counters.compile_failures.fetch_add(1, Relaxed);
            return Err(Rejected::InvalidConstraint(format!(
                "the {} could not be compiled: {error}",
                constraint.kind()
            )));
        }
        counters.compiles.fetch_add(1, Relaxed);
        self.lock_cache().put(key, matcher.clone());
        Ok(matcher)
    }

    /// What a sequence carries for `constraint` from its first token: its matcher, waiting
    /// for a lazy one's trigger, with a restartable one's restart beside it.
    pub fn sequence_constraint(
        &self,
        constraint: &Constraint,
        counters: &ConstraintCounters,
    ) -> Result<SequenceConstraint, Rejected> {
        Ok(match constraint {
            Constraint::Lazy { trigger, .. } => {
                SequenceConstraint::new(self.matcher(constraint, counters)?).after_trigger(trigger)
            }
            Constraint::Restartable { constraint, restart } => {
                let restart = self.sequence_constraint(restart, counters)?;
                self.sequence_constraint(constraint, counters)?.restarting_as(restart)
            }
            Constraint::CallsOrAnswer { trigger, answer, .. } => {
                let answer = self.sequence_constraint(answer, counters)?;
                let calls = SequenceConstraint::new(self.matcher(constraint, counters)?).after_trigger(trigger);
                calls.opening_only().restarting_as(answer)
            }
            _ => SequenceConstraint::new(self.matcher(constraint, counters)?),
        })
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, lru::LruCache<String, Matcher>> {
        self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The llguidance grammar of a constraint.
fn grammar_for(constraint: &Constraint) -> Result<TopLevelGrammar, Rejected> {
    let invalid = |m: String| Rejected::InvalidConstraint(m);
    Ok(match constraint {
        Constraint::JsonSchema(schema) => TopLevelGrammar::from_json_schema(with_default_layout(schema.clone())),
        Constraint::JsonObject => TopLevelGrammar::from_json_schema(with_default_layout(json!({"type": "object"}))),
        Constraint::Regex(regex) => {
            regex_syntax::Parser::new().parse(regex).map_err(|e| invalid(format!("the regex is not valid: {e}")))?;
            TopLevelGrammar::from_regex(regex)
        }
        Constraint::Choice(choices) => {
            if choices.is_empty() {
                return Err(invalid("the choice list is empty".into()));
            }
            let alternatives: Vec<String> = choices.iter().map(|c| regex_syntax::escape(c)).collect();
            TopLevelGrammar::from_regex(&format!("(?:{})", alternatives.join("|")))
        }
        Constraint::Lark(grammar) | Constraint::Lazy { grammar, .. } => TopLevelGrammar::from_lark(grammar.clone()),
        // Its calls'; the answer compiles on its own (`sequence_constraint`).
        Constraint::CallsOrAnswer { calls, .. } => TopLevelGrammar::from_lark(calls.clone()),
        // Its first constraint's; the restart compiles on its own (`sequence_constraint`).
        Constraint::Restartable { constraint, .. } => return grammar_for(constraint),
    })
}

/// A schema without its own `x-guidance` gets the default layout; a non-object schema
/// (`true`) is left as it is.
fn with_default_layout(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object.entry("x-guidance").or_insert_with(default_json_layout);
    }
    schema
}

fn cache_key(constraint: &Constraint, grammar: &TopLevelGrammar) -> String {
    let text = serde_json::to_string(grammar).unwrap_or_default();
    format!("{}\u{0}{text}", constraint.kind())
}

/// What a constrained sequence carries from step to step. A clone starts where this one
/// is (each of a request's choices has its own).
#[derive(Clone)]
pub(crate) struct SequenceConstraint {
    matcher: Matcher,
    /// A lazy constraint not yet triggered: the output is free until this appears.
    trigger: Option<Trigger>,
    /// What the output follows if its reader restarts it (`Constraint::Restartable`).
    restart: Option<Box<SequenceConstraint>>,
    /// The output has taken a token (sampled or forced).
    started: bool,
}

#[derive(Clone)]
struct Trigger {
    text: Vec<u8>,
    /// Before the trigger the output may only be its beginning (`Constraint::CallsOrAnswer`):
    /// anything else is the answer, the restart.
    opening_only: bool,
    /// The output's last bytes, enough to find the trigger across token boundaries.
    tail: Vec<u8>,
}

impl std::fmt::Debug for SequenceConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceConstraint")
            .field("stopped", &self.matcher.is_stopped())
            .field("waiting", &self.trigger.is_some())
            .finish()
    }
}

/// What the grammar says after a token.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Advance {
    /// Generation goes on; these tokens are forced next (possibly none).
    Continue(Vec<TokenId>),
    /// The output is complete: nothing may follow it.
    Complete,
}

impl SequenceConstraint {
    pub fn new(matcher: Matcher) -> Self {
        Self { matcher, trigger: None, restart: None, started: false }
    }

    /// Restarted, the output follows `restart` from its start.
    pub fn restarting_as(mut self, restart: SequenceConstraint) -> Self {
        self.restart = Some(Box::new(restart));
        self
    }

    /// The constraint a restarted output follows, once.
    pub fn take_restart(&mut self) -> Option<SequenceConstraint> {
        self.restart.take().map(|restart| *restart)
    }

    /// Before its trigger, the output may only be the trigger's beginning (after whitespace):
    /// anything else is the restart's (`opens`).
    fn opening_only(mut self) -> Self {
        if let Some(trigger) = self.trigger.as_mut() {
            trigger.opening_only = true;
        }
        self
    }

    /// Under `Constraint::CallsOrAnswer`, before its trigger: the output must open a call or
    /// be the answer (`opens`).
    pub fn awaits_opening(&self) -> bool {
        self.trigger.as_ref().is_some_and(|t| t.opening_only)
    }

    /// Whether the output, `bytes` added, may still open with the trigger (or has): always,
    /// but under `Constraint::CallsOrAnswer` before its trigger, where an output that cannot
    /// (or that `ends` there) is the answer.
    pub fn opens(&self, bytes: &[u8], ends: bool) -> bool {
        let Some(trigger) = self.trigger.as_ref().filter(|t| t.opening_only) else { return true };
        if ends {
            return false;
        }
        let mut text = trigger.tail.clone();
        text.extend_from_slice(bytes);
        let text = text.trim_ascii_start();
        text.starts_with(&trigger.text) || trigger.text.starts_with(text)
    }

    /// Before its first token under `Constraint::CallsOrAnswer`: the trigger's tokens, to
    /// feed as drafts after the prompt (`Sequence::opening_drafts`); otherwise none.
    pub fn opening_tokens(&self) -> Vec<TokenId> {
        match (self.trigger.as_ref(), self.matcher.tok_env()) {
            (Some(trigger), Ok(env)) if trigger.opening_only && !self.started => env.tokenize_bytes(&trigger.text),
            _ => Vec::new(),
        }
    }

    /// Whether the output has taken a token under this constraint.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The matcher applies from the first occurrence of `trigger` in the output on.
    pub fn after_trigger(mut self, trigger: &str) -> Self {
        self.trigger = Some(Trigger { text: trigger.as_bytes().to_vec(), opening_only: false, tail: Vec::new() });
        self
    }

    /// Tokens the model may sample now (end-of-generation only where the output may end);
    /// `None` while a lazy constraint waits for its trigger (anything goes).
    pub fn mask(&mut self) -> Result<Option<SimpleVob>, String> {
        if self.trigger.is_some() {
            return Ok(None);
        }
        let mask = self.matcher.compute_mask().map_err(|e| grammar_error(&e.to_string()))?;
        if mask.is_zero() {
            return Err(grammar_error("no token can continue the output"));
        }
        Ok(Some(mask))
    }

    /// Whether taking a token whose text is `bytes` now would break the constraint. Only a
    /// lazy one waiting for its trigger can be broken so (elsewhere the mask guards every
    /// token): a token that completes the trigger and carries bytes past it that the
    /// grammar refuses (`<tool_call` then `></`). The text is free until the trigger, so
    /// nothing masked such a token; the sampler draws again without it (`lazy_mask`).
    pub fn refuses(&mut self, bytes: &[u8]) -> bool {
        let Some(trigger) = self.trigger.as_ref() else { return false };
        let from = trigger.tail.len().saturating_sub(trigger.text.len().saturating_sub(1));
        let mut tail = trigger.tail[from..].to_vec();
        tail.extend_from_slice(bytes);
        let Some(at) = find(&tail, &trigger.text) else { return false };
        let Ok(env) = self.matcher.tok_env() else { return true };
        let tokens = env.tokenize_bytes(&tail[at..]);
        self.matcher.validate_tokens(&tokens).map_or(true, |valid| valid < tokens.len())
    }

    /// While a lazy constraint waits for its trigger: every token but those `refuses`
    /// (a pass over the vocabulary, taken only in the rare step whose sample was refused).
    pub fn lazy_mask(&mut self) -> Result<SimpleVob, String> {
        let env = self.matcher.tok_env().map_err(|e| grammar_error(&e.to_string()))?;
        let trie = env.tok_trie();
        let mut mask = trie.alloc_token_set();
        for token in 0..trie.vocab_size() as u32 {
            if !self.refuses(trie.token(token)) {
                mask.allow_token(token);
            }
        }
        Ok(mask)
    }

    /// Tokens the grammar forces before the output's first free choice (a JSON object's
    /// `{"` and first key, a tool call's markup and `{"name": "`), at most `limit`; not
    /// taken in (`take_forced` does that once they are fed).
    pub fn forced_at_start(&mut self, limit: usize) -> Vec<TokenId> {
        if self.trigger.is_some() {
            return Vec::new();
        }
        let mut forced = self.matcher.compute_ff_tokens();
        forced.truncate(limit.min(MAX_FORCED_PER_STEP));
        forced
    }

    /// Takes in tokens `forced_at_start` gave.
    pub fn take_forced(&mut self, tokens: &[TokenId]) -> Result<(), String> {
        self.started |= !tokens.is_empty();
        self.matcher.consume_tokens(tokens).map_err(|e| grammar_error(&e.to_string()))
    }

    /// How many of `tokens`' first tokens the grammar accepts from here (all of them while
    /// a lazy constraint waits for its trigger). Checks them without taking them in.
    pub fn allowed_prefix(&mut self, tokens: &[TokenId]) -> usize {
        if self.trigger.is_some() {
            return tokens.len();
        }
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }

    /// Takes the sampled `token` (whose text is `bytes`) and, with `jump_forward`, whatever
    /// the grammar forces after it (without, forced tokens are sampled one by one from a
    /// mask that allows only them).
    pub fn advance(&mut self, token: TokenId, bytes: &[u8], jump_forward: bool) -> Result<Advance, String> {
        self.started = true;
        match self.trigger.as_mut() {
            Some(trigger) => {
                trigger.tail.extend_from_slice(bytes);
                let Some(at) = find(&trigger.tail, &trigger.text) else {
                    // Keep only what may still be the start of the trigger.
                    let keep = trigger.text.len().saturating_sub(1);
                    let drop = trigger.tail.len().saturating_sub(keep);
                    trigger.tail.drain(..drop);
                    return Ok(Advance::Continue(Vec::new()));
                };
                // Triggered: the grammar reads the output from the trigger on (the model's
                // own tokens are in KV; the grammar needs only their bytes).
                let from_trigger = trigger.tail.split_off(at);
                self.trigger = None;
                let env = self.matcher.tok_env().map_err(|e| grammar_error(&e.to_string()))?;
                let tokens = env.tokenize_bytes(&from_trigger);
                self.matcher.consume_tokens(&tokens).map_err(|e| grammar_error(&e.to_string()))?;
            }
            None => self.matcher.consume_token(token).map_err(|e| grammar_error(&e.to_string()))?,
        }
        if self.matcher.is_stopped() {
            return Ok(Advance::Complete);
        }
        let mut forced = if jump_forward { self.matcher.compute_ff_tokens() } else { Vec::new() };
        forced.truncate(MAX_FORCED_PER_STEP);
        if !forced.is_empty() {
            self.matcher.consume_tokens(&forced).map_err(|e| grammar_error(&e.to_string()))?;
        }
        Ok(Advance::Continue(forced))
    }

    /// After forced tokens: is the output complete?
    pub fn is_complete(&self) -> bool {
        self.trigger.is_none() && self.matcher.is_stopped()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len().max(1)).position(|w| w == needle)
}

fn grammar_error(detail: &str) -> String {
    format!("constrained decoding failed: {detail}")
}

/// A compiler over a byte-level vocabulary, for tests without a model.
#[cfg(test)]
pub(crate) mod test_env {
    use std::sync::Arc;
    use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};

    /// A byte-level vocabulary (token i is byte i, plus an end token), canonical, so
    /// llguidance forces tokens as it does with the real model's env.
    pub(crate) fn byte_env() -> TokEnv {
        vocab_env(&[])
    }

    /// The byte-level vocabulary, then an end token (256), then `words` (257 on). Text is
    /// tokenized byte by byte.
    pub(crate) fn vocab_env(words: &[&[u8]]) -> TokEnv {
        struct Bytes(TokTrie);
        impl TokenizerEnv for Bytes {
            fn tok_trie(&self) -> &TokTrie {
                &self.0
            }
            fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
                s.iter().map(|&b| u32::from(b)).collect()
            }
        }
        let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        vocab.push(b"\xFF<end>".to_vec());
        vocab.extend(words.iter().map(|w| w.to_vec()));
        let info = TokRxInfo::new(vocab.len() as u32, 256);
        Arc::new(Bytes(TokTrie::from(&info, &vocab)))
    }
}

#[cfg(test)]
mod lazy_tests;

#[cfg(test)]
mod tests {
    use super::test_env::byte_env;
    use super::*;

    fn run(constraint: &Constraint, pick: impl Fn(&SimpleVob) -> u32) -> (String, usize, usize) {
        let compiler = GrammarCompiler::new(&byte_env()).expect("factory");
        let counters = ConstraintCounters::default();
        let mut seq = SequenceConstraint::new(compiler.matcher(constraint, &counters).expect("compiles"));
        let (mut out, mut sampled, mut forced_count) = (Vec::new(), 0, 0);
        for _ in 0..200 {
            let mask = seq.mask().expect("mask").expect("not lazy");
            let token = pick(&mask);
            if token == 256 {
                break;
            }
            sampled += 1;
            out.push(token as u8);
            match seq.advance(token, &[token as u8], true).expect("advance") {
                Advance::Complete => break,
                Advance::Continue(forced) => {
                    forced_count += forced.len();
                    out.extend(forced.iter().map(|&t| t as u8));
                    if seq.is_complete() {
                        break;
                    }
                }
            }
        }
        (String::from_utf8(out).expect("utf8"), sampled, forced_count)
    }

    #[test]
    fn a_lazy_constraint_leaves_text_free_until_its_trigger_then_holds() {
        let compiler = GrammarCompiler::new(&byte_env()).expect("factory");
        let lazy = Constraint::Lazy { trigger: "<t>".into(), grammar: r#"start: "<t>" /[0-9]+/ "</t>""#.into() };
        let matcher = compiler.matcher(&lazy, &ConstraintCounters::default()).expect("compiles");
        let mut seq = SequenceConstraint::new(matcher).after_trigger("<t>");
        for &b in b"free text, even <a> and <" {
            assert_eq!(seq.mask().expect("mask"), None, "no mask before the trigger");
            assert_eq!(seq.advance(u32::from(b), &[b], true).expect("advance"), Advance::Continue(Vec::new()));
        }
        // The trigger completes across tokens: from here the grammar holds.
        assert_eq!(seq.advance(u32::from(b't'), b"t", true).expect("t"), Advance::Continue(Vec::new()));
        assert_eq!(seq.advance(u32::from(b'>'), b">", true).expect(">"), Advance::Continue(Vec::new()));
        let mask = seq.mask().expect("mask").expect("constrained now");
        assert!(mask.is_allowed(u32::from(b'7')) && !mask.is_allowed(u32::from(b'x')));
        assert_eq!(seq.advance(u32::from(b'7'), b"7", true).expect("7"), Advance::Continue(Vec::new()));
        assert!(!seq.is_complete());
    }

    #[test]
    fn a_schema_forces_its_keys_and_separators() {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"}},
            "required": ["name", "ok"], "additionalProperties": false});
        // `"` where allowed (strings close at once), else the lowest allowed byte (`f`alse).
        let pick = |m: &SimpleVob| {
            if m.is_allowed(u32::from(b'"')) {
                u32::from(b'"')
            } else {
                m.first_bit_set().expect("some token") as u32
            }
        };
        let (text, sampled, forced) = run(&Constraint::JsonSchema(schema), pick);
        let value: Value = serde_json::from_str(&text).expect(&text);
        assert_eq!(value, json!({"name": "", "ok": false}), "{text}");
        assert_eq!(text, r#"{"name": "", "ok": false}"#, "the default layout is json.dumps'");
        assert!(forced > sampled, "most of the object is forced: {forced} forced, {sampled} sampled ({text})");
    }

    #[test]
    fn a_choice_ends_on_one_of_its_strings() {
        let choice = Constraint::Choice(vec!["yes".into(), "no".into(), "a.b".into()]);
        let (text, _, _) = run(&choice, |m| m.first_bit_set().expect("some token") as u32);
        assert_eq!(text, "a.b", "the dot is literal");
    }

    #[test]
    fn the_same_constraint_compiles_once() {
        let compiler = GrammarCompiler::new(&byte_env()).expect("factory");
        let counters = ConstraintCounters::default();
        let regex = Constraint::Regex("[0-9]{3}".into());
        for _ in 0..3 {
            compiler.matcher(&regex, &counters).expect("compiles");
        }
        let snap = counters.snapshot();
        assert_eq!((snap.compiles, snap.cache_hits), (1, 2));
    }

    #[test]
    fn every_schema_the_bench_ships_compiles() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/schemas");
        let compiler = GrammarCompiler::new(&byte_env()).expect("factory");
        let counters = ConstraintCounters::default();
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).expect("schemas dir") {
            let path = entry.expect("entry").path();
            let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
            if let Err(e) = compiler.matcher(&Constraint::JsonSchema(schema), &counters) {
                panic!("{}: {e}", path.display());
            }
            count += 1;
        }
        assert!(count >= 30, "{count} schemas");
    }

    #[test]
    fn bad_constraints_are_refused_with_the_compilers_reason() {
        let compiler = GrammarCompiler::new(&byte_env()).expect("factory");
        let counters = ConstraintCounters::default();
        for (bad, needle) in [
            (Constraint::Regex("(unclosed".into()), "regex"),
            (Constraint::Lark("start: foo".into()), "foo"),
            (Constraint::JsonSchema(json!({"type": "object", "minProperties": "x"})), "minProperties"),
            (Constraint::Choice(vec![]), "empty"),
        ] {
            match compiler.matcher(&bad, &counters) {
                Err(Rejected::InvalidConstraint(message)) => assert!(message.contains(needle), "{message}"),
                other => panic!("{bad:?}: {:?}", other.map(|_| "compiled")),
            }
        }
    }
}
