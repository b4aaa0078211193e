//! The file-level import graph of one crate, and its cycles.
//!
//! A file depends on another when its code names a path into it:
//! `crate::a::b::Item` or `super::Item`, in a `use` or inline. A path maps
//! to the file of the longest module prefix that has one (`a/b.rs` or
//! `a/b/mod.rs`; the crate root is `lib.rs`, or `main.rs` without one), so
//! `super::Item` in `a/b.rs` is an edge to `a.rs` or `a/mod.rs`. A parent
//! declaring its children (`mod b;`) and naming them by relative paths
//! (`b::Item`, `pub use b::Item`) is not an edge: a module's facade over its
//! own parts is how the parts are meant to be reached. Comments, literals and
//! `#[cfg(test)]` items are left out. A cycle is a strongly connected set of
//! more than one file.

mod code;
mod paths;

use std::collections::{BTreeMap, BTreeSet};

/// A reference from one file to another: the line it is on and the path.
#[derive(Clone)]
pub struct Reference {
    pub line: usize,
    pub path: String,
    pub source_line: String,
}

/// Files that depend on each other in a circle, and the references between
/// them that make it.
pub struct Cycle {
    pub files: Vec<String>,
    pub edges: Vec<(String, String, Vec<Reference>)>,
}

/// The cycles among a crate's source files, given as paths relative to its
/// `src` and their text. Files under a `#[cfg(test)] mod NAME;` are left out.
pub fn cycles(files: &[(String, String)]) -> Vec<Cycle> {
    let graph = Graph::of(files);
    graph
        .strongly_connected()
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| graph.cycle(component))
        .collect()
}

/// A readable account of `cycles` in the crate at `crate_dir`.
pub fn describe(crate_dir: &str, cycles: &[Cycle]) -> String {
    let mut out = String::new();
    for cycle in cycles {
        out += &format!(
            "{crate_dir}: {} files import each other:\n",
            cycle.files.len()
        );
        for file in &cycle.files {
            out += &format!("    {file}\n");
        }
        for (from, to, references) in &cycle.edges {
            out += &format!("  {from} -> {to}:\n");
            // One entry per line, with the paths it names.
            let mut lines: BTreeMap<usize, (&str, Vec<&str>)> = BTreeMap::new();
            for r in references {
                let entry = lines.entry(r.line).or_insert((&r.source_line, Vec::new()));
                if !entry.1.contains(&r.path.as_str()) {
                    entry.1.push(&r.path);
                }
            }
            for (line, (text, paths)) in lines {
                out += &format!("    {from}:{line}: {text}    [{}]\n", paths.join(", "));
            }
        }
    }
    out
}

/// The module path of a file (`a/b.rs` and `a/b/mod.rs`: `["a", "b"]`).
fn module_of(file: &str) -> Vec<String> {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    if stem == "lib" || stem == "main" {
        return Vec::new();
    }
    stem.split('/').map(str::to_string).collect()
}

struct Graph {
    /// Files in order; edges refer to them by index.
    files: Vec<String>,
    /// For each file, the files it references and how.
    edges: Vec<BTreeMap<usize, Vec<Reference>>>,
}

impl Graph {
    fn of(sources: &[(String, String)]) -> Graph {
        let mut sources: Vec<&(String, String)> = sources.iter().collect();
        sources.sort_by(|a, b| a.0.cmp(&b.0));
        // With both a library and a binary root, the modules are the
        // library's and `main.rs` is a crate of its own.
        let has_lib = sources.iter().any(|(f, _)| f == "lib.rs");
        let codes: Vec<code::Code> = sources.iter().map(|(_, s)| code::code_of(s)).collect();
        let test_only = test_only_modules(&sources, &codes);
        let mut files = Vec::new();
        let mut by_module: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        let mut kept = Vec::new();
        for (i, (file, _)) in sources.iter().enumerate() {
            let module = module_of(file);
            if test_only.iter().any(|t| module.starts_with(t)) {
                continue;
            }
            if !(has_lib && file == "main.rs") {
                by_module.insert(module, files.len());
            }
            files.push(file.clone());
            kept.push(i);
        }
        let mut edges: Vec<BTreeMap<usize, Vec<Reference>>> = Vec::new();
        for (from, &i) in kept.iter().enumerate() {
            let (file, source) = sources[i];
            let lines: Vec<&str> = source.lines().collect();
            let mut out: BTreeMap<usize, Vec<Reference>> = BTreeMap::new();
            if has_lib && file == "main.rs" {
                edges.push(out);
                continue;
            }
            for written in paths::paths_in(&codes[i].text) {
                let mut here = module_of(file);
                here.extend(written.inline.iter().cloned());
                let Some(target) = resolve(&here, &written.segments)
                    .and_then(|module| longest_file_prefix(&by_module, &module))
                else {
                    continue;
                };
                if target == from {
                    continue;
                }
                out.entry(target).or_default().push(Reference {
                    line: written.line,
                    path: written.segments.join("::"),
                    source_line: lines
                        .get(written.line - 1)
                        .map_or("", |l| l.trim())
                        .to_string(),
                });
            }
            edges.push(out);
        }
        Graph { files, edges }
    }

    /// Tarjan's strongly connected components.
    fn strongly_connected(&self) -> Vec<Vec<usize>> {
        struct Walk<'g> {
            graph: &'g Graph,
            next_index: usize,
            index: Vec<Option<usize>>,
            low: Vec<usize>,
            stack: Vec<usize>,
            on_stack: Vec<bool>,
            components: Vec<Vec<usize>>,
        }
        impl Walk<'_> {
            fn visit(&mut self, v: usize) {
                self.index[v] = Some(self.next_index);
                self.low[v] = self.next_index;
                self.next_index += 1;
                self.stack.push(v);
                self.on_stack[v] = true;
                let targets: Vec<usize> = self.graph.edges[v].keys().copied().collect();
                for w in targets {
                    match self.index[w] {
                        None => {
                            self.visit(w);
                            self.low[v] = self.low[v].min(self.low[w]);
                        }
                        Some(wi) if self.on_stack[w] => self.low[v] = self.low[v].min(wi),
                        Some(_) => {}
                    }
                }
                if Some(self.low[v]) == self.index[v] {
                    let mut component = Vec::new();
                    loop {
                        let w = self.stack.pop().expect("v is on the stack");
                        self.on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    component.sort_unstable();
                    self.components.push(component);
                }
            }
        }
        let n = self.files.len();
        let mut walk = Walk {
            graph: self,
            next_index: 0,
            index: vec![None; n],
            low: vec![0; n],
            stack: Vec::new(),
            on_stack: vec![false; n],
            components: Vec::new(),
        };
        for v in 0..n {
            if walk.index[v].is_none() {
                walk.visit(v);
            }
        }
        walk.components.sort();
        walk.components
    }

    fn cycle(&self, component: Vec<usize>) -> Cycle {
        let members: BTreeSet<usize> = component.iter().copied().collect();
        let mut edges = Vec::new();
        for &from in &component {
            for (to, references) in &self.edges[from] {
                if !members.contains(to) {
                    continue;
                }
                edges.push((
                    self.files[from].clone(),
                    self.files[*to].clone(),
                    references.clone(),
                ));
            }
        }
        Cycle {
            files: component.iter().map(|&i| self.files[i].clone()).collect(),
            edges,
        }
    }
}

/// The module paths declared `#[cfg(test)] mod NAME;`: they and everything
/// under them are test code.
fn test_only_modules(sources: &[&(String, String)], codes: &[code::Code]) -> Vec<Vec<String>> {
    let mut test_only = Vec::new();
    for ((file, _), code) in sources.iter().zip(codes) {
        for name in &code.test_modules {
            let mut module = module_of(file);
            module.push(name.clone());
            test_only.push(module);
        }
    }
    test_only
}

/// The absolute module path that `segments` (starting with `crate` or
/// `super`) names from inside `here`; `None` for a `super` above the root.
fn resolve(here: &[String], segments: &[String]) -> Option<Vec<String>> {
    let (first, rest) = segments.split_first()?;
    if first == "crate" {
        return Some(rest.to_vec());
    }
    let mut module = here.to_vec();
    let mut rest = segments;
    while let Some(("super", tail)) = rest.split_first().map(|(s, t)| (s.as_str(), t)) {
        module.pop()?;
        rest = tail;
    }
    module.extend(rest.iter().cloned());
    Some(module)
}

/// The file of the longest prefix of `module` that has one.
fn longest_file_prefix(
    by_module: &BTreeMap<Vec<String>, usize>,
    module: &[String],
) -> Option<usize> {
    (0..=module.len())
        .rev()
        .find_map(|len| by_module.get(&module[..len]).copied())
}
