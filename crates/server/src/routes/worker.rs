//! What a router asks of the workers behind it, so that rillm replicas run behind SGLang's
//! model gateway (`sglang-router`) and its fork `vllm-router`: they read
//! `/server_info` and `/model_info` (or their old `get_` names) when a worker registers,
//! `/get_load` for load-aware policies, and fan `/flush_cache` out to every worker.
//! Answered with rillm's own meaning: the load is requests running plus waiting, a flush
//! drops the prefix cache's idle slots and host tier. See docs/scale-out.md.

use axum::extract::State;
use axum::Json;
use rillm_backend::{ModelTask, PrefixCacheFlush};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::AppState;

/// `GET /server_info` (and `/get_server_info`): the name a router files this worker
/// under, and its capacity. A router takes `served_model_name` as the worker's model id
/// (with several models there is none to give: requests name theirs).
pub async fn server_info(State(state): State<AppState>) -> Json<Value> {
    let backends = state.serving_backends();
    let (mut sequences, mut cells) = (0, 0);
    for backend in &backends {
        // Sequences run at once: the KV cells over each sequence's share.
        let total = backend.stats().kv_cells_total;
        (sequences, cells) = (sequences + total / u64::from(backend.context_length().max(1)), cells + total);
    }
    let mut info = json!({
        "engine": "rillm",
        "version": env!("CARGO_PKG_VERSION"),
        "tp_size": 1,
        "dp_size": 1,
        "max_running_requests": sequences,
        "max_total_tokens": cells,
    });
    match (state.models(), backends.first()) {
        (Some(models), _) => info["models"] = json!(models.names()),
        (None, backend) => {
            info["served_model_name"] = json!(state.model_name());
            info["context_length"] = json!(backend.map(|b| b.context_length()));
        }
    }
    Json(info)
}

/// `GET /model_info` (and `/get_model_info`): whether the model generates. No tokenizer
/// path: the weights are a GGUF, which a router cannot load as a tokenizer.
pub async fn model_info(State(state): State<AppState>) -> Json<Value> {
    let task = state.serving_backends().first().map_or(ModelTask::Generate, |b| b.task());
    Json(json!({"is_generation": task == ModelTask::Generate, "model_type": "gguf"}))
}

/// `GET /get_load`: one entry per data-parallel rank, as SGLang answers (rillm has one).
/// `num_reqs` (and `load`) counts requests running plus waiting; `num_tokens`, which
/// sglang-router's `power_of_two` policy sums, is KV cells in use by running sequences.
pub async fn load(State(state): State<AppState>) -> Json<Value> {
    let (mut running, mut waiting, mut tokens) = (0, 0, 0);
    for backend in state.serving_backends() {
        let stats = backend.stats();
        (running, waiting, tokens) = (running + stats.running, waiting + stats.waiting, tokens + stats.kv_cells_used);
    }
    Json(json!([{
        "dp_rank": 0,
        "num_reqs": running + waiting,
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_tokens": tokens,
        "load": running + waiting,
    }]))
}

/// `POST /flush_cache` (GET too, as SGLang takes it): forgets every cached prefix that
/// no running request uses, on every loaded model, and says what went. Running requests
/// keep their KV; SGLang refuses a flush while any run, rillm flushes the rest.
pub async fn flush_cache(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut total = PrefixCacheFlush::default();
    for backend in state.serving_backends() {
        let flushed = tokio::task::spawn_blocking(move || backend.flush_prefix_cache())
            .await
            .map_err(|_| ApiError::internal("the flush failed"))?
            .map_err(|rejected| ApiError::unavailable(rejected.to_string()))?;
        total.slots += flushed.slots;
        total.host_entries += flushed.host_entries;
        total.host_bytes += flushed.host_bytes;
        total.running += flushed.running;
    }
    Ok(Json(json!({
        "success": true,
        "message": "Cache flushed.",
        "slots_cleared": total.slots,
        "host_entries_dropped": total.host_entries,
        "host_bytes_dropped": total.host_bytes,
        "running_kept": total.running,
    })))
}

/// The routes, under the paths both routers use (their current and old names).
pub fn routes(router: axum::Router<AppState>) -> axum::Router<AppState> {
    use axum::routing::get;
    router
        .route("/server_info", get(server_info))
        .route("/get_server_info", get(server_info))
        .route("/model_info", get(model_info))
        .route("/get_model_info", get(model_info))
        .route("/get_load", get(load))
        .route("/flush_cache", get(flush_cache).post(flush_cache))
}
