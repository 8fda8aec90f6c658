//! How GETs of large values are read from one server: whole, or in pieces.
//!
//! A server that copies a big reply into freshly allocated output buffers before it writes it
//! (Redis up to 8.4, Valkey up to 8.1) serves a GET of tens of MiB at a fraction of the rate
//! it serves the same bytes in 1 MiB replies, and a server whose memory is not already faulted
//! in pays the most (bench/RESULTS.md, "Whole GETs or 1 MiB pieces, by server"). Valkey 9 writes
//! a bulk reply straight from the stored value (valkey#2078), and Redis 8.6 took the same
//! change (redis#14608): there a whole GET is the faster read, and pieces only add round trips.
//!
//! `get_piece_bytes = "auto"` (the default) decides per server, from what its handshake said
//! it is ([`ServerIdentity`]); a number decides for every server. A server that did not say
//! (before Redis 6, `HELLO` denied, or another product) is read in pieces: on a server without
//! the copy, pieces cost 10-20%; on one with it, whole GETs cost 2-5x.

use crate::net::{Product, ServerIdentity, Version};
use crate::settings::GetPieces;
use std::fmt;

/// The piece size of `auto` on servers that copy big replies: from the piece-size sweeps on
/// Redis 7.0 and Valkey 8.1 (bench/archive/journal-2026-11-30-to-12-02.md, "The piece size").
pub const AUTO_PIECE_BYTES: usize = 1 << 20;

/// The first Valkey that writes bulk replies without copying them.
pub const VALKEY_WITHOUT_COPY: Version = Version(9, 0, 0);
/// The first Redis that does.
pub const REDIS_WITHOUT_COPY: Version = Version(8, 6, 0);

/// How one server's large values are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadShape {
    /// One `GET` per value, whatever its size.
    Whole,
    /// Values larger than this many bytes are read in `GETRANGE` pieces of this size.
    Pieces(usize),
}

impl ReadShape {
    /// The shape for a server that said it is `server` (`None`: it did not say), under the
    /// `get_piece_bytes` setting.
    pub fn choose(setting: GetPieces, server: Option<&ServerIdentity>) -> ReadShape {
        match setting {
            GetPieces::Bytes(0) => ReadShape::Whole,
            GetPieces::Bytes(bytes) => ReadShape::Pieces(bytes),
            GetPieces::Auto if server.is_some_and(writes_replies_without_copy) => ReadShape::Whole,
            GetPieces::Auto => ReadShape::Pieces(AUTO_PIECE_BYTES),
        }
    }

    /// The largest value read with one GET (`usize::MAX` for [`ReadShape::Whole`]).
    pub fn piece_bytes(self) -> usize {
        match self {
            ReadShape::Whole => usize::MAX,
            ReadShape::Pieces(bytes) => bytes,
        }
    }
}

impl fmt::Display for ReadShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadShape::Whole => f.write_str("whole GETs"),
            ReadShape::Pieces(bytes) if bytes % (1 << 20) == 0 => write!(f, "pieces of {} MiB", bytes >> 20),
            ReadShape::Pieces(bytes) => write!(f, "pieces of {bytes} bytes"),
        }
    }
}

fn writes_replies_without_copy(server: &ServerIdentity) -> bool {
    match server.product {
        Product::Valkey => server.version >= VALKEY_WITHOUT_COPY,
        Product::Redis => server.version >= REDIS_WITHOUT_COPY,
        Product::Other(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(product: Product, version: Version) -> ServerIdentity {
        ServerIdentity { product, version }
    }

    #[test]
    fn auto_reads_whole_only_from_servers_that_write_replies_without_copying() {
        let auto = |s: &ServerIdentity| ReadShape::choose(GetPieces::Auto, Some(s));
        let pieces = ReadShape::Pieces(AUTO_PIECE_BYTES);
        assert_eq!(auto(&server(Product::Redis, Version(7, 0, 15))), pieces);
        assert_eq!(auto(&server(Product::Redis, Version(8, 4, 9))), pieces);
        assert_eq!(auto(&server(Product::Redis, Version(8, 6, 0))), ReadShape::Whole);
        assert_eq!(auto(&server(Product::Valkey, Version(8, 1, 8))), pieces);
        assert_eq!(auto(&server(Product::Valkey, Version(9, 0, 0))), ReadShape::Whole);
        assert_eq!(auto(&server(Product::Valkey, Version(9, 1, 2))), ReadShape::Whole);
        assert_eq!(auto(&server(Product::Other("keydb".into()), Version(99, 0, 0))), pieces);
        assert_eq!(ReadShape::choose(GetPieces::Auto, None), pieces, "a server that did not say");
    }

    #[test]
    fn a_number_decides_for_every_server() {
        let valkey9 = server(Product::Valkey, Version(9, 1, 2));
        assert_eq!(ReadShape::choose(GetPieces::Bytes(0), None), ReadShape::Whole);
        assert_eq!(ReadShape::choose(GetPieces::Bytes(4 << 20), Some(&valkey9)), ReadShape::Pieces(4 << 20));
        assert_eq!(ReadShape::choose(GetPieces::Bytes(0), Some(&valkey9)).piece_bytes(), usize::MAX);
    }

    #[test]
    fn shapes_read_as_words() {
        assert_eq!(ReadShape::Whole.to_string(), "whole GETs");
        assert_eq!(ReadShape::Pieces(1 << 20).to_string(), "pieces of 1 MiB");
        assert_eq!(ReadShape::Pieces(65536).to_string(), "pieces of 65536 bytes");
    }
}
