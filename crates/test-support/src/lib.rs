//! What rillm's integration tests share, so each crate's `tests/support` keeps only what is
//! its own (the server's in-process engine, the bench's mock, the CLI's bench runs):
//! - one model process at a time ([`model_lock`]): the tests share two cores;
//! - servers on loopback: `rillm serve` as a child process ([`process`]), or any server
//!   future on a runtime thread of its own ([`thread_server`]), so its timing does not
//!   depend on the test's;
//! - waiting for `/ready`, reading SSE, raw HTTP/1.1, the Python `scripts/test` set up.

pub mod process;
pub mod python;
pub mod sse;
pub mod thread_server;

use std::time::{Duration, Instant};

use tokio::sync::{Mutex, MutexGuard};

pub use python::python_with;
pub use rillm_models::model_for_tests as model;
pub use sse::{read_sse, SseEvent};

static MODEL_LOCK: Mutex<()> = Mutex::const_new(());

/// Held while a test runs a model (in-process or as a child process).
pub async fn model_lock() -> MutexGuard<'static, ()> {
    MODEL_LOCK.lock().await
}

/// [`model_lock`] for tests without a runtime.
pub fn model_lock_blocking() -> MutexGuard<'static, ()> {
    MODEL_LOCK.blocking_lock()
}

/// Polls `url` until it answers 200, or panics after `timeout`.
pub async fn wait_ready(client: &reqwest::Client, url: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if client.get(url).send().await.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(Instant::now() < deadline, "{url} never answered 200 within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
