//! The "did you mean" for setting names that do not exist (which do: `table.rs`), and the
//! refusal of one redis-py name we recognise but do not take.

use crate::error::Error;

/// An error naming each unknown key (never its value: it could be a password), with the
/// closest accepted name where one is close.
pub fn unknown(keys: &[&str], accepted: &[&str], where_: &str) -> Error {
    // A misspelt eviction field given at the top level is suggested under its block's name.
    let suggestions: Vec<(&str, String)> = accepted
        .iter()
        .map(|name| (*name, name.to_string()))
        .chain(
            accepted
                .contains(&"eviction")
                .then(|| super::eviction_fields().into_iter().map(|name| (name, format!("eviction.{name}"))))
                .into_iter()
                .flatten(),
        )
        .collect();
    let mut keys = keys.to_vec();
    keys.sort_unstable();
    keys.dedup();
    let parts: Vec<String> = keys
        .iter()
        .map(|key| match closest(key, suggestions.iter().map(|(name, _)| *name)) {
            Some(name) => {
                let shown = &suggestions.iter().find(|(n, _)| *n == name).expect("suggested from the list").1;
                format!("'{key}' (did you mean '{shown}'?)")
            }
            None => format!("'{key}'"),
        })
        .collect();
    let mut accepted = accepted.to_vec();
    accepted.sort_unstable();
    Error::invalid(format!("unknown {where_}: {}; accepted: {}", parts.join(", "), accepted.join(", ")))
}

/// The candidate most like `key`, if any is alike enough to be a typo of it.
fn closest<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|candidate| (similarity(key, candidate), candidate))
        .filter(|(score, _)| *score >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// 1 minus the edit distance (with transpositions, so `hots` is one step from `host`) over
/// the longer length.
fn similarity(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1).min(rows[i][j - 1] + 1).min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    1.0 - rows[a.len()][b.len()] as f64 / longest as f64
}

/// redis-py's `ssl_password` (a passphrase for an encrypted `ssl_keyfile`): recognised so it
/// is refused with what to do instead, never with its value.
pub const KEY_PASSPHRASE_FIELD: &str = "ssl_password";

/// The refusal of [`KEY_PASSPHRASE_FIELD`].
pub fn key_passphrase_refused() -> Error {
    Error::invalid(
        "ssl_password (a passphrase for ssl_keyfile) is not supported: store the key decrypted, readable only by \
         the service's user (openssl pkey -in KEY -out KEY.plain)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_get_the_closest_name() {
        let fields = super::super::fields();
        let fields = &fields[..];
        let err = unknown(&["num_worker", "hots"], fields, "setting(s)");
        assert!(
            err.message().starts_with(
                "unknown setting(s): 'hots' (did you mean 'host'?), 'num_worker' (did you mean 'num_workers'?); accepted: "
            ),
            "{err}"
        );
        let err = unknown(&["trigger_watermak"], fields, "setting(s)");
        assert!(err.message().contains("'trigger_watermak' (did you mean 'eviction.trigger_watermark'?)"), "{err}");
        let err = unknown(&["ssl_ca_cert", "ssl_verify"], fields, "setting(s)");
        assert!(err.message().contains("'ssl_ca_cert' (did you mean 'ssl_ca_certs'?)"), "{err}");
        let err = unknown(&["zzz"], fields, "setting(s)");
        assert!(err.message().starts_with("unknown setting(s): 'zzz'; accepted: cluster, connect_timeout"), "{err}");
    }
}
