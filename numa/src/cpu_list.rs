//! The Linux-style CPU list syntax ("0-3,8") that `cpu_affinity`, `taskset`, `numactl` and
//! sysfs share: parsing and formatting, below everything that reads or prints CPU sets
//! (the affinity setting, the errors, the plan, the binding).

/// Largest CPU or NUMA node number accepted by the parser.
///
/// Linux tops out at 8192 CPUs (`CONFIG_NR_CPUS` with MAXSMP) and 1024 nodes;
/// the cap exists so that a typo such as `0-99999999` is reported instead of
/// allocating a huge list.
pub const MAX_INDEX: u32 = 65_535;

/// Parses one decimal CPU / node number; `what` names it in the error.
pub(crate) fn parse_index(text: &str, what: &str) -> Result<u32, String> {
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

    #[test]
    fn format_compacts_ranges() {
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_list(&[7, 4, 5, 6]), "4-7");
        assert_eq!(format_cpu_list(&[0, 2, 3, 3, 9]), "0,2-3,9");
    }
}
