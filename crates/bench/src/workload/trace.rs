//! Production traces, read offline: when each request arrived and how long its prompt and
//! answer were. Prompts themselves are never in these traces (privacy); `synth` makes
//! prompts of the recorded lengths.
//!
//! Formats: Mooncake JSONL (with prefix-block hash ids), the Azure LLM inference trace CSV
//! and BurstGPT CSV. Traces were recorded on GPU fleets, so [`TraceScaling`] stretches time
//! and shrinks lengths to fit a small server, and every factor is reported.

use std::path::Path;

use serde::Deserialize;

/// One recorded request, after scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRequest {
    /// Arrival, in seconds from the first replayed request.
    pub at_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Mooncake: one id per prompt block; equal ids mean equal prompt content.
    pub hash_ids: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// From the file: `.jsonl` is Mooncake, a CSV by its header.
    Auto,
    /// kvcache-ai/Mooncake JSONL: `{"timestamp" (ms), "input_length", "output_length", "hash_ids"}`.
    Mooncake,
    /// Azure LLM inference trace CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.
    Azure,
    /// BurstGPT CSV: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`.
    Burstgpt,
}

/// How a trace is fitted to the server under test. Recorded in `run_context`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TraceScaling {
    /// Multiplies the gaps between arrivals: 10 replays ten times slower.
    pub time_scale: f64,
    pub input_scale: f64,
    pub output_scale: f64,
    pub max_input_tokens: Option<u32>,
    pub max_output_tokens: Option<u32>,
    /// Records skipped from the start of the file.
    pub offset: usize,
}

impl Default for TraceScaling {
    fn default() -> Self {
        Self {
            time_scale: 1.0,
            input_scale: 1.0,
            output_scale: 1.0,
            max_input_tokens: None,
            max_output_tokens: None,
            offset: 0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("reading {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Format { path: String, message: String },
}

/// A raw record before scaling: arrival in seconds on the trace's own clock.
struct Raw {
    at_s: f64,
    input: f64,
    output: f64,
    hash_ids: Vec<u64>,
}

#[derive(Deserialize)]
struct MooncakeLine {
    timestamp: f64,
    input_length: f64,
    output_length: f64,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

#[derive(Deserialize)]
struct AzureRow {
    #[serde(rename = "TIMESTAMP")]
    timestamp: String,
    #[serde(rename = "ContextTokens")]
    context: f64,
    #[serde(rename = "GeneratedTokens")]
    generated: f64,
}

#[derive(Deserialize)]
struct BurstRow {
    #[serde(rename = "Timestamp")]
    timestamp: f64,
    #[serde(rename = "Request tokens")]
    request: f64,
    #[serde(rename = "Response tokens")]
    response: f64,
}

/// Which format a file is in, by its extension and first line.
pub fn detect(path: &Path, text: &str) -> Option<TraceFormat> {
    let header = text.lines().next().unwrap_or("").trim_start_matches('\u{feff}');
    if path.extension().is_some_and(|e| e == "jsonl") || header.trim_start().starts_with('{') {
        Some(TraceFormat::Mooncake)
    } else if header.contains("ContextTokens") {
        Some(TraceFormat::Azure)
    } else if header.contains("Request tokens") {
        Some(TraceFormat::Burstgpt)
    } else {
        None
    }
}

/// Reads up to `limit` records after `scaling.offset` (all when `None`), scaled, with
/// arrivals relative to the first replayed record, stopping past `horizon_s` (scaled).
pub fn load(
    path: &Path,
    format: TraceFormat,
    scaling: &TraceScaling,
    limit: Option<usize>,
    horizon_s: Option<f64>,
) -> Result<(TraceFormat, Vec<TraceRequest>, usize), TraceError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io { path: name.clone(), source })?;
    let err = |message: String| TraceError::Format { path: name.clone(), message };
    let format = match format {
        TraceFormat::Auto => detect(path, &text)
            .ok_or_else(|| err("cannot tell the trace format; pass --trace-format mooncake|azure|burstgpt".into()))?,
        f => f,
    };
    // Parse only what the run replays: a one-hour trace has tens of thousands of rows.
    let wanted = limit.map(|n| n.saturating_add(scaling.offset));
    // Records the file holds past the offset: the summary says how many were replayed of them.
    let header = usize::from(format != TraceFormat::Mooncake);
    let available = text.lines().filter(|l| !l.trim().is_empty()).count().saturating_sub(header + scaling.offset);
    let raw = match format {
        TraceFormat::Mooncake => mooncake(&text, wanted).map_err(err)?,
        TraceFormat::Azure => azure(&text, wanted).map_err(err)?,
        TraceFormat::Burstgpt => burstgpt(&text, wanted).map_err(err)?,
        TraceFormat::Auto => unreachable!("resolved above"),
    };
    let mut raw: Vec<Raw> = raw.into_iter().skip(scaling.offset).collect();
    // Replay in arrival order even if the file is not sorted.
    raw.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let Some(t0) = raw.first().map(|r| r.at_s) else {
        return Err(err(format!("no records after skipping {}", scaling.offset)));
    };
    let scale = |n: f64, factor: f64, cap: Option<u32>| -> u32 {
        let v = (n * factor).round().max(1.0).min(f64::from(u32::MAX)) as u32;
        cap.map_or(v, |c| v.min(c.max(1)))
    };
    let mut out = Vec::new();
    for r in raw {
        let at_s = (r.at_s - t0) * scaling.time_scale;
        if horizon_s.is_some_and(|h| at_s > h) || limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        out.push(TraceRequest {
            at_s,
            input_tokens: scale(r.input, scaling.input_scale, scaling.max_input_tokens),
            output_tokens: scale(r.output, scaling.output_scale, scaling.max_output_tokens),
            hash_ids: r.hash_ids,
        });
    }
    Ok((format, out, available))
}

fn mooncake(text: &str, wanted: Option<usize>) -> Result<Vec<Raw>, String> {
    let lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let mut out = Vec::new();
    for (i, line) in lines.take(wanted.unwrap_or(usize::MAX)) {
        let m: MooncakeLine = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        out.push(Raw {
            at_s: m.timestamp / 1000.0,
            input: m.input_length,
            output: m.output_length,
            hash_ids: m.hash_ids,
        });
    }
    Ok(out)
}

fn csv_rows<T: serde::de::DeserializeOwned>(text: &str, wanted: Option<usize>) -> Result<Vec<T>, String> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
    reader
        .deserialize()
        .take(wanted.unwrap_or(usize::MAX))
        .enumerate()
        // Row numbers as a spreadsheet shows them: the header is row 1.
        .map(|(i, row)| row.map_err(|e| format!("row {}: {e}", i + 2)))
        .collect()
}

fn azure(text: &str, wanted: Option<usize>) -> Result<Vec<Raw>, String> {
    csv_rows::<AzureRow>(text, wanted)?
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            let at = chrono::NaiveDateTime::parse_from_str(&row.timestamp, "%Y-%m-%d %H:%M:%S%.f")
                .map_err(|e| format!("row {}: TIMESTAMP {:?}: {e}", i + 2, row.timestamp))?;
            let at_s = at.and_utc().timestamp_micros() as f64 / 1e6;
            Ok(Raw { at_s, input: row.context, output: row.generated, hash_ids: Vec::new() })
        })
        .collect()
}

fn burstgpt(text: &str, wanted: Option<usize>) -> Result<Vec<Raw>, String> {
    Ok(csv_rows::<BurstRow>(text, wanted)?
        .into_iter()
        .map(|row| Raw { at_s: row.timestamp, input: row.request, output: row.response, hash_ids: Vec::new() })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::workload::test_file as write;

    #[test]
    fn azure_rows_replay_relative_to_the_first_with_scaling() {
        let p = write("az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.0000000,3,1\n");
        let scaling = TraceScaling {
            time_scale: 2.0,
            input_scale: 0.1,
            output_scale: 0.5,
            max_output_tokens: Some(40),
            ..TraceScaling::default()
        };
        let (format, t, _) = load(&p, TraceFormat::Auto, &scaling, None, None).unwrap();
        assert_eq!(format, TraceFormat::Azure);
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].at_s, 0.0);
        assert!((t[1].at_s - 2.0 * 4.314_578).abs() < 1e-4, "{}", t[1].at_s);
        assert_eq!((t[0].input_tokens, t[0].output_tokens), (37, 22));
        assert_eq!((t[1].input_tokens, t[1].output_tokens), (40, 40), "output capped");
        assert_eq!((t[2].input_tokens, t[2].output_tokens), (1, 1), "never below one token");
    }

    #[test]
    fn mooncake_keeps_hash_ids_and_offset_limit_and_horizon_apply() {
        let lines = "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
                     {\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 6, \"hash_ids\": [1, 3]}\n\
                     {\"timestamp\": 3000, \"input_length\": 100, \"output_length\": 7, \"hash_ids\": [4]}\n";
        let p = write("mc.jsonl", lines);
        let (format, t, _) = load(&p, TraceFormat::Auto, &TraceScaling::default(), None, None).unwrap();
        assert_eq!(format, TraceFormat::Mooncake);
        assert_eq!(t[1].hash_ids, vec![1, 3]);
        assert_eq!(t[2].at_s, 3.0);
        let offset = TraceScaling { offset: 1, ..TraceScaling::default() };
        let (_, t, available) = load(&p, TraceFormat::Mooncake, &offset, Some(5), None).unwrap();
        assert_eq!((t.len(), available), (2, 2), "records past the offset");
        assert_eq!((t[0].at_s, t[1].at_s), (0.0, 2.0), "relative to the first replayed record");
        let (_, t, _) = load(&p, TraceFormat::Mooncake, &TraceScaling::default(), None, Some(1.5)).unwrap();
        assert_eq!(t.len(), 2);
        let (_, t, _) = load(&p, TraceFormat::Mooncake, &TraceScaling::default(), Some(1), None).unwrap();
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn burstgpt_reads_seconds_and_bad_rows_name_their_row() {
        let p = write("bg.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n7.5,GPT-4,1087,0,1087,API log\n");
        let (format, t, _) = load(&p, TraceFormat::Auto, &TraceScaling::default(), None, None).unwrap();
        assert_eq!(format, TraceFormat::Burstgpt);
        assert_eq!((t[1].at_s, t[1].input_tokens, t[1].output_tokens), (2.5, 1087, 1));
        let bad =
            write("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12,3\nyesterday,1,1\n");
        let e = load(&bad, TraceFormat::Azure, &TraceScaling::default(), None, None).unwrap_err().to_string();
        assert!(e.contains("row 3"), "{e}");
        let unknown = write("u.csv", "a,b\n1,2\n");
        assert!(load(&unknown, TraceFormat::Auto, &TraceScaling::default(), None, None)
            .unwrap_err()
            .to_string()
            .contains("--trace-format"));
    }

    #[test]
    fn the_azure_trace_excerpt_parses_at_its_recorded_times() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/azure-llm-2023-conv-head200.csv");
        let (_, all, _) = load(&path, TraceFormat::Auto, &TraceScaling::default(), None, None).unwrap();
        assert_eq!(all.len(), 200);
        let span = all.last().unwrap().at_s;
        assert!((61.0..61.5).contains(&span), "its first minute, got {span} s");
    }
}
