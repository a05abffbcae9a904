//! A server-sent-event stream read whole, as a client sees it.

use eventsource_stream::Eventsource;
use futures::StreamExt;

/// An SSE event as the client saw it.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("bad JSON {:?}: {e}", self.data))
    }
}

/// Every event of a 200 `text/event-stream` response, until the server ends it.
pub async fn read_sse(response: reqwest::Response) -> Vec<SseEvent> {
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap_or_default().to_string();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let mut events = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    while let Some(event) = events.next().await {
        let event = event.expect("well-formed SSE");
        out.push(SseEvent { event: event.event, data: event.data });
    }
    out
}
