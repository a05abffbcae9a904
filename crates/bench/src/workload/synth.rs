//! Synthetic prompts of exact token lengths, with shared prefixes where the workload says so.
//!
//! Prompts are seeded sequences of common English words. With a tokenizer, the vocabulary
//! is first narrowed to words that are one token each in running text, so a prompt of N
//! words is N tokens plus the prompt's fixed overhead (BOS, chat template); each prompt is
//! then counted and its own tail adjusted until the count is exact. Prefix blocks (a
//! Mooncake hash id, a shared system prompt) are pure functions of their id, so equal ids
//! give byte-identical text and prefix sharing in a trace is prefix sharing on the wire.

use futures::StreamExt;
use rand::{Rng, SeedableRng};

use crate::workload::spec::PromptSpec;
use crate::workload::tokens::{TokenCounter, TokenizerError};

/// How many times one prompt is recounted and adjusted before settling for the closest.
const FIT_ROUNDS: usize = 6;

pub struct PromptSynth<'a> {
    counter: &'a TokenCounter,
    words: Vec<&'static str>,
    /// Separates this run's content from other runs' (`--seed`).
    salt: u64,
    /// Prompts whose count could not be made exact (a tokenizer that merges across words).
    pub inexact: usize,
}

/// How long a prompt should be, in tokens as the target counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptLength {
    /// The whole prompt, template and BOS included (a trace's context length).
    Total(u32),
    /// The words alone, beyond what an empty prompt of the same shape costs (a turn's text).
    Content(u32),
}

impl Default for PromptLength {
    fn default() -> Self {
        Self::Content(1)
    }
}

/// What a prompt is made of, before its length is fitted.
#[derive(Debug, Clone, Default)]
pub struct PromptPlan {
    /// Prefix blocks as (id, words): identical ids give identical text.
    pub blocks: Vec<(u64, u32)>,
    /// Seed of the prompt's own words after the blocks.
    pub own_seed: u64,
    pub length: PromptLength,
    /// Shared system prompt (chat) or leading paragraph (text), in words, with its group id.
    pub system: Option<(u64, u32)>,
}

impl<'a> PromptSynth<'a> {
    /// Narrows the vocabulary to one-token words when `counter` can count.
    pub async fn new(counter: &'a TokenCounter, salt: u64) -> Result<Self, TokenizerError> {
        let mut words: Vec<&'static str> = WORDS.to_vec();
        if counter.is_exact() {
            let base = counter.count(&PromptSpec::Text("the".into())).await?.unwrap_or(0);
            let checks = futures::stream::iter(WORDS.iter().map(|w| async move {
                let n = counter.count(&PromptSpec::Text(format!("the {w}"))).await?;
                Ok::<_, TokenizerError>((w, n))
            }))
            .buffered(16)
            .collect::<Vec<_>>()
            .await;
            let mut single = Vec::new();
            for check in checks {
                let (w, n) = check?;
                if n == Some(base + 1) {
                    single.push(*w);
                }
            }
            // A tokenizer with almost no one-token words: keep them all, fitting still works.
            if single.len() >= 32 {
                words = single;
            }
        }
        Ok(Self { counter, words, salt, inexact: 0 })
    }

    fn seeded_words(&self, seed: u64, n: u32, out: &mut Vec<&'static str>) {
        // The salt is scrambled before it meets the seed: XORed in as it was, `--seed 2`'s
        // session s wrote the words of `--seed 1`'s session s^6, so one run's conversations
        // were found in the server's cache by the next.
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ splitmix64(self.salt));
        out.extend((0..n).map(|_| self.words[rng.gen_range(0..self.words.len())]));
    }

    /// Text of `n` words of a block: the same for the same id in every prompt of the run.
    pub fn block_text(&self, id: u64, n: u32) -> String {
        let mut words = Vec::with_capacity(n as usize);
        self.block_words(id, n, &mut words);
        words.join(" ")
    }

    fn block_words(&self, id: u64, n: u32, out: &mut Vec<&'static str>) {
        // Block ids and prompt seeds live in different spaces.
        self.seeded_words(id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xB10C, n, out);
    }

    /// Builds the prompt with `own` words of its own after its blocks.
    fn build(&self, plan: &PromptPlan, own: u32, chat: bool) -> PromptSpec {
        let mut words = Vec::new();
        for &(id, n) in &plan.blocks {
            self.block_words(id, n, &mut words);
        }
        self.seeded_words(plan.own_seed, own, &mut words);
        let body = words.join(" ");
        let system = plan.system.map(|(id, n)| self.block_text(id ^ 0x5E5, n));
        match (chat, system) {
            (true, Some(system)) => PromptSpec::Messages(vec![
                serde_json::json!({"role": "system", "content": system}),
                serde_json::json!({"role": "user", "content": body}),
            ]),
            (true, None) => PromptSpec::Messages(vec![serde_json::json!({"role": "user", "content": body})]),
            (false, Some(system)) => PromptSpec::Text(format!("{system}\n\n{body}")),
            (false, None) => PromptSpec::Text(body),
        }
    }

    /// A prompt of `plan.length` tokens (exact when the counter is), and its count. Only
    /// the prompt's own words are adjusted, so its blocks stay shared.
    pub async fn prompt(&mut self, plan: &PromptPlan, chat: bool) -> Result<(PromptSpec, Option<u32>), TokenizerError> {
        let fixed: u32 = plan.blocks.iter().map(|b| b.1).sum::<u32>() + plan.system.map_or(0, |s| s.1);
        // The same shape with no words: BOS, chat template, an empty system message.
        let empty = PromptPlan { blocks: Vec::new(), system: plan.system.map(|(id, _)| (id, 0)), ..plan.clone() };
        let Some(overhead) = self.counter.count(&self.build(&empty, 0, chat)).await? else {
            // Estimating: one token per word and nothing else.
            let words = match plan.length {
                PromptLength::Total(n) | PromptLength::Content(n) => n,
            };
            return Ok((self.build(plan, words.saturating_sub(fixed), chat), None));
        };
        let target = match plan.length {
            PromptLength::Total(n) => n,
            PromptLength::Content(n) => n + overhead,
        };
        let mut own = target.saturating_sub(fixed + overhead);
        let mut best: Option<(u32, u32)> = None; // (own words, count)
        for _ in 0..FIT_ROUNDS {
            let count = self.counter.count(&self.build(plan, own, chat)).await?.unwrap_or(0);
            if best.is_none_or(|(_, c)| count.abs_diff(target) < c.abs_diff(target)) {
                best = Some((own, count));
            }
            if count == target {
                break;
            }
            let next = (i64::from(own) + i64::from(target) - i64::from(count)).max(0) as u32;
            if next == own {
                break;
            }
            own = next;
        }
        let (own, count) = best.unwrap_or((own, 0));
        if count != target {
            self.inexact += 1;
        }
        Ok((self.build(plan, own, chat), Some(count)))
    }
}

/// Common English words, most of them one token in BPE vocabularies.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "for", "that", "with", "on", "as", "was", "by", "at", "from", "this", "be",
    "or", "an", "are", "it", "not", "have", "but", "which", "one", "all", "had", "their", "has", "were", "more", "can",
    "time", "will", "about", "there", "also", "new", "other", "some", "what", "when", "first", "two", "into", "out",
    "only", "would", "most", "people", "many", "made", "over", "then", "after", "such", "these", "years", "year",
    "state", "used", "may", "world", "between", "where", "could", "city", "well", "both", "through", "work", "during",
    "part", "back", "under", "three", "school", "around", "known", "water", "day", "life", "name", "early", "family",
    "system", "long", "music", "while", "before", "great", "since", "group", "number", "power", "house", "team",
    "place", "high", "later", "game", "small", "often", "second", "film", "public", "found", "each", "book", "local",
    "left", "area", "based", "order", "large", "line", "show", "set", "play", "end", "four", "light", "began", "case",
    "good", "country", "land", "became", "south", "north", "west", "east", "river", "road", "party", "point", "level",
    "field", "market", "story", "model", "data", "value", "form", "design", "plan", "building", "season", "church",
    "village", "company", "member", "office", "court", "report", "program", "study", "history", "process", "street",
    "table", "paper", "energy", "health", "figure", "window", "garden", "forest", "island", "bridge", "train", "cloud",
    "stone", "summer", "winter", "spring", "morning", "evening", "letter", "simple", "common", "green", "blue",
    "black", "white", "red", "open", "close", "young", "old", "short", "strong", "free", "full", "half", "real",
    "clear", "friend", "father", "mother", "child", "woman", "man", "king", "army", "war", "peace", "law", "money",
    "price", "cost", "food", "tree", "sea", "sun", "moon", "star", "fire", "air", "earth", "rain", "snow", "wind",
    "hand", "head", "eye", "face", "door", "room", "car", "ship", "boat", "horse", "dog", "bird", "fish", "bread",
    "milk", "wood", "gold", "iron",
];

/// SplitMix64's finalizer: a bijection that spreads every bit of `x` over the result.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_seed_writes_other_words_for_every_prompt() {
        let counter = TokenCounter::Estimate;
        let words = |salt: u64| {
            let synth = futures::executor::block_on(PromptSynth::new(&counter, salt)).unwrap();
            // Own seeds as sessions and single prompts use them.
            let seeds = (0..64u64).flat_map(|s| (0..4).map(move |t| (s << 16) | t)).chain(0..256);
            seeds
                .map(|seed| {
                    let mut out = Vec::new();
                    synth.seeded_words(seed, 8, &mut out);
                    out.join(" ")
                })
                .collect::<std::collections::HashSet<_>>()
        };
        let (one, two) = (words(1), words(2));
        assert!(one.len() > 500, "distinct prompts within a run");
        assert_eq!(one.intersection(&two).count(), 0, "a prompt of seed 1 reappears with seed 2");
    }

    #[test]
    fn blocks_are_functions_of_their_id() {
        let counter = TokenCounter::Estimate;
        let synth = futures::executor::block_on(PromptSynth::new(&counter, 7)).unwrap();
        assert_eq!(synth.block_text(42, 20), synth.block_text(42, 20));
        assert_ne!(synth.block_text(42, 20), synth.block_text(43, 20));
        assert_eq!(synth.block_text(42, 20).split(' ').count(), 20);
        assert!(synth.block_text(42, 20).starts_with(&synth.block_text(42, 5)));
    }

    #[tokio::test]
    async fn shared_blocks_give_shared_prefixes_and_own_words_differ() {
        let counter = TokenCounter::Estimate;
        let mut synth = PromptSynth::new(&counter, 1).await.unwrap();
        let a =
            PromptPlan { blocks: vec![(1, 30), (2, 30)], own_seed: 10, length: PromptLength::Total(70), system: None };
        let b =
            PromptPlan { blocks: vec![(1, 30), (3, 30)], own_seed: 11, length: PromptLength::Total(70), system: None };
        let (PromptSpec::Text(ta), None) = synth.prompt(&a, false).await.unwrap() else { panic!() };
        let (PromptSpec::Text(tb), None) = synth.prompt(&b, false).await.unwrap() else { panic!() };
        let shared = ta.chars().zip(tb.chars()).take_while(|(x, y)| x == y).count();
        let block1 = synth.block_text(1, 30).len();
        assert!(shared >= block1 && shared < block1 + 60, "shared {shared} chars, block {block1}");
        assert_eq!(ta.split(' ').count(), 70);
    }
}
