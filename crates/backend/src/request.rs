//! The request and event types that cross the engine boundary.

/// A token id of the model's vocabulary.
pub type TokenId = u32;

/// What to generate from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Raw text, tokenized as is (special-token text such as `<|im_start|>` is honoured).
    Text(String),
    /// Chat messages, rendered with the model's own chat template; `tools` (OpenAI-shaped
    /// `{"type": "function", "function": {..}}` objects) go to templates that list tools
    /// themselves, and are empty otherwise.
    Chat { messages: Vec<ChatMessage>, tools: Vec<serde_json::Value>, options: ChatOptions },
    /// Token ids, fed as they are (no BOS added): what evaluation harnesses send, having
    /// tokenized context and continuation themselves.
    Tokens(Vec<TokenId>),
}

impl Prompt {
    /// Bytes of text to tokenize: what tokenizing it costs, roughly.
    pub fn text_len(&self) -> usize {
        match self {
            Self::Text(text) => text.len(),
            Self::Chat { messages, tools, .. } => {
                let tools: usize = tools.iter().map(|t| t.to_string().len()).sum();
                tools + messages.iter().map(|m| m.role.len() + m.content.len()).sum::<usize>()
            }
            Self::Tokens(_) => 0,
        }
    }
}

impl Prompt {
    /// Chat messages with no tools.
    pub fn chat(messages: Vec<ChatMessage>) -> Self {
        Self::Chat { messages, tools: Vec::new(), options: ChatOptions::default() }
    }
}

/// How a chat is rendered: vLLM's chat request extras.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatOptions {
    /// Open the assistant's turn after the messages (the default).
    pub add_generation_prompt: bool,
    /// Leave the last message open, the reply continuing it (an assistant turn begun by
    /// the client): the prompt ends where that message's content ends.
    pub continue_final_message: bool,
    /// Extra template variables (vLLM's `chat_template_kwargs`, e.g. `enable_thinking`).
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self { add_generation_prompt: true, continue_final_message: false, template_kwargs: Default::default() }
    }
}

/// A chat message as templates read it: the tool fields are left out when empty, so
/// templates that test `message.tool_calls is defined` see what they expect.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant message's calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ChatToolCall>,
    /// A `tool` message: the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An earlier assistant turn's thought, under the name reasoning templates read
    /// (Qwen3's keeps the latest turns' and drops older ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_content: None,
        }
    }
}

/// A call an earlier assistant turn made, as Hugging Face chat templates read it:
/// `{"id", "type": "function", "function": {"name", "arguments"}}` with the arguments an
/// object (templates write them with `tojson`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

impl serde::Serialize for ChatToolCall {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
        .serialize(serializer)
    }
}

/// Per-request sampling. `temperature` 0 (or below 1e-5) means greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 disables it.
    pub top_p: f32,
    /// 0 disables it.
    pub top_k: u32,
    /// Seed of the sampling RNG; `None` picks a random one.
    pub seed: Option<u64>,
    /// Tokens less likely than `min_p` times the most likely one (after temperature) are
    /// not sampled, as in vLLM; 0 disables it.
    pub min_p: f32,
    /// Added to these tokens' logits before sampling, greedy decoding included (OpenAI's
    /// `logit_bias`: -100 bans a token, 100 all but forces it).
    pub logit_bias: Vec<(TokenId, f32)>,
    /// Only these tokens may be sampled (vLLM's `allowed_token_ids`); empty: any.
    pub allowed_token_ids: Vec<TokenId>,
    pub penalties: Penalties,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: None,
            min_p: 0.0,
            logit_bias: Vec::new(),
            allowed_token_ids: Vec::new(),
            penalties: Penalties::default(),
        }
    }
}

/// Repetition penalties as vLLM applies them to the logits before sampling (greedy
/// decoding included): `repetition` divides the positive logits and multiplies the
/// negative ones of every token in the prompt or the output so far (1 disables it);
/// `frequency` is subtracted once for each time a token is in the output, `presence` once
/// if it is there at all (OpenAI's, 0 disables them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Penalties {
    pub presence: f32,
    pub frequency: f32,
    pub repetition: f32,
}

impl Default for Penalties {
    fn default() -> Self {
        Self { presence: 0.0, frequency: 0.0, repetition: 1.0 }
    }
}

impl Penalties {
    /// Whether they change nothing.
    pub fn is_neutral(&self) -> bool {
        *self == Self::default()
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self { temperature: 0.0, ..Self::default() }
    }

    /// Temperatures this small are greedy, as in vLLM (`_SAMPLING_EPS`): dividing logits
    /// by a vanishing temperature would overflow them into garbage.
    pub fn is_greedy(&self) -> bool {
        self.temperature < 1e-5
    }
}

/// What a request's output must match (structured outputs). The engine compiles it into a
/// token mask applied before sampling, so every sampler setting still works inside it.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// JSON valid for this JSON Schema. Unless the schema says otherwise (llguidance's
    /// `x-guidance` key), keys and items are separated as `json.dumps` does (`": "`, `", "`)
    /// with no other whitespace, so separators are forced rather than sampled.
    JsonSchema(serde_json::Value),
    /// Any JSON object (OpenAI's `json_object`), laid out as for `JsonSchema`.
    JsonObject,
    /// The whole output matches this regular expression.
    Regex(String),
    /// The output is exactly one of these strings.
    Choice(Vec<String>),
    /// A sentence of this grammar, in llguidance's Lark dialect.
    Lark(String),
    /// Free text until `trigger` first appears in the output; from the trigger on (the
    /// grammar starts with it), a sentence of `grammar` (Lark). The free text costs no mask:
    /// tool calls under `tool_choice: auto` are constrained only once the model opens one.
    Lazy { trigger: String, grammar: String },
    /// `constraint`; and where the stream's reader restarts a choice
    /// (`RequestStream::restart_choice`), `restart` from the output's start: the prompt
    /// stays, the output so far is void. (A reply about to repeat a call the conversation has
    /// already answered is generated again as the answer.)
    Restartable { constraint: Box<Constraint>, restart: Box<Constraint> },
    /// Calls or an answer, as the model chooses without a mask: an output that opens with
    /// `trigger` (after whitespace) is a sentence of `calls` (Lark, from the trigger on);
    /// one that cannot open so is `answer` from its start, and what it wrote towards the
    /// trigger is void (`StreamEvent::Restarted`). The reader may restart it as `answer`
    /// too (`RequestStream::restart_choice`). For replies to the results of calls, where a
    /// mask of `calls | answer` makes a model that would answer open a call instead.
    CallsOrAnswer { trigger: String, calls: String, answer: Box<Constraint> },
}

impl Constraint {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::JsonSchema(_) => "json_schema",
            Self::JsonObject => "json_object",
            Self::Regex(_) => "regex",
            Self::Choice(_) => "choice",
            Self::Lark(_) => "grammar",
            Self::Lazy { .. } => "lazy_grammar",
            Self::Restartable { constraint, .. } => constraint.kind(),
            Self::CallsOrAnswer { .. } => "grammar",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    pub sampling: SamplingParams,
    /// Completion tokens at most; `None` means "until the sequence's context is full"; 0
    /// computes the prompt only (to score it, or to cache it for later requests).
    pub max_tokens: Option<u32>,
    /// Generation stops at the first occurrence of any of these, which is not streamed
    /// (unless `include_stop_str`).
    pub stop: Vec<String>,
    /// The stop string that ended the output ends the text too (vLLM's
    /// `include_stop_str_in_output`).
    pub include_stop_str: bool,
    /// Only the prompt's last this many tokens are used (vLLM's `truncate_prompt_tokens`,
    /// left truncation); more than the context holds means as many as it holds.
    pub truncate_prompt_tokens: Option<u32>,
    /// Generation stops at any of these tokens (vLLM's `stop_token_ids`), which is counted
    /// but not streamed, as an end-of-generation token.
    pub stop_token_ids: Vec<TokenId>,
    /// Tokens generated before anything may end the output (vLLM's `min_tokens`): until
    /// then end-of-generation and stop tokens are not sampled and stop strings not looked for.
    pub min_tokens: u32,
    /// Keep generating past end-of-generation tokens (benchmarks want fixed lengths).
    /// Ignored under a `constraint`: the grammar decides when the output may end.
    pub ignore_eos: bool,
    /// Structured output: what the generated text must match.
    pub constraint: Option<Constraint>,
    /// Report each generated token's log-probability with this many most likely
    /// alternatives (0: the token's own only); `None`: no log-probabilities.
    pub logprobs: Option<u32>,
    /// Score the prompt too: each prompt token's log-probability given the tokens before
    /// it, with this many alternatives, sent once as [`StreamEvent::Prompt`]. The prompt is
    /// then computed whole (no cached prefix has the logits).
    pub prompt_logprobs: Option<u32>,
    /// Choices to generate from the one prompt (at least 1): the prompt is computed once
    /// and its KV copied to each choice, which then samples on its own. Events carry their
    /// choice's index; the stream ends after every choice's `Finished`.
    pub n: u32,
    /// A reasoning model's thinking split from its answer (`None`: the text as generated).
    pub reasoning: Option<Reasoning>,
}

/// How a reasoning model's output is read: what it writes between `<think>` and `</think>`
/// streams as [`StreamEvent::Reasoning`], markers left out, the answer after it as
/// [`StreamEvent::Text`]. The request's constraint applies to the answer only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasoning {
    /// Where the output starts when neither the prompt's end nor the output's first text
    /// says (a prompt ending in `<think>` opens thinking; one that closed it, or an output
    /// starting with `<think>`, decide by themselves).
    pub unmarked_start: ThinkingStart,
    /// Thinking tokens at most: at this many the closing marker is forced and the model
    /// answers. `Some(0)`: no thinking (the closing marker ends the prompt).
    pub budget: Option<u32>,
}

/// Whether output with no opening marker is thinking: DeepSeek-R1's models often leave the
/// marker out (their template writes it), Qwen3's write it themselves when they think.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingStart {
    Thinking,
    Answer,
}

impl GenerateRequest {
    pub fn new(prompt: Prompt) -> Self {
        Self {
            prompt,
            sampling: SamplingParams::default(),
            max_tokens: None,
            stop: Vec::new(),
            include_stop_str: false,
            truncate_prompt_tokens: None,
            stop_token_ids: Vec::new(),
            min_tokens: 0,
            ignore_eos: false,
            constraint: None,
            logprobs: None,
            prompt_logprobs: None,
            n: 1,
            reasoning: None,
        }
    }

    pub fn text(prompt: impl Into<String>) -> Self {
        Self::new(Prompt::Text(prompt.into()))
    }

    pub fn chat(messages: Vec<ChatMessage>) -> Self {
        Self::new(Prompt::chat(messages))
    }

    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    pub fn with_sampling(mut self, sampling: SamplingParams) -> Self {
        self.sampling = sampling;
        self
    }

    pub fn with_stop(mut self, stop: Vec<String>) -> Self {
        self.stop = stop;
        self
    }

    pub fn with_constraint(mut self, constraint: Constraint) -> Self {
        self.constraint = Some(constraint);
        self
    }
}

/// A generated token's log-probability under the model's raw distribution: the
/// log-softmax of its logits, before temperature, top-k/top-p and constraint masks (vLLM's
/// default), with the most likely alternatives at that position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: TokenId,
    /// The token's bytes (not always whole UTF-8).
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// Most likely first.
    pub top: Vec<TopLogprob>,
}

/// One prompt token scored by the model (`GenerateRequest::prompt_logprobs`).
#[derive(Debug, Clone, PartialEq)]
pub struct PromptToken {
    pub token: TokenId,
    pub bytes: Vec<u8>,
    /// `None` for the first prompt token: nothing before it predicts it.
    pub logprob: Option<f32>,
    /// Most likely first; empty for the first token.
    pub top: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopLogprob {
    pub token: TokenId,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// One event of a request's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The scored prompt, once, before any text (requests with `prompt_logprobs`).
    Prompt(Vec<PromptToken>),
    /// New text of choice `index`, with the ids of the tokens it came from. Text is always
    /// whole UTF-8 characters; ids of tokens whose bytes are still held back arrive with a
    /// later piece. `logprobs` has one entry per id when the request asked for them.
    Text { index: u32, text: String, token_ids: Vec<TokenId>, logprobs: Vec<TokenLogprob> },
    /// New thinking of choice `index` (requests with `reasoning`), as `Text` is new answer.
    Reasoning { index: u32, text: String, token_ids: Vec<TokenId>, logprobs: Vec<TokenLogprob> },
    /// Choice `Completion::index` ended; the last event of a request with one choice.
    Finished(Completion),
    /// Choice `index` starts its output again under its constraint's restart, as its
    /// reader asked (`RequestStream::restart_choice`): its text before this event is void.
    Restarted { index: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// A stop string matched.
    Stop,
    /// `max_tokens` or the sequence's context was reached.
    Length,
    /// The model produced an end-of-generation token (end of turn for chat).
    Eos,
    /// The caller dropped the stream, or the engine shut down.
    Cancelled,
    /// The backend failed; `Completion::error` says how.
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::Eos => "eos",
            Self::Cancelled => "cancelled",
            Self::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens whose KV cells were reused from an earlier request (prefix caching).
    pub cached_tokens: u32,
    /// Completion tokens spent thinking, the markers included (requests with `reasoning`).
    pub reasoning_tokens: u32,
}

/// Where a request's time went, measured inside the engine.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerTimings {
    /// Submit until a sequence was assigned.
    pub queue_ms: f64,
    /// Sequence assigned until the first token was sampled.
    pub prefill_ms: f64,
    /// Submit until the first token was sampled.
    pub ttft_ms: f64,
    /// First token until the last.
    pub decode_ms: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Which choice ended (0 unless the request asked for `n` > 1).
    pub index: u32,
    pub finish_reason: FinishReason,
    pub usage: Usage,
    pub timings: ServerTimings,
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vanishing_temperatures_are_greedy_not_overflowing() {
        let t = |temperature| SamplingParams { temperature, ..SamplingParams::default() };
        for greedy in [0.0, 1e-40, 1e-6] {
            assert!(t(greedy).is_greedy(), "{greedy}");
        }
        for sampled in [1e-4, 0.7, 2.0] {
            assert!(!t(sampled).is_greedy(), "{sampled}");
        }
    }
}
