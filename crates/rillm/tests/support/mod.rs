//! What the CLI's tests share beyond `rillm-test-support`: the binary, `rillm serve` over
//! the default model with the tests' settings, and `rillm bench` runs read back.
#![allow(dead_code, unused_imports)] // each test binary uses its own subset

use std::process::{Command, Stdio};

pub use rillm_test_support::model;
pub use rillm_test_support::model_lock_blocking as serial;
pub use rillm_test_support::process::{http, ServeProcess as Server};

pub const BIN: &str = env!("CARGO_BIN_EXE_rillm");

/// The JSON body of a raw HTTP response (`http`'s), or `null` when there is none.
pub fn json_body(response: &str) -> serde_json::Value {
    serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap_or_default()
}

/// `rillm serve` on the default model: 4 running sequences, `ctx` tokens each, then `extra`.
pub fn start_server(ctx: u32, extra: &[&str]) -> Server {
    let model = model();
    let ctx = ctx.to_string();
    let mut args = vec!["--max-running", "4", "--ctx-size", &ctx, "--model", model.to_str().expect("a UTF-8 path")];
    args.extend_from_slice(extra);
    Server::start(std::path::Path::new(BIN), &args)
}

/// Runs `rillm bench` with `args` (it must succeed) and returns its result file (written
/// as `name`.json in a directory of its own, removed after).
pub fn bench_result(args: &[&str], name: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("a temp dir");
    let out = dir.path().join(format!("{name}.json"));
    let status =
        Command::new(BIN).arg("bench").args(args).arg("--output").arg(&out).stdout(Stdio::null()).status().unwrap();
    assert!(status.success(), "rillm bench {args:?}");
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}
