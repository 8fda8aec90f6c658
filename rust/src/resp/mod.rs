//! RESP2: command encoding and reply parsing. Pure code: no I/O here.

pub mod decoder;
pub mod encode;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod parser;
pub mod reply;
#[cfg(test)]
mod split_tests;

pub use decoder::Decoder;
pub use encode::{Command, TRAILER};
pub use parser::{Event, Limits, Progress, ProtocolError, ReplyParser};
pub use reply::Reply;
