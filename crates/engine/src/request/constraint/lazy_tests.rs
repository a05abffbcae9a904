//! A lazy grammar (`tool_choice: auto`) meets its trigger inside free text. The text is
//! unmasked until the trigger, so a token that completes the trigger and carries bytes past
//! it the grammar refuses (`<tool_call` then `></`) could be sampled: `refuses` says so, and
//! `lazy_mask` is what the sampler draws from again. Every split of each format's trigger
//! into tokens that straddle its end is fed here, on a made-up vocabulary and on the real
//! model's: none errors.

use super::test_env::vocab_env;
use super::*;

/// Each call format's trigger, with a grammar of its calls laid out as the server lays
/// them out (`tools::grammar`): Hermes tags, Llama 3's bare object, Mistral's list.
fn formats() -> [(&'static str, String); 3] {
    let call = |key: &str| {
        json!({"type": "object", "properties": {"name": {"const": "get_weather"},
            key: {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            "required": ["name", key], "additionalProperties": false,
            "x-guidance": {"whitespace_flexible": false, "key_separator": ": ", "item_separator": ", "}})
    };
    [
        (
            "<tool_call>",
            format!("start: \"<tool_call>\\n\" obj \"\\n</tool_call>\"\nobj: %json {}\n", call("arguments")),
        ),
        ("{\"name\": \"", format!("start: obj\nobj: %json {}\n", call("parameters"))),
        ("[TOOL_CALLS]", format!("start: \"[TOOL_CALLS][\" obj \"]\"\nobj: %json {}\n", call("arguments"))),
    ]
}

fn lazy(compiler: &GrammarCompiler, trigger: &str, grammar: &str) -> SequenceConstraint {
    let constraint = Constraint::Lazy { trigger: trigger.into(), grammar: grammar.into() };
    let matcher = compiler.matcher(&constraint, &ConstraintCounters::default()).expect("compiles");
    SequenceConstraint::new(matcher).after_trigger(trigger)
}

/// Takes `tokens` (free text, or the trigger's start) one by one, as sampled.
fn feed(seq: &mut SequenceConstraint, env: &TokEnv, tokens: &[TokenId]) {
    for &token in tokens {
        let bytes = env.tok_trie().token(token).to_vec();
        assert!(!seq.refuses(&bytes), "{:?} is refused", String::from_utf8_lossy(&bytes));
        seq.advance(token, &bytes, true).expect("free text and the trigger's start are taken");
    }
}

/// After the trigger: the grammar holds, and the first allowed token at each step goes on
/// without an error for `steps` steps (or to the output's end).
fn goes_on(seq: &mut SequenceConstraint, env: &TokEnv, steps: usize) {
    for _ in 0..steps {
        if seq.is_complete() {
            return;
        }
        let mask = seq.mask().expect("a mask").expect("the grammar holds after its trigger");
        let token = mask.first_bit_set().expect("some token") as TokenId;
        let bytes = env.tok_trie().token(token).to_vec();
        if seq.advance(token, &bytes, true).expect("the grammar takes what its mask allows") == Advance::Complete {
            return;
        }
    }
}

/// The straddling token `word` after `prefix` of the trigger: refused (and then left out of
/// the mask the sampler draws from again, where the trigger's next byte is allowed) or
/// taken; either way the reply goes on. Returns whether it was refused.
fn straddle(
    compiler: &GrammarCompiler,
    env: &TokEnv,
    (trigger, grammar): (&str, &str),
    prefix: &[TokenId],
    word: TokenId,
    check_mask: bool,
) -> bool {
    let mut seq = lazy(compiler, trigger, grammar);
    feed(&mut seq, env, &env.tokenize_bytes(b"Let me check. "));
    feed(&mut seq, env, prefix);
    let bytes = env.tok_trie().token(word).to_vec();
    let refused = seq.refuses(&bytes);
    let chosen = if refused {
        let consumed: usize = prefix.iter().map(|&t| env.tok_trie().token(t).len()).sum();
        let rest = &trigger.as_bytes()[consumed..];
        let natural = env.tokenize_bytes(rest)[0];
        if check_mask {
            let mask = seq.lazy_mask().expect("a mask");
            assert!(!mask.is_allowed(word), "{:?} is refused but allowed", String::from_utf8_lossy(&bytes));
            assert!(mask.is_allowed(natural), "the trigger's own continuation is allowed");
            assert!(mask.num_set() > env.tok_trie().vocab_size() / 2, "only the breaking tokens are left out");
        }
        natural
    } else {
        word
    };
    let chosen_bytes = env.tok_trie().token(chosen).to_vec();
    seq.advance(chosen, &chosen_bytes, true).unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(&bytes)));
    // The trigger's rest, where the chosen token did not complete it.
    while seq.trigger.is_some() {
        let tail = seq.trigger.as_ref().map(|t| t.tail.clone()).unwrap_or_default();
        let done = (1..=trigger.len()).rev().find(|&n| tail.ends_with(&trigger.as_bytes()[..n])).unwrap_or(0);
        feed(&mut seq, env, &env.tokenize_bytes(&trigger.as_bytes()[done..]));
    }
    goes_on(&mut seq, env, 40);
    refused
}

/// Tokens of `vocab` that straddle the end of `trigger`: a proper suffix of it (its last
/// `n` bytes) then more, or the whole of it then more. With the `n` bytes they complete.
fn straddlers(env: &TokEnv, trigger: &[u8]) -> Vec<(TokenId, usize)> {
    let trie = env.tok_trie();
    let mut found = Vec::new();
    for token in 0..trie.vocab_size() as TokenId {
        let bytes = trie.token(token);
        if bytes.first() == Some(&0xFF) {
            continue; // special tokens: their text is a marker, never the trigger
        }
        for n in 1..trigger.len() {
            if bytes.len() > n && bytes.starts_with(&trigger[trigger.len() - n..]) {
                found.push((token, n));
            }
        }
        if let Some(at) = find(bytes, trigger).filter(|at| at + trigger.len() < bytes.len()) {
            found.push((token, trigger.len() + at));
        }
    }
    found
}

/// The trigger's bytes before the last `n` as the vocabulary tokenizes them; for a token
/// holding all of the trigger, nothing.
fn prefix_tokens(env: &TokEnv, trigger: &[u8], n: usize) -> Vec<TokenId> {
    env.tokenize_bytes(&trigger[..trigger.len().saturating_sub(n)])
}

#[test]
fn the_issue_s_tokens_are_refused_and_the_reply_goes_on_as_a_call() {
    let words: [&[u8]; 3] = [b"tool", b"call", b"></"];
    let env = vocab_env(&words);
    let compiler = GrammarCompiler::new(&env).expect("factory");
    let [hermes, ..] = formats();
    let mut seq = lazy(&compiler, hermes.0, &hermes.1);
    // `<`, `tool`, `_`, `call`: free text so far, and not yet the trigger.
    feed(&mut seq, &env, &[u32::from(b'<'), 257, u32::from(b'_'), 258]);
    assert!(seq.refuses(b"></"), "`></` completes the trigger and breaks the call at once");
    assert!(!seq.refuses(b">"), "`>` completes it and the call goes on");
    let mask = seq.lazy_mask().expect("a mask");
    assert!(!mask.is_allowed(259) && mask.is_allowed(u32::from(b'>')) && mask.is_allowed(u32::from(b'x')));
    assert!(mask.is_allowed(256), "the reply may still end here");
    // `>` completes the opener: the call grammar holds, and forces the call's start.
    let Advance::Continue(forced) = seq.advance(u32::from(b'>'), b">", true).expect("`>` is taken") else {
        panic!("the call has only begun");
    };
    assert!(forced.starts_with(&[u32::from(b'\n'), u32::from(b'{')]), "{forced:?}");
    assert!(seq.mask().expect("a mask").is_some(), "the call grammar holds");
}

#[test]
fn every_straddling_split_of_every_trigger_goes_on_in_a_made_up_vocabulary() {
    let tails: [&str; 12] = ["", "</", "\n", "\n{", "x", " ", "{\"", "[", "[{", "get", "\"get", "<"];
    let mut words: Vec<Vec<u8>> = Vec::new();
    for (trigger, _) in formats() {
        for n in 1..=trigger.len() {
            for tail in tails {
                let word = format!("{}{tail}", &trigger[trigger.len() - n..]).into_bytes();
                if word.len() > 1 && !words.contains(&word) {
                    words.push(word);
                }
            }
        }
    }
    let refs: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
    let env = vocab_env(&refs);
    let compiler = GrammarCompiler::new(&env).expect("factory");
    let (mut cases, mut refused) = (0, 0);
    for (trigger, grammar) in formats() {
        for (token, n) in straddlers(&env, trigger.as_bytes()) {
            let prefix = prefix_tokens(&env, trigger.as_bytes(), n);
            refused += usize::from(straddle(&compiler, &env, (trigger, &grammar), &prefix, token, true));
            cases += 1;
        }
    }
    eprintln!("{cases} straddling splits, {refused} refused and drawn again");
    assert!(cases > 100 && refused > 20 && refused < cases, "{cases} cases, {refused} refused");
}

#[test]
fn every_straddling_token_of_the_real_vocabulary_goes_on() {
    let config = crate::EngineConfig::new(rillm_models::model_for_tests());
    let model = crate::runtime::llama::load_model(&config).expect("the test model loads");
    let env = crate::runtime::llama::grammar_tok_env(&model);
    let compiler = GrammarCompiler::new(&env).expect("factory");
    for (trigger, grammar) in formats() {
        let (mut cases, mut refused) = (0, 0);
        for (token, n) in straddlers(&env, trigger.as_bytes()) {
            let prefix = prefix_tokens(&env, trigger.as_bytes(), n);
            // The mask's pass over the vocabulary is checked for the first few refusals.
            let was_refused = straddle(&compiler, &env, (trigger, &grammar), &prefix, token, refused < 3);
            refused += usize::from(was_refused);
            cases += 1;
        }
        eprintln!("{trigger:?}: {cases} straddling tokens, {refused} refused and drawn again");
        assert!(cases > 0 && refused > 0, "{trigger:?}: {cases} cases, {refused} refused");
    }
}
