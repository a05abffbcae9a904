//! OpenAI's Responses API (`POST /v1/responses`), the OpenAI Agents SDK's default and newer
//! `openai` SDK code's: a request is read into the chat path's own pieces (`input`: the
//! history, tools and `text.format`), generated as a chat request is, and its reply written
//! as output items (`output`) and the events that stream them (`format`). Finished
//! responses are kept in memory (`store`) for `previous_response_id` and retrieval, and
//! background ones there while they run; the Conversations API is not served.

mod format;
mod input;
mod output;
mod store;

pub use format::{Echo, Keep, ResponsesFormat};
pub use input::{conversation, text_format, tools, with_instructions};
pub use store::{NotCancelled, ResponseStore};
