//! `rillm generate`: one prompt, streamed to stdout, timing line on stderr.

use std::io::Write;
use std::time::Instant;

use rillm_engine::{ChatMessage, Engine, GenerateRequest, Prompt, SamplingParams, StreamEvent};

use crate::model_args::ModelArgs;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long)]
    prompt: String,
    /// Treat the prompt as a user message and apply the model's chat template.
    #[arg(long)]
    chat: bool,
    #[arg(long, default_value_t = 128)]
    max_tokens: u32,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    top_k: u32,
    /// Stop before this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let engine = Engine::start(args.model.engine_config(1, 1)?)?;
    let prompt =
        if args.chat { Prompt::chat(vec![ChatMessage::new("user", args.prompt)]) } else { Prompt::Text(args.prompt) };
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        seed: args.seed,
        ..SamplingParams::default()
    };
    let request =
        GenerateRequest::new(prompt).with_max_tokens(args.max_tokens).with_sampling(sampling).with_stop(args.stop);
    let start = Instant::now();
    let mut stream = engine.submit(request)?;
    let mut stdout = std::io::stdout().lock();
    while let Some(event) = stream.blocking_next() {
        match event {
            // Not asked for: one choice, no prompt scores, no constraint to restart, no
            // thought read apart.
            StreamEvent::Prompt(_) | StreamEvent::Restarted { .. } | StreamEvent::Reasoning { .. } => {}
            StreamEvent::Text { text, .. } => {
                stdout.write_all(text.as_bytes())?;
                stdout.flush()?;
            }
            StreamEvent::Finished(done) => {
                writeln!(stdout)?;
                let decode_tps = if done.timings.decode_ms > 0.0 {
                    f64::from(done.usage.completion_tokens.saturating_sub(1)) * 1000.0 / done.timings.decode_ms
                } else {
                    0.0
                };
                eprintln!(
                    "prompt_tokens={} completion_tokens={} ttft_ms={:.1} decode_tok_s={:.1} total_ms={:.1} finish={}",
                    done.usage.prompt_tokens,
                    done.usage.completion_tokens,
                    done.timings.ttft_ms,
                    decode_tps,
                    start.elapsed().as_secs_f64() * 1000.0,
                    done.finish_reason.as_str(),
                );
                if let Some(error) = done.error {
                    anyhow::bail!("generation failed: {error}");
                }
            }
        }
    }
    Ok(())
}
