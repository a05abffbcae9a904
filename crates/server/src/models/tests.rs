use std::sync::Mutex;

use rillm_backend::scripted::{Script, ScriptedBackend};

use super::*;

/// Loads scripted backends, counting loads per name; `slow` names take 200 ms, `broken`
/// ones fail.
#[derive(Default)]
struct Loader {
    loads: Mutex<Vec<String>>,
    /// The last engine started.
    last: Mutex<Option<Arc<ScriptedBackend>>>,
}

impl ModelLoader for Loader {
    fn load(&self, name: &str) -> Result<Arc<dyn Backend>, String> {
        self.loads.lock().unwrap().push(name.to_string());
        if name.starts_with("slow") {
            std::thread::sleep(Duration::from_millis(200));
        }
        if name.starts_with("broken") {
            return Err("not a GGUF file".into());
        }
        let engine = ScriptedBackend::start(Script::default());
        *self.last.lock().unwrap() = Some(Arc::clone(&engine));
        Ok(engine as Arc<dyn Backend>)
    }
}

fn spec(name: &str) -> ModelSpec {
    ModelSpec {
        name: name.into(),
        aliases: vec![format!("{name}-alias")],
        pinned: name.starts_with("pinned"),
        file_bytes: 100,
        tool_call_parser: None,
        reasoning_parser: None,
    }
}

fn registry(names: &[&str], max_loaded: Option<usize>) -> (Arc<ModelRegistry>, Arc<Loader>) {
    let loader = Arc::new(Loader::default());
    let limits = ModelLimits {
        max_loaded,
        load_timeout: Duration::from_secs(5),
        idle_unload: None,
        memory_bytes: None,
        prefix_cache_bytes: 0,
    };
    let registry = ModelRegistry::new(names.iter().map(|n| spec(n)).collect(), loader.clone(), limits);
    (Arc::new(registry), loader)
}

fn status(registry: &ModelRegistry, name: &str) -> ModelStatus {
    registry.statuses().into_iter().find(|m| m.spec.name == name).map(|m| m.status).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_route_by_name_or_alias_and_an_unknown_name_is_a_404() {
    let (registry, _) = registry(&["a", "b"], None);
    assert_eq!(registry.acquire(Some("b-alias")).await.ok().map(|m| m.name.clone()), Some("b".into()));
    let unknown = registry.acquire(Some("c")).await.err().expect("refused");
    assert_eq!(unknown.status.as_u16(), 404);
    let unnamed = registry.acquire(None).await.err().expect("two models: which?");
    assert_eq!(unnamed.body()["error"]["param"], "model");
    let (single, _) = registry_one();
    assert!(single.acquire(None).await.is_ok(), "one model needs no name");
    // A router's stand-in for no name reaches the one model, unless a model is called so.
    assert_eq!(single.acquire(Some("unknown")).await.ok().map(|m| m.name.clone()), Some("only".into()));
    let routed = registry.acquire(Some("unknown")).await.err().expect("two models: which?");
    assert_eq!(routed.body()["error"]["param"], "model");
    let (named_so, _) = self::registry(&["unknown", "b"], None);
    assert_eq!(named_so.acquire(Some("unknown")).await.ok().map(|m| m.name.clone()), Some("unknown".into()));
}

fn registry_one() -> (Arc<ModelRegistry>, Arc<Loader>) {
    registry(&["only"], None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_a_loading_model_share_one_load() {
    let (registry, loader) = registry(&["slow"], None);
    let waits = (0..8).map(|_| {
        let registry = Arc::clone(&registry);
        async move { registry.acquire(Some("slow")).await.is_ok() }
    });
    let bound = futures::future::join_all(waits).await;
    assert!(bound.iter().all(|&ok| ok));
    assert_eq!(loader.loads.lock().unwrap().len(), 1);
    assert_eq!(status(&registry, "slow"), ModelStatus::Loaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_max_unloads_the_least_recently_used_idle_model_never_a_busy_one() {
    let (registry, _) = registry(&["a", "b", "c"], Some(2));
    let busy = registry.acquire(Some("a")).await.expect("a");
    drop(registry.acquire(Some("b")).await.expect("b"));
    drop(registry.acquire(Some("c")).await.expect("c"));
    // a was used first but is still in use: b (idle) made room.
    assert_eq!(status(&registry, "a"), ModelStatus::Loaded);
    assert_eq!(status(&registry, "b"), ModelStatus::Unloaded);
    assert_eq!(status(&registry, "c"), ModelStatus::Loaded);
    // The request bound to a still runs on its engine.
    assert_eq!(busy.backend().health(), rillm_backend::Health::Ok);
    drop(busy);
    drop(registry.acquire(Some("b")).await.expect("b again"));
    assert_eq!(status(&registry, "a"), ModelStatus::Unloaded, "now idle and least recent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_idle_model_to_unload_a_load_waits_for_one_and_never_goes_past_models_max() {
    let (registry, loader) = registry(&["a", "b"], Some(1));
    let busy = registry.acquire(Some("a")).await.expect("a");
    let waiting = tokio::spawn({
        let registry = Arc::clone(&registry);
        async move { registry.acquire(Some("b")).await.map(drop) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(&registry, "a"), ModelStatus::Loaded, "in use: not unloaded");
    assert_eq!(status(&registry, "b"), ModelStatus::Loading, "waiting for room, not loaded beside it");
    assert_eq!(loader.loads.lock().unwrap().len(), 1);
    drop(busy);
    waiting.await.expect("joined").expect("b, once a went idle");
    assert_eq!(status(&registry, "a"), ModelStatus::Unloaded);
    assert_eq!(status(&registry, "b"), ModelStatus::Loaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_that_finds_no_room_within_the_load_timeout_is_a_503_and_tried_again_later() {
    let loader = Arc::new(Loader::default());
    let limits = ModelLimits {
        max_loaded: Some(1),
        load_timeout: Duration::from_millis(300),
        idle_unload: None,
        memory_bytes: None,
        prefix_cache_bytes: 0,
    };
    let registry = Arc::new(ModelRegistry::new(vec![spec("a"), spec("b")], loader.clone(), limits));
    let busy = registry.acquire(Some("a")).await.expect("a");
    let Err(refused) = registry.acquire(Some("b")).await else { panic!("b loaded with no room") };
    assert_eq!(refused.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
    // The loading thread's own --load-timeout ends a little after the request's.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while status(&registry, "b") != ModelStatus::Unloaded {
        assert!(std::time::Instant::now() < deadline, "the load was not given up: {:?}", status(&registry, "b"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(loader.loads.lock().unwrap().len(), 1, "b was never loaded beside a");
    drop(busy);
    drop(registry.acquire(Some("b")).await.expect("b, with room now"));
    assert_eq!(status(&registry, "a"), ModelStatus::Unloaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_memory_unloads_the_least_recently_used_until_the_next_model_fits() {
    const GIB: u64 = 1 << 30;
    let loader = Arc::new(Loader::default());
    // Three 1 GiB files, each with a 256 MiB prefix-cache budget, in 2.75 GiB: two fit
    // (what a scripted engine adds to the process is far below the slack).
    let limits = ModelLimits {
        max_loaded: None,
        load_timeout: Duration::from_secs(5),
        idle_unload: None,
        memory_bytes: Some(2 * GIB + 3 * GIB / 4),
        prefix_cache_bytes: GIB / 4,
    };
    let big = |name: &str| ModelSpec { file_bytes: GIB, ..spec(name) };
    let registry = Arc::new(ModelRegistry::new(vec![big("a"), big("b"), big("c")], loader, limits));
    drop(registry.acquire(Some("a")).await.expect("a"));
    drop(registry.acquire(Some("b")).await.expect("b"));
    assert_eq!((status(&registry, "a"), status(&registry, "b")), (ModelStatus::Loaded, ModelStatus::Loaded));
    drop(registry.acquire(Some("c")).await.expect("c"));
    assert_eq!(status(&registry, "a"), ModelStatus::Unloaded, "least recently used");
    assert_eq!((status(&registry, "b"), status(&registry, "c")), (ModelStatus::Loaded, ModelStatus::Loaded));
    let measured = registry.statuses().into_iter().find(|m| m.spec.name == "c").and_then(|m| m.measured_bytes);
    assert!(measured.is_some_and(|bytes| bytes >= GIB), "its file at least: {measured:?}");
    // One larger than the whole budget loads alone.
    let huge = ModelSpec { file_bytes: 4 * GIB, ..spec("huge") };
    let registry = Arc::new(ModelRegistry::new(vec![big("a"), huge], Arc::new(Loader::default()), limits));
    drop(registry.acquire(Some("a")).await.expect("a"));
    drop(registry.acquire(Some("huge")).await.expect("huge, alone"));
    assert_eq!(status(&registry, "a"), ModelStatus::Unloaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_model_is_never_unloaded_to_make_room() {
    let (registry, _) = registry(&["pinned", "b", "c"], Some(2));
    drop(registry.acquire(Some("pinned")).await.expect("pinned"));
    drop(registry.acquire(Some("b")).await.expect("b"));
    drop(registry.acquire(Some("c")).await.expect("c"));
    assert_eq!(status(&registry, "pinned"), ModelStatus::Loaded);
    assert_eq!(status(&registry, "b"), ModelStatus::Unloaded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_fails_to_load_is_reported_and_the_others_serve() {
    let (registry, loader) = registry(&["broken", "a"], None);
    let failed = registry.acquire(Some("broken")).await.err().expect("failed");
    assert_eq!(failed.status.as_u16(), 503);
    assert!(failed.message.contains("not a GGUF file"), "{}", failed.message);
    assert_eq!(status(&registry, "broken"), ModelStatus::Failed("not a GGUF file".into()));
    assert!(registry.acquire(Some("a")).await.is_ok());
    // Requests get the failure without reading the file again...
    assert!(registry.acquire(Some("broken")).await.is_err());
    let broken_loads = || loader.loads.lock().unwrap().iter().filter(|n| *n == "broken").count();
    assert_eq!(broken_loads(), 1);
    // ...until a load (`POST /models/load`) or an unload forgets it and tries again.
    assert!(registry.load("broken").await.is_err());
    assert_eq!(broken_loads(), 2);
    assert!(registry.unload("broken").expect("known"));
    assert!(registry.acquire(Some("broken")).await.is_err());
    assert_eq!(broken_loads(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_whose_engine_dies_is_reported_failed_and_the_next_request_loads_it_again() {
    let (registry, loader) = registry(&["a"], None);
    let bound = registry.acquire(Some("a")).await.expect("a");
    let engine = loader.last.lock().unwrap().clone().expect("a scripted engine");
    engine.panic_engine();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !matches!(status(&registry, "a"), ModelStatus::Failed(_)) {
        assert!(std::time::Instant::now() < deadline, "still {:?}", status(&registry, "a"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(bound);
    let again = registry.acquire(Some("a")).await.expect("a fresh engine");
    assert_eq!(again.backend().health(), rillm_backend::Health::Ok);
    assert_eq!(status(&registry, "a"), ModelStatus::Loaded);
    assert_eq!(loader.loads.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unloading_a_model_in_use_lets_its_request_finish_on_it() {
    let (registry, _) = registry_one();
    let bound = registry.acquire(Some("only")).await.expect("bound");
    assert!(registry.unload("only").expect("known"));
    assert_eq!(status(&registry, "only"), ModelStatus::Unloaded);
    let request = rillm_backend::GenerateRequest::new(rillm_backend::Prompt::Text("hi".into()));
    let mut stream = bound.backend().submit(request).expect("the engine still runs for this request");
    let mut last = None;
    while let Some(event) = stream.next_event().await {
        last = Some(event);
    }
    assert!(matches!(last, Some(rillm_backend::StreamEvent::Finished(_))), "{last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_idle_past_idle_unload_is_unloaded_but_not_one_in_use() {
    let loader = Arc::new(Loader::default());
    let limits = ModelLimits {
        max_loaded: None,
        load_timeout: Duration::from_secs(5),
        idle_unload: Some(Duration::from_millis(100)),
        memory_bytes: None,
        prefix_cache_bytes: 0,
    };
    let registry = Arc::new(ModelRegistry::new(vec![spec("a"), spec("b")], loader, limits));
    drop(registry.acquire(Some("a")).await.expect("a"));
    let busy = registry.acquire(Some("b")).await.expect("b");
    assert_eq!(registry.unload_idle(), 0, "both used just now");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(registry.unload_idle(), 1);
    assert_eq!(status(&registry, "a"), ModelStatus::Unloaded);
    assert_eq!(status(&registry, "b"), ModelStatus::Loaded, "in use");
    drop(busy);
}
