//! The layering, held: no module of the rules (`core/`) or of the shells (`shared/`) imports a
//! module that imports it back, directly or through others. Cargo already keeps `charge-core`
//! from importing `shared` (`infra/supply-chain/core-is-pure.sh` keeps it free of I/O crates);
//! this keeps each crate's own modules in layers, so a rule never reaches into an edge (the events
//! function's parser, an adapter) that reaches back into the rules.
//!
//! A module is a file (`shared/src/webhook/event.rs` is `webhook::event`); it imports another when
//! a line of its code (not a comment) names `crate::<path>`, or `super::<name>` from a child. A
//! module and the modules inside it may use each other (a parent's types, a child's functions):
//! only edges between modules where neither contains the other count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn no_module_of_core_or_shared_imports_one_that_imports_it_back() {
    for krate in ["core", "shared"] {
        let src = workspace().join(krate).join("src");
        let graph = import_graph(&src);
        assert!(
            graph.len() > 10,
            "{krate}: only {} modules found under {}",
            graph.len(),
            src.display()
        );
        let cycles = cycles(&graph);
        assert!(
            cycles.is_empty(),
            "{krate}: modules that import each other (each line a cycle): {cycles:#?}"
        );
    }
}

/// The twin: the check sees a cycle through a third module, and none between a parent and its
/// child.
#[test]
fn a_cycle_through_another_module_is_found_and_a_parent_child_pair_is_not_one() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (from, to) in edges {
            g.entry(from.to_string())
                .or_default()
                .insert(to.to_string());
            g.entry(to.to_string()).or_default();
        }
        g
    };
    let found = cycles(&graph(&[
        ("executor", "webhook"),
        ("webhook", "telemetry"),
        ("telemetry", "executor"),
    ]));
    assert_eq!(found, vec![vec!["executor", "telemetry", "webhook"]]);
    // And the reader of the source: a `crate::` path in code is an edge, one in a comment is not.
    let dir = std::env::temp_dir().join(format!("module-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(
        dir.join("a.rs"),
        "use crate::b::c::Thing;\n/// [`crate::b`]\n",
    )
    .unwrap();
    let b = "pub mod c;\n// crate::a::X\npub fn h() { crate::b::c::f() }\n";
    std::fs::write(dir.join("b.rs"), b).unwrap();
    let c = "use super::h;\npub fn f() { crate::a::g() }\n";
    std::fs::write(dir.join("b/c.rs"), c).unwrap();
    let read = import_graph(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(read["a"], BTreeSet::from(["b::c".to_string()]));
    assert!(
        read["b"].is_empty(),
        "a comment, or a child, is not an import: {read:?}"
    );
    assert_eq!(
        read["b::c"],
        BTreeSet::from(["a".to_string()]),
        "nor a parent"
    );
    assert_eq!(cycles(&read), vec![vec!["a", "b::c"]]);
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every module under `src` (by file) and the modules it names.
fn import_graph(src: &Path) -> Graph {
    let files = rust_files(src);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let module = module_of(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        let code = text
            .lines()
            .take_while(|l| !l.starts_with("#[cfg(test)]"))
            .filter(|l| !l.trim_start().starts_with("//"));
        let mut edges = BTreeSet::new();
        for line in code {
            for path in named_paths(line, &module) {
                if let Some(target) = longest_module(&modules, &path) {
                    if !nested(&module, &target) {
                        edges.insert(target);
                    }
                }
            }
        }
        graph.entry(module).or_default().extend(edges);
    }
    graph
}

/// `crate::a::b::C` and `super::x` paths on one line, as module paths from the crate's root.
fn named_paths(line: &str, module: &str) -> Vec<String> {
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let mut out = Vec::new();
    for (prefix, base) in [("crate::", ""), ("super::", parent)] {
        for (at, _) in line.match_indices(prefix) {
            let before = line[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let rest: String = line[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':' || *c == '{')
                .collect();
            let path = rest.split('{').next().unwrap().trim_end_matches(':');
            let full = if base.is_empty() {
                path.to_string()
            } else {
                format!("{base}::{path}")
            };
            out.push(full);
        }
    }
    out
}

/// The longest module path that `path` starts with (`webhook::event::decide` → `webhook::event`).
fn longest_module(modules: &BTreeSet<String>, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
}

/// True when one module contains the other (or they are the same).
fn nested(a: &str, b: &str) -> bool {
    let inside = |x: &str, y: &str| x == y || x.starts_with(&format!("{y}::"));
    inside(a, b) || inside(b, a)
}

fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] {
        return "lib".into();
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
            for w in self.graph.get(v).into_iter().flatten() {
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
