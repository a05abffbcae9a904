//! Every check of the command line that needs no file or server, in one place, before
//! anything is sent: a bad combination is refused with what to do instead.

use crate::args::BenchArgs;
use crate::protocol::Protocol;

impl BenchArgs {
    /// Checks the arguments and returns the protocol every `--url` takes.
    pub fn validate(&self) -> Result<Protocol, String> {
        let url = self.url.first().ok_or("--url is required")?;
        let protocol = self.protocol.resolve(url)?;
        if let Some(other) = self.url.iter().find(|u| self.protocol.resolve(u).ok() != Some(protocol)) {
            return Err(format!("every --url must take the same protocol ({protocol:?} for {url}); {other} does not"));
        }
        self.check_load()?;
        self.check_workload()?;
        self.check_shard()?;
        if self.tools.is_some() && !matches!(protocol, Protocol::Chat | Protocol::Responses) {
            return Err("--tools needs chat (/v1/chat/completions) or the Responses API (/v1/responses)".into());
        }
        Ok(protocol)
    }

    fn check_load(&self) -> Result<(), String> {
        if let Some(bad) = self.rate.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(format!("--rate must be positive, got {bad}"));
        }
        if self.burstiness <= 0.0 {
            return Err("--burstiness must be positive".into());
        }
        if self.concurrency.contains(&0) {
            return Err("--concurrency must be at least 1".into());
        }
        if self.slo_scale.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
            return Err("--slo-scale must be positive".into());
        }
        Ok(())
    }

    fn check_workload(&self) -> Result<(), String> {
        let positive = [
            ("--time-scale", self.time_scale),
            ("--input-scale", self.input_scale),
            ("--output-scale", self.output_scale),
        ];
        if let Some((name, v)) = positive.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(format!("{name} must be positive, got {v}"));
        }
        if self.trace.is_some() && (!self.rate.is_empty() || !self.concurrency.is_empty()) {
            return Err(
                "a trace sets its own arrival times: drop --rate/--concurrency (stretch or squeeze it with --time-scale)"
                    .into(),
            );
        }
        if self.multi_turn && self.dataset.is_none() {
            return Err("--multi-turn needs a ShareGPT --dataset".into());
        }
        if self.sessions == Some(0) {
            return Err("--sessions must be at least 1".into());
        }
        Ok(())
    }

    /// Sharding splits one open-loop schedule; a sweep's later levels would start whenever
    /// each shard's previous level drained, so shards run one level each.
    fn check_shard(&self) -> Result<(), String> {
        if self.shard.is_none() {
            return Ok(());
        }
        if !self.concurrency.is_empty() {
            return Err(
                "--shard splits an open-loop schedule (--rate or --trace): --concurrency has none to split".into()
            );
        }
        if self.rate.len() > 1 {
            return Err("--shard runs one load level: run each rate of a sweep as its own sharded run".into());
        }
        if self.trace.is_none() && self.rate.is_empty() {
            return Err("--shard needs --rate (requests or sessions per second) or --trace".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn validate(line: &str) -> Result<Protocol, String> {
        let words = std::iter::once("bench").chain(line.split_whitespace());
        Cli::try_parse_from(words).map_err(|e| e.to_string())?.args.validate()
    }

    #[test]
    fn bad_combinations_are_refused_before_anything_is_sent() {
        let url = "--url http://127.0.0.1:1/v1/chat/completions";
        assert_eq!(validate(url), Ok(Protocol::Chat));
        for (rest, says) in [
            ("--rate 0", "--rate must be positive"),
            ("--concurrency 0", "--concurrency must be at least 1"),
            ("--trace t.csv --rate 2", "a trace sets its own arrival times"),
            ("--multi-turn", "--multi-turn needs"),
            ("--shard 0/2 --concurrency 4", "--shard splits an open-loop schedule"),
            ("--shard 0/2 --rate 1,2", "--shard runs one load level"),
            ("--input-scale 0", "--input-scale must be positive"),
            ("--slo-scale 0", "--slo-scale must be positive"),
            ("--url http://127.0.0.1:1/v1/completions", "every --url must take the same protocol"),
        ] {
            let error = validate(&format!("{url} {rest}")).expect_err(rest);
            assert!(error.contains(says), "{rest}: {error}");
        }
        let error = validate("--url http://127.0.0.1:1/v1/completions --tools t.json").expect_err("tools");
        assert!(error.contains("--tools needs chat"), "{error}");
        assert!(
            validate("--url http://127.0.0.1:1/v1/responses --tools t.json").is_ok(),
            "the Responses API calls tools too"
        );
        assert!(validate("--rate 1").expect_err("no url").contains("--url"));
    }
}
