//! The house stays as drawn: every module of `src/` imports only from layers below its own (the
//! order is written once, in `docs/architecture.md`, in its ```layers block), and no two files
//! import each other, directly or around a circle.
//!
//! Read from the source text: `use` declarations and inline `crate::`/`super::` paths outside
//! `#[cfg(test)]` items (tests may reach anywhere). A module's front (`mod.rs`, `lib.rs`, or
//! `x.rs` beside a folder `x/`) re-exporting and using its own submodules is not a circle with
//! them: a folder's rooms may use what its front declares for them (its error type, say), and the
//! front may show what they define. Method calls on a type whose `impl` blocks span files are not
//! seen; keep such splits layered by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ARCHITECTURE: &str = "docs/architecture.md";

/// The layers from the top down, as `docs/architecture.md` lists them.
fn layers() -> Vec<Vec<String>> {
    let text = fs::read_to_string(ARCHITECTURE).expect("docs/architecture.md is readable");
    let start = text
        .find("```layers\n")
        .expect("docs/architecture.md has a ```layers block")
        + "```layers\n".len();
    let end = start
        + text[start..]
            .find("```")
            .expect("the ```layers block is closed");
    text[start..end]
        .lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .map(|line| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|names| !names.is_empty())
        .collect()
}

/// Source text with comments removed and the contents of string and char literals blanked, so
/// that braces and paths are only those of the code.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes + usize::from(rest.starts_with("br"));
            let len = rest[body..]
                .find(&close)
                .map_or(rest.len(), |k| body + k + close.len());
            out.push_str("\"\"");
            i += len;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the first is skipped.
            let literal = if rest[1..].starts_with('\\') {
                rest.get(3..).and_then(|r| r.find('\'')).map(|k| k + 4)
            } else {
                rest[1..]
                    .char_indices()
                    .nth(1)
                    .filter(|&(_, c)| c == '\'')
                    .map(|(k, _)| k + 2)
            };
            match literal {
                Some(len) => {
                    out.push_str("' '");
                    i += len;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `Some(number of #)` when `s` starts a raw string literal (`r"`, `r#"`, `br"`, ...).
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// `code` without the items marked `#[cfg(test)]` (a `mod` block, a `fn`, a `use`).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = match (item.find('{'), item.find(';')) {
            (Some(open), semi) if semi.is_none_or(|s| open < s) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (k, c) in item[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (_, Some(semi)) => semi + 1,
            _ => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    // Renames (`x as y`) dropped: the alias's trailing punctuation stays.
    let mut words = tree.split_whitespace();
    let mut tree = String::new();
    while let Some(word) = words.next() {
        if word == "as" {
            let alias = words.next().unwrap_or("");
            tree.extend(
                alias
                    .chars()
                    .filter(|c| !(c.is_alphanumeric() || *c == '_')),
            );
        } else {
            tree.push_str(word);
        }
    }
    let Some(open) = tree.find('{') else {
        return vec![tree.trim_end_matches("::*").to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.len() - 1];
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[from..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand_use(p)
                .into_iter()
                .map(|q| match q.as_str() {
                    "self" => prefix.trim_end_matches("::").to_owned(),
                    _ => format!("{prefix}{q}"),
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A source file of the crate and what it takes from others.
struct SourceFile {
    /// Module path from the crate root (`["gpu", "context"]`; `[]` for lib.rs).
    module: Vec<String>,
    /// Whether the file is a module's front (`mod.rs`, `lib.rs`, `x.rs` beside `x/`).
    front: bool,
    /// `use` paths (with whether the `use` is a re-export) and inline paths, made absolute.
    uses: Vec<(Vec<String>, bool)>,
    /// Names the file defines (items and submodules).
    defines: BTreeSet<String>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(path: &Path) -> (Vec<String>, bool) {
    let rel = path.strip_prefix("src").expect("under src/");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    match last.as_str() {
        "mod" | "lib" => (parts, true),
        _ => {
            parts.push(last);
            // `x.rs` beside a folder `x/` is the front of the folder's modules.
            (parts, path.with_extension("").is_dir())
        }
    }
}

/// `crate::`, `super::`, `self::` paths and paths into the file's own submodules made absolute
/// from `module` (the file's module); `None` for paths into other crates.
fn absolute(path: &str, module: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = match segs.first().copied() {
        Some("crate") => {
            segs.remove(0);
            Vec::new()
        }
        Some("self") | Some("super") => module.to_vec(),
        Some(first) => {
            let mut child = module.to_vec();
            child.push(first.to_owned());
            if !modules.contains(&child) {
                return None;
            }
            module.to_vec()
        }
        None => return None,
    };
    while let Some(&first) = segs.first() {
        match first {
            "self" => {}
            "super" => {
                base.pop()?;
            }
            _ => break,
        }
        segs.remove(0);
    }
    base.extend(segs.into_iter().map(str::to_owned));
    Some(base)
}

fn read_sources() -> BTreeMap<Vec<String>, SourceFile> {
    let mut paths = Vec::new();
    rust_files(Path::new("src"), &mut paths);
    let item = regex_like_items();
    // The binary's main.rs only calls the library's command line (`cli`, the top layer).
    paths.retain(|p| !p.ends_with("main.rs"));
    let modules: BTreeSet<Vec<String>> = paths.iter().map(|p| module_of(p).0).collect();
    paths
        .into_iter()
        .map(|path| {
            let (module, front) = module_of(&path);
            let code = without_tests(&code_only(&fs::read_to_string(&path).expect("readable")));
            let mut uses = Vec::new();
            let mut rest = code.as_str();
            let mut inline = String::new();
            while let Some(at) = find_use(rest) {
                inline.push_str(&rest[..at.0]);
                let end = at.1 + rest[at.1..].find(';').expect("a use ends with ;");
                let reexport = at.2;
                for p in expand_use(&rest[at.1..end]) {
                    if let Some(abs) = absolute(&p, &module, &modules) {
                        uses.push((abs, reexport));
                    }
                }
                rest = &rest[end + 1..];
            }
            inline.push_str(rest);
            for start in ["crate::", "super::"] {
                for (k, _) in inline.match_indices(start) {
                    let before = inline[..k].chars().next_back();
                    if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let path: String = inline[k..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    if let Some(abs) = absolute(path.trim_end_matches(':'), &module, &modules) {
                        uses.push((abs, false));
                    }
                }
            }
            let defines = item(&code);
            (
                module.clone(),
                SourceFile {
                    module,
                    front,
                    uses,
                    defines,
                },
            )
        })
        .collect()
}

/// `Some((start of the declaration, start of its tree, whether it re-exports))` of the next
/// `use` declaration in `code`.
fn find_use(code: &str) -> Option<(usize, usize, bool)> {
    let mut from = 0;
    while let Some(k) = code[from..].find("use ") {
        let at = from + k;
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let head = code[line_start..at].trim();
        if matches!(head, "" | "pub" | "pub(crate)" | "pub(super)") {
            let start = if head.is_empty() { at } else { line_start };
            return Some((start, at + 4, head.starts_with("pub")));
        }
        from = at + 4;
    }
    None
}

/// A function giving the names a file defines: `fn`, `struct`, `enum`, `trait`, `type`,
/// `const`, `static`, `mod`, `macro_rules!`, at any visibility.
fn regex_like_items() -> impl Fn(&str) -> BTreeSet<String> {
    |code: &str| {
        let mut names = BTreeSet::new();
        let words: Vec<&str> = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            if matches!(
                pair[0],
                "fn" | "struct" | "enum" | "trait" | "type" | "const" | "static" | "mod" | "union"
            ) {
                names.insert(pair[1].to_owned());
            }
        }
        names
    }
}

/// The file a path leads to: its module's file, or, for an item a front re-exports, the file
/// that defines it.
fn resolve(
    files: &BTreeMap<Vec<String>, SourceFile>,
    path: &[String],
    seen: &mut BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut module = Vec::new();
    let mut k = 0;
    while k < path.len() {
        let mut next = module.clone();
        next.push(path[k].clone());
        if !files.contains_key(&next) {
            break;
        }
        module = next;
        k += 1;
    }
    let file = files.get(&module)?;
    let Some(name) = path.get(k) else {
        return Some(module);
    };
    if file.defines.contains(name) || !seen.insert(path.to_vec()) {
        return Some(module);
    }
    // Follow a re-export of `name` (`pub use sub::Name`) to where it is defined.
    for (target, reexport) in &file.uses {
        if *reexport && target.last() == Some(name) && target.as_slice() != path {
            if let Some(found) = resolve(files, target, seen) {
                return Some(found);
            }
        }
    }
    Some(module)
}

/// Whether `inner` lies in the folder whose front is `front` (the front itself excluded).
fn within(front: &[String], inner: &[String]) -> bool {
    inner.len() > front.len() && inner.starts_with(front)
}

fn file_name(module: &[String]) -> String {
    let base = format!("src/{}", module.join("/"));
    match module.is_empty() {
        true => "src/lib.rs".into(),
        false if Path::new(&base).join("mod.rs").exists() => format!("{base}/mod.rs"),
        false => format!("{base}.rs"),
    }
}

/// Edges between files: who takes what from whom (fronts to their own rooms left out).
fn edges(
    files: &BTreeMap<Vec<String>, SourceFile>,
) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in files.values() {
        let out = edges.entry(file.module.clone()).or_default();
        for (path, _) in &file.uses {
            let Some(target) = resolve(files, path, &mut BTreeSet::new()) else {
                continue;
            };
            let front_to_room = file.front && within(&file.module, &target);
            if target != file.module && !front_to_room {
                out.insert(target);
            }
        }
    }
    edges
}

#[test]
fn every_module_imports_only_from_layers_below_its_own() {
    let layers = layers();
    let mut level = BTreeMap::new();
    for (k, names) in layers.iter().enumerate() {
        for name in names {
            let previous = level.insert(name.clone(), layers.len() - k);
            assert!(
                previous.is_none(),
                "{name} is in two layers of {ARCHITECTURE}"
            );
        }
    }
    let files = read_sources();
    let top_level: BTreeSet<String> = files.keys().filter_map(|m| m.first().cloned()).collect();
    let unplaced: Vec<_> = top_level
        .iter()
        .filter(|m| !level.contains_key(*m))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules without a layer in {ARCHITECTURE}: {unplaced:?}"
    );
    let mut climbing = Vec::new();
    for (module, targets) in edges(&files) {
        let Some(from) = module.first() else { continue };
        for target in targets {
            let Some(to) = target.first() else { continue };
            if to != from && level[to] >= level[from] {
                climbing.push(format!(
                    "{} (layer of {from}) imports {} (layer of {to})",
                    file_name(&module),
                    file_name(&target)
                ));
            }
        }
    }
    assert!(
        climbing.is_empty(),
        "imports that do not go down the layers of {ARCHITECTURE}:\n{}",
        climbing.join("\n")
    );
}

#[test]
fn no_files_import_each_other_around_a_circle() {
    let files = read_sources();
    let edges = edges(&files);
    // Tarjan's strongly connected components, iteratively over the sorted files.
    let nodes: Vec<&Vec<String>> = edges.keys().collect();
    let index_of: BTreeMap<&Vec<String>, usize> =
        nodes.iter().enumerate().map(|(k, n)| (*n, k)).collect();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges[*n]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut circles) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some((v, child)) = work.pop() {
            if child == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = succ[v].get(child) {
                work.push((v, child + 1));
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(file_name(nodes[w]));
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    circles.push(component.join(" <-> "));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other around a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_source_reader_sees_uses_and_skips_literals_comments_and_tests() {
    let code = code_only(
        "use crate::a::{b, c::{d, e as f}};\n// use crate::x;\nlet s = \"crate::y {\";\n\
         let c = '{'; let q = '\\''; fn g<'a>() {}\n#[cfg(test)]\nmod tests { use crate::z; }\nlet r = r#\"crate::w\"#;",
    );
    let code = without_tests(&code);
    assert!(
        !code.contains("crate::x") && !code.contains("crate::y"),
        "{code}"
    );
    assert!(
        !code.contains("crate::z") && !code.contains("crate::w"),
        "{code}"
    );
    assert!(code.contains("fn g<'a>()"), "{code}");
    assert_eq!(
        expand_use("crate::a::{b, c::{d, e as f}, self}"),
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "crate::a"
        ]
    );
    assert_eq!(
        absolute(
            "super::super::x::Y",
            &["p".into(), "q".into()],
            &BTreeSet::new()
        ),
        Some(vec!["x".to_owned(), "Y".to_owned()])
    );
}
