//! RESP2: command encoding and reply parsing. Pure code: no I/O here.

#[cfg(any(test, feature = "internals", feature = "fuzzing"))]
pub mod decoder;
pub mod encode;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod parser;
pub mod reply;
#[cfg(test)]
mod split_tests;

#[cfg(any(test, feature = "internals"))]
pub use decoder::Decoder;
pub use encode::Command;
pub use parser::{Event, Limits, ProtocolError, ReplyParser};
pub use reply::Reply;
