//! The layering, held: in no crate of the workspace (the rules `core/`, the shells `shared/`, the
//! functions `functions/*` and the tools `infra/*`) does a module import a module that imports it
//! back, directly or through others. Cargo already keeps one crate from importing another that
//! imports it back (and `infra/supply-chain/core-is-pure.sh` keeps `charge-core` free of I/O
//! crates); this keeps each crate's own modules in layers, so a rule never reaches into an edge
//! (the events function's parser, an adapter) that reaches back into the rules, and a door of the
//! checkout function never reaches back into the handler that routes to it.
//!
//! A module is a file (`shared/src/events/event.rs` is `events::event`; `lib.rs` and `main.rs`
//! are the crate's root). It imports another when its code (not a comment, a string, nor a
//! `#[cfg(test)]` item) names a path from `crate::`, `super::` or `self::`, alone
//! (`crate::a::f()`), or grouped and nested as `use` allows (`use crate::{a, b::{c, d}}`,
//! `use super::{self, x}`), over as many lines as it takes. A module and the modules inside it
//! may use each other (a parent's types, a child's functions; the root contains every module):
//! only edges between modules where neither contains the other count.
//!
//! Not covered: `infra/release-fixtures/writers`, which is no crate of this workspace (it is
//! built inside an earlier release's checkout, its modules placed by `#[path]`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each module, the modules it imports, and for each the first path that named it.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

#[test]
fn no_module_of_any_crate_imports_one_that_imports_it_back() {
    let root = workspace();
    let crates = crates(&root);
    for expected in [
        "core",
        "shared",
        "functions/checkout",
        "infra/simulate",
        "infra/bench",
    ] {
        assert!(
            crates.iter().any(|c| c == Path::new(expected)),
            "{expected} not found among the crates: {crates:?}"
        );
    }
    let mut loops = Vec::new();
    let mut modules = 0;
    for krate in &crates {
        let src = root.join(krate).join("src");
        let sources: Vec<(PathBuf, String)> = rust_files(&src)
            .into_iter()
            .map(|file| {
                let text = std::fs::read_to_string(&file).unwrap();
                (file.strip_prefix(&src).unwrap().to_path_buf(), text)
            })
            .collect();
        let graph = import_graph(&sources);
        modules += graph.len();
        for group in cycles(&graph) {
            loops.push(describe(&krate.join("src"), &sources, &graph, &group));
        }
    }
    assert!(modules > 100, "only {modules} modules found in {crates:?}");
    assert!(
        loops.is_empty(),
        "modules that import each other, directly or through others (each a loop: its files, \
         then each import inside it):\n\n{}",
        loops.join("\n\n")
    );
}

/// The twin: a loop closed only by grouped and nested imports (and by `super::` from a child) is
/// found and named by its files; the same crate with the loop's one backward import taken out has
/// none; and what is not code (a comment, a string, a test module) is not an import.
#[test]
fn a_loop_through_grouped_imports_is_found_and_a_loop_free_crate_passes() {
    let crate_with = |door_imports: &str| {
        vec![
            (
                PathBuf::from("lib.rs"),
                "pub mod door;\npub mod handler;\npub mod refunds;\n".to_owned(),
            ),
            (
                PathBuf::from("handler.rs"),
                "use crate::{\n    door::{self, Reply},\n    refunds,\n};\n".to_owned(),
            ),
            (
                PathBuf::from("refunds.rs"),
                "use crate::door::{Answer, Checkout};\npub mod spec;\n".to_owned(),
            ),
            (
                PathBuf::from("refunds/spec.rs"),
                "use super::{super::door, Refund};\n".to_owned(),
            ),
            (PathBuf::from("door.rs"), door_imports.to_owned()),
        ]
    };
    // door → handler closes handler → door and handler → refunds → door; refunds::spec → door
    // (`super::super::door`) counts too, door not being inside refunds, but nothing comes back to
    // refunds::spec.
    let looped_crate = crate_with(
        "use std::fmt::{self, Display};\nuse crate::{handler::{Checkout, created_by}, x};\n",
    );
    let looped = import_graph(&looped_crate);
    assert_eq!(
        looped["handler"].keys().collect::<Vec<_>>(),
        ["door", "refunds"]
    );
    assert_eq!(looped["refunds::spec"].keys().collect::<Vec<_>>(), ["door"]);
    assert_eq!(looped["door"].keys().collect::<Vec<_>>(), ["handler"]);
    let found = cycles(&looped);
    assert_eq!(found, vec![vec!["door", "handler", "refunds"]]);
    let said = describe(
        Path::new("functions/checkout/src"),
        &looped_crate,
        &looped,
        &found[0],
    );
    assert!(
        said.contains("functions/checkout/src/door.rs")
            && said.contains("functions/checkout/src/handler.rs")
            && said.contains("crate::handler::Checkout"),
        "{said}"
    );
    // The same crate, door importing nothing of the crate back: no loop.
    let free = import_graph(&crate_with(
        "// use crate::handler::Checkout;\n/* crate::{handler} */\n\
         const A: &str = \"crate::handler\";\n\
         #[cfg(test)]\nmod tests {\n    use crate::handler::handle;\n}\n\
         pub fn f<'a>(x: &'a str) -> char { let _ = x; '{' }\n",
    ));
    assert!(free["door"].is_empty(), "not code, so no import: {free:?}");
    assert!(cycles(&free).is_empty(), "{free:?}");
    // And a loop through a third module is one group of three.
    let mut three = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a")] {
        three
            .entry(from.into())
            .or_default()
            .insert(to.into(), String::new());
    }
    assert_eq!(cycles(&three), vec![vec!["a", "b", "c"]]);
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every crate with its modules under `src`: the rules, the shells, each function and each tool.
fn crates(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("core"), PathBuf::from("shared")];
    for family in ["functions", "infra"] {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(family))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|dir| dir.join("Cargo.toml").is_file() && dir.join("src").is_dir())
            .map(|dir| dir.strip_prefix(root).unwrap().to_path_buf())
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// A loop's files (of `sources`, under `src`), then each import between them with the path that
/// made it.
fn describe(src: &Path, sources: &[(PathBuf, String)], graph: &Graph, group: &[String]) -> String {
    let file = |module: &str| {
        let (file, _) = sources
            .iter()
            .find(|(f, _)| module_of(f) == module)
            .unwrap();
        src.join(file).display().to_string()
    };
    let mut out = vec![format!(
        "loop: {}",
        group.iter().map(|m| file(m)).collect::<Vec<_>>().join(", ")
    )];
    for from in group {
        for (to, named) in &graph[from] {
            if group.contains(to) {
                out.push(format!("  {from} → {to} (names {named})"));
            }
        }
    }
    out.join("\n")
}

/// Every module of one crate's sources (each a path under `src` and its text), and the modules
/// it imports.
fn import_graph(sources: &[(PathBuf, String)]) -> Graph {
    let modules: BTreeSet<String> = sources.iter().map(|(f, _)| module_of(f)).collect();
    let mut graph = Graph::new();
    for (file, text) in sources {
        let module = module_of(file);
        let edges = graph.entry(module.clone()).or_default();
        for path in named_paths(&without_tests(&code_of(text)), &module) {
            let Some(target) = longest_module(&modules, &path) else {
                continue;
            };
            if !nested(&module, &target) {
                edges
                    .entry(target)
                    .or_insert_with(|| format!("crate::{}", path.join("::")));
            }
        }
    }
    graph
}

/// `text` with its comments, strings and character literals blanked out (a lifetime stays).
fn code_of(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let at = |i: usize| s.get(i).copied().unwrap_or('\0');
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else if i >= s.len() {
                    break;
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && !ident(at(i.wrapping_sub(1))) && matches!(at(i + 1), '"' | '#') {
            // A raw string: r"…", r#"…"#.
            let hashes = s[i + 1..].iter().take_while(|&&c| c == '#').count();
            if at(i + 1 + hashes) != '"' {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_from = i + 2 + hashes;
            let rest: String = s[body_from..].iter().collect();
            let len = rest.find(&close).map_or(rest.len(), |n| {
                rest[..n].chars().count() + close.chars().count()
            });
            i = body_from + len;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A character literal ('x', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            i += 2;
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items (a test module, a test-only function): what they
/// import is the tests', not the module's.
fn without_tests(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        // The item ends at its first `;` outside brackets, or at the `}` closing its first `{`.
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth = depth.saturating_sub(1),
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Every path `code` names from `crate::`, `super::` or `self::` (each expanded from its group:
/// `use crate::{a, b::{c, d}}` is `a`, `b::c` and `b::d`), as segments from the crate's root.
fn named_paths(code: &str, module: &str) -> Vec<Vec<String>> {
    let s: Vec<char> = code.chars().collect();
    let here: Vec<String> = segments(module);
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if !ident(s[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < s.len() && ident(s[i]) {
            i += 1;
        }
        let word: String = s[start..i].iter().collect();
        let before = start.checked_sub(1).map(|b| s[b]);
        // `$crate::` is a macro's, `a::crate` no start, `r#crate` no keyword.
        if before.is_some_and(|c| c == '$' || c == ':' || c == '#') {
            continue;
        }
        let mut cursor = Cursor { s: &s, i };
        if !cursor.eat("::") {
            continue;
        }
        match word.as_str() {
            "crate" => tree(&mut cursor, Vec::new(), &mut out),
            "self" => tree(&mut cursor, here.clone(), &mut out),
            "super" => {
                let mut parent = here.clone();
                parent.pop();
                tree(&mut cursor, parent, &mut out);
            }
            _ => continue,
        }
        i = cursor.i;
    }
    out
}

/// One use-tree after `prefix::`: `a::b`, `a::{b, c::{d}}`, `self`, `super::x`, `*`.
fn tree(c: &mut Cursor, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    loop {
        if c.eat("{") {
            while !c.eat("}") {
                let before = c.i;
                tree(c, prefix.clone(), out);
                c.eat(",");
                if c.i == before {
                    // Not a use-tree after all: stop at what it is.
                    return;
                }
            }
            return;
        }
        match c.ident().as_deref() {
            Some("self") => {}
            Some("super") => {
                prefix.pop();
            }
            Some(name) => prefix.push(name.to_owned()),
            None => {
                c.eat("*");
                out.push(prefix);
                return;
            }
        }
        if !c.eat("::") {
            out.push(prefix);
            return;
        }
    }
}

/// A position in code, skipping whitespace before each token.
struct Cursor<'a> {
    s: &'a [char],
    i: usize,
}

impl Cursor<'_> {
    fn skip_space(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let n = token.chars().count();
        let ahead: String = self.s[self.i..].iter().take(n).collect();
        if ahead == token {
            self.i += n;
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_space();
        let name: String = self.s[self.i..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.i += name.chars().count();
        Some(name)
    }
}

fn segments(module: &str) -> Vec<String> {
    module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The longest module `path` starts with (`events::event::decide` → `events::event`); the root
/// (`""`) when it names an item of the root.
fn longest_module(modules: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
}

/// True when one module contains the other (or they are the same); the root contains every one.
fn nested(a: &str, b: &str) -> bool {
    let inside = |x: &str, y: &str| y.is_empty() || x == y || x.starts_with(&format!("{y}::"));
    inside(a, b) || inside(b, a)
}

/// The module a file under `src` is: `webhook/event.rs` and `webhook/event/mod.rs` are
/// `events::event`; `lib.rs` and `main.rs` are the root, `""`.
fn module_of(file: &Path) -> String {
    let rel = file.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        return String::new();
    }
    parts.join("::")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The strongly connected groups of more than one module (each sorted), by Tarjan's algorithm.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flat_map(|e| e.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    self.low.insert(v, self.low[v].min(self.low[w]));
                } else if self.stack.contains(&w) {
                    self.low.insert(v, self.low[v].min(self.index[w]));
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    group.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}
