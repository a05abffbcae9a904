//! OpenAI's Responses API (`POST /v1/responses`), the OpenAI Agents SDK's default and newer
//! `openai` SDK code's: a request is read into the chat path's own pieces (`input`: the
//! history, tools and `text.format`), generated as a chat request is, and its reply written
//! as output items (`output`) and the events that stream them (`format`). rillm keeps no
//! responses: `store` is answered `false`, and `previous_response_id` is refused.

mod format;
mod input;
mod output;

pub use format::{Echo, ResponsesFormat};
pub use input::{history, text_format, tools};
