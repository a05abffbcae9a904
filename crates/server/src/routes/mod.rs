pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod generate;
pub mod info;
pub mod rerank;
pub mod responses;
pub mod tokenize;
