//! The walls of the building hold: the layer table in lib.rs's docs is read as data, every
//! `use` and every path in the code of rust/src is resolved to the module it names, and
//!
//! - no module uses a module of a layer above its own;
//! - no modules import one another in a circle: neither the rooms (the crate's top-level
//!   modules), nor the children of any module, nor a module and its own children (a parent
//!   that only declares and re-exports its children does not use them). The same holds for
//!   the numa crate.
//!
//! The code is parsed (syn), so comments and doc links are not imports, and test code counts
//! like any other: a test that needs an upper layer lives in that layer. Paths inside macro
//! calls are read from their tokens.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// A module path from the crate's root (`["net", "tls", "session"]`; the root is empty).
type ModPath = Vec<String>;

fn show(path: &[String]) -> String {
    if path.is_empty() { "crate".to_owned() } else { path.join("::") }
}

/// A path written in a module, as written, and where.
#[derive(Clone, Debug)]
struct Written {
    segments: Vec<String>,
    line: usize,
}

/// One module: its file, its children, the names its `use` items bring in, and what it
/// refers to.
#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// Name -> the path it stands for, as written in the `use` (re-exports included: a path
    /// through this module follows them).
    aliases: BTreeMap<String, Vec<String>>,
    /// Modules whose names a glob `use` brings in.
    globs: Vec<Vec<String>>,
    /// What this module's own code uses: every `use` that is not a re-export, every path in
    /// its code (types, expressions, patterns, macro calls).
    uses: Vec<Written>,
}

#[derive(Debug, Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// Parses the crate whose root file is `root` (lib.rs), following `mod` items to files.
    fn load(root: &Path) -> Crate {
        let mut krate = Crate::default();
        krate.load_file(Vec::new(), root, true);
        krate
    }

    fn load_file(&mut self, path: ModPath, file: &Path, owns_dir: bool) {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // Children of lib.rs or a mod.rs live beside it; those of `name.rs` in `name/`.
        let dir = match owns_dir {
            true => file.parent().expect("a directory").to_owned(),
            false => file.with_extension(""),
        };
        self.load_items(path, file, &dir, &parsed.items);
    }

    fn load_items(&mut self, path: ModPath, file: &Path, dir: &Path, items: &[syn::Item]) {
        self.modules.entry(path.clone()).or_default().file = file.to_owned();
        let mut reader = Reader { path: path.clone(), module: Module::default(), inline: Vec::new() };
        for item in items {
            reader.visit_item(item);
        }
        let Reader { module, inline, .. } = reader;
        let entry = self.modules.get_mut(&path).expect("just made");
        entry.children.extend(module.children);
        entry.aliases.extend(module.aliases);
        entry.globs.extend(module.globs);
        entry.uses.extend(module.uses);
        for (name, found) in inline {
            let mut child = path.clone();
            child.push(name.clone());
            match found {
                Found::Inline(items) => self.load_items(child, file, &dir.join(&name), &items),
                Found::File(Some(explicit)) => {
                    let target = file.parent().expect("a directory").join(explicit);
                    self.load_file(child, &target, true);
                }
                Found::File(None) => {
                    let flat = dir.join(format!("{name}.rs"));
                    match flat.exists() {
                        true => self.load_file(child, &flat, false),
                        false => self.load_file(child, &dir.join(&name).join("mod.rs"), true),
                    }
                }
            }
        }
    }

    fn module(&self, path: &[String]) -> Option<&Module> {
        self.modules.get(path)
    }

    /// The module `written` (as written in `from`) names: the deepest module it walks
    /// through, following `use` aliases and re-exports; `None` for what lies outside the
    /// crate (std, other crates) and for `from`'s own items.
    fn resolve(&self, from: &[String], written: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 || written.is_empty() {
            return None;
        }
        let here = self.module(from)?;
        let (mut at, mut rest): (ModPath, &[String]) = match written[0].as_str() {
            "crate" => (Vec::new(), &written[1..]),
            "self" => (from.to_vec(), &written[1..]),
            "super" => {
                let mut at = from.to_vec();
                let mut rest = written;
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
                (at, rest)
            }
            // A lone name is a module only through a `use` (a variable may share a child's name).
            first if here.children.contains(first) && written.len() > 1 => {
                let mut at = from.to_vec();
                at.push(first.to_owned());
                (at, &written[1..])
            }
            first => {
                let (home, mut whole) = self.alias(from, first, depth)?;
                whole.extend_from_slice(&written[1..]);
                return self.resolve(&home, &whole, depth + 1);
            }
        };
        while let Some(next) = rest.first() {
            let module = self.module(&at)?;
            if module.children.contains(next) {
                at.push(next.clone());
                rest = &rest[1..];
            } else if let Some(target) = module.aliases.get(next) {
                let mut whole = target.clone();
                whole.extend_from_slice(&rest[1..]);
                return self.resolve(&at, &whole, depth + 1).or(Some(at));
            } else {
                break;
            }
        }
        Some(at)
    }

    /// What `name` stands for in `from`, and the module whose `use` says so (the path is
    /// relative to it): `from`'s own `use`, or one a glob `use` brings in.
    fn alias(&self, from: &[String], name: &str, depth: usize) -> Option<(ModPath, Vec<String>)> {
        let here = self.module(from)?;
        if let Some(target) = here.aliases.get(name) {
            return Some((from.to_vec(), target.clone()));
        }
        here.globs.iter().find_map(|glob| {
            let source = self.resolve(from, glob, depth + 1)?;
            let target = self.module(&source)?.aliases.get(name)?.clone();
            Some((source, target))
        })
    }

    /// Every use of one module by another: (from, to, the path as written, file:line).
    fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (from, module) in &self.modules {
            for written in &module.uses {
                let Some(to) = self.resolve(from, &written.segments, 0) else { continue };
                if &to != from {
                    let file = module.file.strip_prefix(workspace()).unwrap_or(&module.file);
                    let at = format!("{}:{}", file.display(), written.line);
                    edges.push(Edge { from: from.clone(), to, written: written.segments.join("::"), at });
                }
            }
        }
        edges
    }
}

#[derive(Clone, Debug)]
struct Edge {
    from: ModPath,
    to: ModPath,
    written: String,
    at: String,
}

enum Found {
    Inline(Vec<syn::Item>),
    /// A `mod name;`, with its `#[path]` when it has one.
    File(Option<String>),
}

/// Reads one module's items (not those of its inline children, which it hands back).
struct Reader {
    path: ModPath,
    module: Module,
    inline: Vec<(String, Found)>,
}

impl Reader {
    fn add_use(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>, reexport: bool, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.add_use(&p.tree, prefix, reexport, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.name(prefix, n.ident.to_string(), n.ident.to_string(), reexport, line),
            syn::UseTree::Rename(r) => self.name(prefix, r.ident.to_string(), r.rename.to_string(), reexport, line),
            syn::UseTree::Glob(_) => {
                self.module.globs.push(prefix.clone());
                if !reexport {
                    self.module.uses.push(Written { segments: prefix.clone(), line });
                }
            }
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.add_use(t, prefix, reexport, line)),
        }
    }

    fn name(&mut self, prefix: &[String], ident: String, alias: String, reexport: bool, line: usize) {
        let mut target = prefix.to_vec();
        if ident != "self" {
            target.push(ident);
        }
        let alias = if alias == "self" { prefix.last().cloned().unwrap_or_default() } else { alias };
        if !reexport {
            self.module.uses.push(Written { segments: target.clone(), line });
        }
        if alias != "_" {
            self.module.aliases.insert(alias, target);
        }
    }

    fn written(&mut self, segments: Vec<String>, line: usize) {
        if !segments.is_empty() {
            self.module.uses.push(Written { segments, line });
        }
    }

    /// Paths in a macro call's tokens: every `a::b::c` run, and every lone name (it may be a
    /// name a re-export brought in).
    fn tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => self.tokens(group.stream()),
                TokenTree::Ident(ident) => {
                    let line = ident.span().start().line;
                    let mut segments = vec![ident.to_string()];
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        i += 3;
                    }
                    self.written(segments, line);
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Reader {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let name = item.ident.to_string();
        self.module.children.insert(name.clone());
        let explicit = item.attrs.iter().find(|a| a.path().is_ident("path")).map(|a| match &a.meta {
            syn::Meta::NameValue(syn::MetaNameValue {
                value: syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }),
                ..
            }) => s.value(),
            _ => panic!("{}: an unreadable #[path]", show(&self.path)),
        });
        let found = match &item.content {
            Some((_, items)) => Found::Inline(items.clone()),
            None => Found::File(explicit),
        };
        // A module declared twice under opposite cfgs is one module.
        if !self.inline.iter().any(|(n, _)| *n == name) {
            self.inline.push((name, found));
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let reexport = !matches!(item.vis, syn::Visibility::Inherited);
        let line = item.use_token.span.start().line;
        let mut prefix = Vec::new();
        if item.leading_colon.is_some() {
            return; // ::extern_crate
        }
        self.add_use(&item.tree, &mut prefix, reexport, line);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let line = path.segments.first().map_or(0, |s| s.ident.span().start().line);
            self.written(path.segments.iter().map(|s| s.ident.to_string()).collect(), line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.tokens(mac.tokens.clone());
    }

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {
        // `pub(super)`, `pub(in crate::ring)`: who may see an item, not what it uses.
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {
        // Attributes (cfg, derive, doc) name no module of the crate.
    }
}

/// The layers of lib.rs's docs: the bullets under "Layers", each `- Name: ...` with the
/// modules it names in backticks, from the ground up.
fn layers(lib_rs: &str, modules: &BTreeSet<String>) -> Vec<(String, Vec<String>)> {
    let docs: Vec<&str> = lib_rs.lines().filter_map(|l| l.strip_prefix("//!")).map(str::trim_end).collect();
    let start =
        docs.iter().position(|l| l.trim_start().starts_with("Layers")).expect("lib.rs's docs have a Layers list");
    let mut layers: Vec<(String, Vec<String>)> = Vec::new();
    for line in &docs[start + 1..] {
        let text = line.trim();
        if text.is_empty() && !layers.is_empty() {
            break;
        }
        if let Some(bullet) = text.strip_prefix("- ") {
            // `- Ground (what it holds): ...`: the name is the first word.
            let name = bullet.split([':', '(']).next().expect("a name").trim().trim_matches('*').to_owned();
            layers.push((name, Vec::new()));
        }
        let Some((_, named)) = layers.last_mut() else { continue };
        for (i, quoted) in text.split('`').enumerate() {
            if i % 2 == 1 && modules.contains(quoted) && !named.iter().any(|n| n == quoted) {
                named.push(quoted.to_owned());
            }
        }
    }
    layers
}

/// Every circle among `nodes` under `edges`: each strongly connected component of more than
/// one node, with one cycle through it to show.
fn circles(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<(BTreeSet<String>, Vec<String>)> {
    // Tarjan's algorithm; the graphs are small, recursion is fine.
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on_stack: BTreeSet<String>,
        found: Vec<BTreeSet<String>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &str) {
            let i = self.index.len();
            self.index.insert(v.to_owned(), i);
            self.low.insert(v.to_owned(), i);
            self.stack.push(v.to_owned());
            self.on_stack.insert(v.to_owned());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v.to_owned(), low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v.to_owned(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = w == v;
                    component.insert(w);
                    if done {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut tarjan = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in nodes {
        if !tarjan.index.contains_key(v) {
            tarjan.visit(v);
        }
    }
    // One cycle per component: a shortest way back to its first node.
    tarjan
        .found
        .into_iter()
        .map(|component| {
            let start = component.iter().next().expect("not empty").clone();
            let mut came_from: BTreeMap<String, String> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start.clone()]);
            while let Some(v) = queue.pop_front() {
                for w in edges.get(&v).into_iter().flatten().filter(|w| component.contains(*w)) {
                    if *w == start {
                        let mut cycle = vec![start.clone(), v.clone()];
                        let mut at = v.clone();
                        while let Some(prev) = came_from.get(&at) {
                            cycle.push(prev.clone());
                            at = prev.clone();
                        }
                        cycle[1..].reverse();
                        cycle.push(start.clone());
                        cycle.dedup();
                        return (component, cycle);
                    }
                    if !came_from.contains_key(w) && *w != start {
                        came_from.insert(w.clone(), v.clone());
                        queue.push_back(w.clone());
                    }
                }
            }
            let all = component.iter().cloned().collect();
            (component, all)
        })
        .collect()
}

/// For every module with children: the circles among it and its children, each child
/// standing for everything under it. The parent stands for its own code only. Each circle is
/// reported with the uses that close it.
fn circles_in(krate: &Crate, edges: &[Edge]) -> Vec<String> {
    let mut report = Vec::new();
    for (parent, module) in &krate.modules {
        if module.children.is_empty() {
            continue;
        }
        const ITSELF: &str = "(itself)";
        let node_of = |path: &ModPath| -> Option<String> {
            if path == parent {
                return Some(ITSELF.to_owned());
            }
            (path.len() > parent.len() && path.starts_with(parent)).then(|| path[parent.len()].clone())
        };
        let mut nodes: BTreeSet<String> = module.children.iter().cloned().collect();
        nodes.insert(ITSELF.to_owned());
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut why: BTreeMap<(String, String), &Edge> = BTreeMap::new();
        for edge in edges {
            let (Some(a), Some(b)) = (node_of(&edge.from), node_of(&edge.to)) else { continue };
            if a != b {
                graph.entry(a.clone()).or_default().insert(b.clone());
                why.entry((a, b)).or_insert(edge);
            }
        }
        for (members, cycle) in circles(&nodes, &graph) {
            let members: Vec<&str> = members.iter().map(String::as_str).collect();
            let mut line = format!("in {}, among {}: {}", show(parent), members.join(", "), cycle.join(" -> "));
            for pair in cycle.windows(2) {
                if let Some(edge) = why.get(&(pair[0].clone(), pair[1].clone())) {
                    let _ = write!(line, "\n    {} uses {} ({})", show(&edge.from), edge.written, edge.at);
                }
            }
            report.push(line);
        }
    }
    report
}

/// The repository: the core is its rust/, numa its numa/.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("rust/ is in the repository")
}

fn core() -> (Crate, String) {
    let lib_rs = workspace().join("rust/src/lib.rs");
    (Crate::load(&lib_rs), std::fs::read_to_string(&lib_rs).expect("lib.rs"))
}

#[test]
fn every_room_sits_in_one_layer_of_lib_rs() {
    let (krate, lib_rs) = core();
    let rooms = &krate.modules[&Vec::new()].children;
    let layers = layers(&lib_rs, rooms);
    assert!(layers.len() >= 5, "lib.rs's Layers list reads as {layers:?}");
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (layer, named) in &layers {
        for module in named {
            if let Some(other) = seen.insert(module, layer) {
                panic!("`{module}` is named in two layers of lib.rs's table: {other} and {layer}");
            }
        }
    }
    let unplaced: Vec<&String> = rooms.iter().filter(|m| !seen.contains_key(m.as_str())).collect();
    assert!(unplaced.is_empty(), "modules in no layer of lib.rs's table: {unplaced:?}");
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let (krate, lib_rs) = core();
    let layers = layers(&lib_rs, &krate.modules[&Vec::new()].children);
    let layer_of = |path: &ModPath| {
        let room = path.first()?;
        layers.iter().position(|(_, named)| named.contains(room))
    };
    let edges = krate.edges();
    assert!(edges.len() > 1000, "the reader found only {} uses: is it still reading the code?", edges.len());
    let upward: Vec<String> = edges
        .iter()
        .filter_map(|edge| {
            let (from, to) = (layer_of(&edge.from)?, layer_of(&edge.to)?);
            (to > from).then(|| {
                format!(
                    "{}: {} ({}) uses {} ({}): {}",
                    edge.at,
                    show(&edge.from),
                    layers[from].0,
                    show(&edge.to),
                    layers[to].0,
                    edge.written
                )
            })
        })
        .collect();
    assert!(upward.is_empty(), "uses of a layer above (lib.rs's Layers list):\n{}", upward.join("\n"));
}

#[test]
fn no_import_circles_in_the_core() {
    let (krate, _) = core();
    let report = circles_in(&krate, &krate.edges());
    assert!(report.is_empty(), "import circles in rust/src:\n{}", report.join("\n"));
}

#[test]
fn no_import_circles_in_numa() {
    let krate = Crate::load(&workspace().join("numa/src/lib.rs"));
    assert!(krate.modules.len() > 5, "numa's modules: {:?}", krate.modules.keys());
    let report = circles_in(&krate, &krate.edges());
    assert!(report.is_empty(), "import circles in numa/src:\n{}", report.join("\n"));
}

/// The checks see what they are for, on small crates written here.
mod the_reader {
    use super::*;

    fn tiny(files: &[(&str, &str)]) -> Crate {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Crate::load(&dir.path().join("lib.rs"))
    }

    #[test]
    fn sees_a_sibling_circle_through_a_re_export_and_not_a_parent_that_re_exports() {
        let krate = tiny(&[
            ("lib.rs", "mod room;\n"),
            ("room/mod.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\npub use b::B;\npub use c::C;\n"),
            ("room/a.rs", "pub struct A(super::B);\n"),
            ("room/b.rs", "pub struct B;\nfn f() { let _ = crate::room::A; }\n"),
            ("room/c.rs", "pub struct C(super::A);\n"),
        ]);
        let report = circles_in(&krate, &krate.edges());
        assert_eq!(report.len(), 1, "{report:?}");
        assert!(report[0].starts_with("in room, among a, b: a -> b -> a"), "{}", report[0]);
        assert!(report[0].contains("room::b uses crate::room::A"), "{}", report[0]);
    }

    #[test]
    fn sees_a_parent_and_child_using_each_other() {
        let krate = tiny(&[
            ("lib.rs", "mod room;\n"),
            ("room/mod.rs", "mod a;\npub struct P;\nfn f() { a::g(); }\n"),
            ("room/a.rs", "pub fn g() -> super::P { super::P }\n"),
        ]);
        let report = circles_in(&krate, &krate.edges());
        assert_eq!(report.len(), 1, "{report:?}");
        assert!(report[0].contains("(itself)") && report[0].contains("-> a"), "{}", report[0]);
    }

    #[test]
    fn reads_paths_in_macros_and_not_in_comments() {
        let krate = tiny(&[
            ("lib.rs", "//! [`low::X`] in a doc link\nmod low;\nmod high;\n"),
            ("low.rs", "// crate::high::Y in a comment\npub struct X;\nfn f() { assert!(crate::high::Y == 1); }\n"),
            ("high.rs", "pub const Y: u8 = 1;\n"),
        ]);
        let edges = krate.edges();
        let seen: Vec<(String, String)> = edges.iter().map(|e| (show(&e.from), show(&e.to))).collect();
        assert_eq!(seen, [("low".to_owned(), "high".to_owned())]);
        assert!(edges[0].at.ends_with("low.rs:3"), "{}", edges[0].at);
    }

    #[test]
    fn reads_the_layer_list() {
        let modules: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let lib = "//! Intro `c`.\n//!\n//! Layers, from the ground up:\n//!\n//! - Ground (pure): `a` (not `x`), [`b`]\n\
                   //! - Top: `c`,\n//!   more words about `a::b`\n//!\n//! After: `a`.\n";
        assert_eq!(
            layers(lib, &modules),
            [("Ground".to_owned(), vec!["a".to_owned(), "b".to_owned()]), ("Top".to_owned(), vec!["c".to_owned()])]
        );
    }
}
