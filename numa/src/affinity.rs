//! The user-facing `cpu_affinity` setting: `auto`, `none`, a CPU list in the
//! syntax of [`crate::cpu_list`], or `numa:N`.

use std::fmt;
use std::str::FromStr;

use crate::cpu_list::{format_cpu_list, parse_cpu_list, parse_index};
use crate::error::NumaError;

/// Where the I/O threads (and their buffers) should live.
///
/// Parsed from strings: `auto`, `none`, a CPU list such as `0-3,8`, or
/// `numa:N`. Parsing normalizes CPU lists (sorted, duplicates removed) and
/// [`Display`](fmt::Display) prints the same syntax back, so a parsed value
/// round-trips.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum CpuAffinity {
    /// Follow the NIC that carries the traffic: its NUMA node's CPUs and
    /// memory; no pinning at all when the traffic has no device (loopback,
    /// unix sockets, virtual interfaces).
    #[default]
    Auto,
    /// Leave scheduling and memory placement to the kernel.
    None,
    /// Exactly these CPUs (OS numbering, as in `/proc/cpuinfo`).
    Cpus(Vec<u32>),
    /// All CPUs of this NUMA node (OS numbering), memory on that node.
    NumaNode(u32),
}

impl FromStr for CpuAffinity {
    type Err = NumaError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let text = input.trim();
        if text.is_empty() {
            return Err(NumaError::invalid_affinity(input, "the value is empty"));
        }
        let lower = text.to_ascii_lowercase();
        match lower.as_str() {
            "auto" => return Ok(Self::Auto),
            "none" => return Ok(Self::None),
            _ => {}
        }
        if let Some(node) = lower.strip_prefix("numa:") {
            let node = node.trim();
            if node.is_empty() {
                return Err(NumaError::invalid_affinity(input, "missing NUMA node number after \"numa:\""));
            }
            return parse_index(node, "NUMA node")
                .map(Self::NumaNode)
                .map_err(|reason| NumaError::invalid_affinity(input, reason));
        }
        parse_cpu_list(text).map(Self::Cpus).map_err(|reason| NumaError::invalid_affinity(input, reason))
    }
}

impl fmt::Display for CpuAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::None => f.write_str("none"),
            Self::Cpus(cpus) => f.write_str(&format_cpu_list(cpus)),
            Self::NumaNode(node) => write!(f, "numa:{node}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<CpuAffinity, String> {
        s.parse::<CpuAffinity>().map_err(|e| e.to_string())
    }

    #[test]
    fn keywords() {
        assert_eq!(parse("auto"), Ok(CpuAffinity::Auto));
        assert_eq!(parse(" AUTO "), Ok(CpuAffinity::Auto));
        assert_eq!(parse("none"), Ok(CpuAffinity::None));
        assert_eq!(parse("numa:1"), Ok(CpuAffinity::NumaNode(1)));
        assert_eq!(parse("NUMA: 3"), Ok(CpuAffinity::NumaNode(3)));
    }

    #[test]
    fn cpu_lists_are_sorted_and_deduplicated() {
        assert_eq!(parse("0-3,8"), Ok(CpuAffinity::Cpus(vec![0, 1, 2, 3, 8])));
        assert_eq!(parse("8,2,2,0-1, 1"), Ok(CpuAffinity::Cpus(vec![0, 1, 2, 8])));
        assert_eq!(parse("5-5"), Ok(CpuAffinity::Cpus(vec![5])));
        assert_eq!(parse("65535"), Ok(CpuAffinity::Cpus(vec![65535])));
    }

    #[test]
    fn bad_input_is_explained() {
        let cases = [
            ("", "empty"),
            ("   ", "empty"),
            ("3-1", "reversed (did you mean 1-3?)"),
            ("abc", "\"abc\" is not a CPU number"),
            ("numa:", "missing NUMA node number"),
            ("numa:x", "\"x\" is not a NUMA node number"),
            ("numa:-1", "\"-1\" is not a NUMA node number"),
            ("numa:70000", "NUMA node number 70000 is too large"),
            ("0,1,", "trailing comma"),
            (",0", "trailing comma"),
            ("0,,1", "empty entry"),
            ("99999999999", "CPU number 99999999999 is too large (maximum 65535)"),
            ("0-99999999", "too large"),
            ("-1", "missing a bound"),
            ("1-", "missing a bound"),
            ("+1", "\"+1\" is not a CPU number"),
            ("1-2-3", "\"2-3\" is not a CPU number"),
            ("auto,0", "\"auto\" is not a CPU number"),
        ];
        for (input, expected) in cases {
            let err = parse(input).expect_err(input);
            assert!(err.contains(expected), "{input:?}: {err}");
            assert!(err.contains("invalid cpu_affinity"), "{input:?}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["auto", "none", "numa:0", "numa:12", "0-3,8", "1", "0,2,4-7,9-10"] {
            let parsed: CpuAffinity = text.parse().unwrap();
            assert_eq!(parsed.to_string(), text);
            assert_eq!(parsed.to_string().parse::<CpuAffinity>().unwrap(), parsed);
        }
        // Non-canonical input normalizes, then round-trips.
        let parsed: CpuAffinity = "3,1-2,0".parse().unwrap();
        assert_eq!(parsed.to_string(), "0-3");
    }
}
