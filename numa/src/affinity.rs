//! The user-facing `cpu_affinity` setting and the Linux-style CPU list
//! syntax ("0-3,8") it shares with `taskset`, `numactl` and sysfs.

use std::fmt;
use std::str::FromStr;

use crate::error::NumaError;

/// Largest CPU or NUMA node number accepted by the parser.
///
/// Linux tops out at 8192 CPUs (`CONFIG_NR_CPUS` with MAXSMP) and 1024 nodes;
/// the cap exists so that a typo such as `0-99999999` is reported instead of
/// allocating a huge list.
pub const MAX_INDEX: u32 = 65_535;

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

/// Parses one decimal CPU / node number; `what` names it in the error.
fn parse_index(text: &str, what: &str) -> Result<u32, String> {
    // u32::from_str would accept "+3"; only plain digits are a CPU number.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a {what} number"));
    }
    match text.parse::<u32>() {
        Ok(n) if n <= MAX_INDEX => Ok(n),
        _ => Err(format!("{what} number {text} is too large (maximum {MAX_INDEX})")),
    }
}

/// Parses a CPU list such as `0-3,8` into sorted, de-duplicated CPU numbers.
///
/// The error is a bare reason; callers wrap it with the original input.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the CPU list is empty".to_owned());
    }
    let mut cpus = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err("empty entry in CPU list (stray or trailing comma?)".to_owned());
        }
        match item.split_once('-') {
            None => cpus.push(parse_index(item, "CPU")?),
            Some((lo, hi)) => {
                let (lo, hi) = (lo.trim(), hi.trim());
                if lo.is_empty() || hi.is_empty() {
                    return Err(format!("range {item:?} is missing a bound"));
                }
                let (lo, hi) = (parse_index(lo, "CPU")?, parse_index(hi, "CPU")?);
                if lo > hi {
                    return Err(format!("range {lo}-{hi} is reversed (did you mean {hi}-{lo}?)"));
                }
                cpus.extend(lo..=hi);
            }
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPU (or node) numbers in the compact list syntax, e.g. `0-3,8`.
///
/// Input order and duplicates do not matter. An empty slice gives "".
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut iter = sorted.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    }
    parts.join(",")
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

    #[test]
    fn format_compacts_ranges() {
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_list(&[7, 4, 5, 6]), "4-7");
        assert_eq!(format_cpu_list(&[0, 2, 3, 3, 9]), "0,2-3,9");
    }
}
