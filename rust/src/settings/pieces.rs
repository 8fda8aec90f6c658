//! How GETs of large values are read: the value of the `get_piece_bytes` setting (checked in
//! mod.rs with the others). A module of its own, below mod.rs and its `defaults`, which both
//! name it: `defaults` naming it in mod.rs would close a circle.

/// How GETs of large values are read (the `get_piece_bytes` setting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetPieces {
    /// Per server, from what its handshake says it is (`crate::ranged::shape`).
    Auto,
    /// Values larger than this many bytes in pieces of this size, from every server; 0: every
    /// value with one GET.
    Bytes(usize),
}

impl std::fmt::Display for GetPieces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetPieces::Auto => f.write_str("auto"),
            GetPieces::Bytes(bytes) => write!(f, "{bytes}"),
        }
    }
}
