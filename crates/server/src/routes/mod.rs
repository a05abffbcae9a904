pub mod chat;
pub mod completions;
pub mod generate;
pub mod info;
pub mod responses;
pub mod tokenize;
