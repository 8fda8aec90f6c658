//! The settings' table against itself and against docs/lmcache.md, which lists every setting
//! (`_typing.py` and `_native.pyi` are checked against it by py-tests/test_stubs.py, through
//! `_native.Settings.table`).

use super::*;
use std::collections::BTreeSet;

const DOCS: &str = include_str!("../../../docs/lmcache.md");

fn all_rows() -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().chain(EVICTION_SETTINGS)
}

fn defaults() -> Settings {
    Settings::resolve(&Sources::default()).unwrap()
}

/// A shown value as a user writes it (the docs' and a URL's spelling): `10`, `0.8`, `true`.
fn written(shown: &Shown) -> Option<String> {
    match shown {
        Shown::Flag(flag) => Some(flag.to_string()),
        Shown::Count(n) => Some(n.to_string()),
        Shown::Number(x) => Some(x.to_string()),
        Shown::Text(text) => Some(text.clone()),
        Shown::None | Shown::Secret(_) | Shown::Eviction(_) => None,
    }
}

#[test]
fn names_variables_and_aliases_are_each_declared_once() {
    let mut names = BTreeSet::new();
    for row in all_rows() {
        assert!(names.insert(row.name), "{} is declared twice", row.name);
        assert!(!row.doc.is_empty() && !row.accepts.is_empty(), "{}: doc and accepts are required", row.name);
    }
    let vars: Vec<&str> = env_vars().iter().map(|(_, var)| *var).collect();
    assert_eq!(vars.iter().collect::<BTreeSet<_>>().len(), vars.len(), "{vars:?}");
    assert!(vars.iter().all(|var| var.starts_with("LMCACHE_RESP_")), "{vars:?}");
    for (alias, ours) in lmcache_aliases() {
        assert!(!names.contains(alias), "LMCache's {alias} is also a name of ours");
        assert!(names.contains(ours));
    }
    assert!(EVICTION_SETTINGS.iter().all(|row| !row.read.is_alone()), "the block's fields are read with it");
}

/// Each setting read alone takes back the value it shows by default, from every source its row
/// names: as a keyword, in a URL's query and from its variable. A row whose reader and getter
/// disagree, or whose query key or variable is not read, fails here.
#[test]
fn every_setting_read_alone_reads_what_it_shows_from_every_source_its_row_names() {
    let defaults = defaults();
    for row in SETTINGS.iter().filter(|row| row.read.is_alone()) {
        let shown = (row.show)(&defaults);
        let Some(text) = written(&shown) else { continue };
        let explicit = vec![(row.name.to_owned(), Value::Text(text.clone()))];
        let s = Settings::resolve(&Sources { explicit: &explicit, ..Sources::default() }).unwrap();
        assert_eq!((row.show)(&s), shown, "{} = {text:?} as a keyword", row.name);
        if row.url == InUrl::Query {
            let url = format!("resp://h:1?{}={text}", row.name);
            let s = Settings::resolve(&Sources { url: Some(&url), ..Sources::default() }).unwrap();
            assert_eq!((row.show)(&s), shown, "{url}");
        }
        if let Some(var) = row.env {
            let env = vec![(var.to_owned(), text.clone())];
            let s = Settings::resolve(&Sources { env: &env, ..Sources::default() }).unwrap();
            assert_eq!((row.show)(&s), shown, "{var}={text}");
        }
    }
}

#[test]
fn a_url_query_takes_exactly_the_rows_query_keys() {
    for row in all_rows() {
        let url = format!("resp://h:1?{}=x", row.name);
        let err = Settings::resolve(&Sources { url: Some(&url), ..Sources::default() }).err();
        let unknown = err.as_ref().is_some_and(|e| e.message().contains("unknown parameter"));
        let refused = err.as_ref().is_some_and(|e| e.message().contains("not read from a URL's query"));
        match row.url {
            InUrl::Query => assert!(!unknown && !refused, "{url}: {err:?}"),
            InUrl::Never => assert!(unknown || refused, "{url} accepted"),
            InUrl::Parsed(_) => {}
        }
    }
}

/// One line of a markdown table in docs/lmcache.md whose first cell is `` `name` ``.
fn doc_line(name: &str) -> Option<&'static str> {
    DOCS.lines().find(|line| line.starts_with(&format!("| `{name}` |")))
}

fn cells(line: &str) -> Vec<&str> {
    line.trim_matches('|').split(" | ").map(str::trim).collect()
}

/// Every setting has its row in docs/lmcache.md ("Every setting", or the Sentinel table), whose
/// URL and environment columns say what the table does, and whose default is the code's.
#[test]
fn docs_lmcache_md_lists_every_setting_as_the_table_declares_it() {
    let defaults = defaults();
    let mut problems = Vec::new();
    for row in all_rows() {
        let shown = if EVICTION_SETTINGS.iter().any(|e| e.name == row.name) {
            format!("eviction.{}", row.name)
        } else {
            row.name.to_owned()
        };
        if row.name == "eviction" {
            continue; // documented field by field, as eviction.<field>
        }
        let Some(line) = doc_line(&shown) else {
            problems.push(format!("{shown}: no row `| `{shown}` | ...` in docs/lmcache.md"));
            continue;
        };
        match row.env {
            Some(var) if !line.contains(var) => problems.push(format!("{shown}: its row does not name {var}")),
            None if line.contains("LMCACHE_RESP_") => {
                problems.push(format!("{shown}: its row names a variable, but no variable fills it in"))
            }
            _ => {}
        }
        let query = format!("?{}=", row.name);
        match row.url {
            InUrl::Query if !line.contains(&query) => problems.push(format!("{shown}: its row does not show {query}")),
            InUrl::Parsed(form) if !line.contains(form) => {
                problems.push(format!("{shown}: its row does not show the URL form {form}"))
            }
            InUrl::Never if line.contains(&query) => {
                problems.push(format!("{shown}: its row shows {query}, which a URL may not carry"))
            }
            _ => {}
        }
        if let Read::Integer { min, max, .. } = row.read {
            if !line.contains(&format!("{min}..{max}")) {
                problems.push(format!("{shown}: its row does not say {min}..{max}"));
            }
        }
        let default = written(&(row.show)(&defaults));
        let groups = [Group::Tls, Group::Sentinel];
        if let (Some(default), false) = (default, groups.iter().any(|g| matches!(row.read, Read::With(r) if r == *g))) {
            let column = cells(line).get(1).copied().unwrap_or_default();
            if !column.contains(&default) {
                problems.push(format!("{shown}: the default column says {column:?}, the code's default is {default}"));
            }
        }
    }
    for (alias, ours) in lmcache_aliases() {
        match doc_line(alias) {
            Some(line) if line.contains(&format!("`{ours}`")) => {}
            _ => {
                problems.push(format!("LMCache's {alias}: no row `| `{alias}` | ... `{ours}` ...` in docs/lmcache.md"))
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/lmcache.md and the settings' table (settings/table.rs) differ:\n{}",
        problems.join("\n")
    );
}

/// The reverse: no row of "Every setting" names a setting the table lacks.
#[test]
fn docs_lmcache_md_lists_no_setting_that_does_not_exist() {
    let section = DOCS.split("\n## Every setting\n").nth(1).expect("docs/lmcache.md has \"## Every setting\"");
    let section = section.split("\n## ").next().unwrap_or_default();
    let known: BTreeSet<String> = SETTINGS
        .iter()
        .map(|row| row.name.to_owned())
        .chain(EVICTION_SETTINGS.iter().map(|row| format!("eviction.{}", row.name)))
        .collect();
    for line in section.lines().filter(|line| line.starts_with("| `")) {
        let name = cells(line)[0].trim_matches('`');
        assert!(
            known.contains(name),
            "docs/lmcache.md, \"Every setting\", lists {name}, which settings/table.rs lacks"
        );
    }
}
