//! The `limits` text of a result: what its figures are and are not, in sentences, so a
//! reader of one number sees the caveats that go with it.

use crate::results::slo::Slos;

/// What the `limits` text is written from.
pub(crate) struct LimitFacts<'a> {
    pub(crate) offered: usize,
    pub(crate) completed: usize,
    pub(crate) failed: usize,
    pub(crate) rejected: usize,
    pub(crate) shed: usize,
    pub(crate) protocol: crate::protocol::Protocol,
    pub(crate) have_tokens: bool,
    pub(crate) no_itl: bool,
    pub(crate) saturated: bool,
    pub(crate) lag_p99: f64,
    pub(crate) cpu: f64,
    pub(crate) slos: &'a Slos,
    pub(crate) open_loop: bool,
    pub(crate) reasoning: bool,
    pub(crate) without_tokens: usize,
    pub(crate) estimated_tokens: usize,
    pub(crate) resent: usize,
}

/// What a token stream's figures are and are not.
fn stream_notes(f: &LimitFacts, notes: &mut Vec<String>) {
    notes.push("SSE events are not necessarily model tokens: event_gaps_ms are gaps between content events.".into());
    if !f.have_tokens {
        notes.push(
            "The server reported no token usage: TPOT and output tokens/s are not given (--tokenizer counts them)."
                .into(),
        );
    } else if f.no_itl {
        notes.push(
            "Tokens per event are unknown, so token-level ITL is not given; see TPOT and event gaps (vLLM, SGLang \
             and rillm count them with --extra-body '{\"stream_options\": {\"continuous_usage_stats\": true}}')."
                .into(),
        );
    }
}

pub(crate) fn text(f: &LimitFacts) -> String {
    let slos = f.slos;
    let mut notes = vec![format!(
        "Protocol {:?}. Goodput counts completed requests meeting every SLO given (TTFT ≤ {}{}{}){}; ttft_goodput_rps uses TTFT alone.",
        f.protocol,
        slos.ttft_text(),
        slos.tpot_ms.map_or(String::new(), |t| format!(", TPOT ≤ {t:.1} ms")),
        slos.e2e_ms.map_or(String::new(), |t| format!(", e2e ≤ {t} ms")),
        if f.open_loop { ", timed from each request's scheduled send (goodput_from_send_rps: from the actual send)" } else { "" },
    )];
    if let Some(c) = slos.calibration {
        notes.push(format!(
            "SLOs calibrated: {}x the target's idle TTFT ({:.0} ms + {:.2} ms per prompt token) and TPOT ({:.1} ms), \
             measured over {} requests sent one at a time before the run.",
            c.scale, c.idle_ttft_ms, c.idle_ttft_per_prompt_token_ms, c.idle_tpot_ms, c.requests
        ));
    }
    if f.protocol.is_pooled() {
        notes.push(
            "Embeddings and rerank answer in one JSON body: TTFT and E2E are both the whole answer's latency; \
             inputs/s counts the vectors (scores) of completed requests, content_events per request."
                .into(),
        );
    } else {
        stream_notes(f, &mut notes);
    }
    if f.have_tokens && f.without_tokens > 0 {
        notes.push(format!(
            "{} completed requests had no token count: output tokens/s counts only the others, an undercount.",
            f.without_tokens
        ));
    }
    if f.estimated_tokens > 0 {
        notes.push(format!(
            "{} requests' output token counts are estimates: counted from their text with --tokenizer.",
            f.estimated_tokens
        ));
    }
    if f.resent > 0 {
        notes.push(format!(
            "{} requests were sent twice: the server closed a kept-alive connection as they went out, before any response; their timings start at the first attempt.",
            f.resent
        ));
    }
    if f.reasoning {
        notes.push("Reasoning text counts as output for TTFT, gaps and events; time_to_first_answer_ms is to the first answer text.".into());
    }
    if !f.protocol.has_end_marker() {
        notes.push(
            "This protocol has no end-of-stream marker: a stream cut off early cannot be told from a short answer."
                .into(),
        );
    }
    if f.completed < 30 {
        notes.push(format!(
            "Only {} completed requests: p99 is close to the maximum, not a tail estimate.",
            f.completed
        ));
    }
    notes.push(format!(
        "Of {} offered: {} completed, {} failed, {} rejected with 429, {} shed by the client.",
        f.offered, f.completed, f.failed, f.rejected, f.shed
    ));
    if f.saturated {
        notes.push(format!(
            "Client-side delay seen (dispatch lag p99 {:.1} ms, client CPU {:.2} cores): figures from the actual send exclude it, the *_from_schedule figures include it; on a machine shared with the server this is often CPU contention rather than a busy client.",
            f.lag_p99, f.cpu
        ));
    }
    notes.join(" ")
}
