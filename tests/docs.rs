//! The documentation can be followed: every relative link of the README and of `docs/` leads to
//! a file (and a heading, when it names one), every comment that cites a `docs/` page names a page
//! and sections that exist, and no comment cites a document outside the repository.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The markdown pages: the README and every page of `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    for entry in fs::read_dir("docs").expect("docs/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation other than `-`/`_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The headings of a markdown page (outside code blocks), without their `#`s.
fn headings(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(line.trim_start_matches('#').trim().to_owned());
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of a page, outside code blocks and spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_readme_and_docs_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = fs::read_to_string(&page).expect("readable");
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, section) = target.split_once('#').unwrap_or((&target, ""));
            let dir = page.parent().unwrap_or(Path::new(""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if !section.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let anchors: BTreeSet<String> =
                    headings(&fs::read_to_string(&path).expect("readable"))
                        .iter()
                        .map(|h| anchor(h))
                        .collect();
                if !anchors.contains(section) {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() && !path.ends_with("target") {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs" || e == "wgsl") {
            out.push(path);
        }
    }
}

/// Consecutive comment lines of a source file joined into one text, with the first line number.
fn comment_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(comment) = trimmed.strip_prefix("//") {
            let comment = comment.trim_start_matches(['/', '!']).trim();
            match &mut current {
                Some((_, text)) => {
                    text.push(' ');
                    text.push_str(comment);
                }
                None => current = Some((n + 1, comment.to_owned())),
            }
        } else if let Some(block) = current.take() {
            blocks.push(block);
        }
    }
    blocks.extend(current);
    blocks
}

#[test]
fn comments_cite_pages_and_sections_that_exist_and_nothing_outside_the_repository() {
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples", "shaders", "fuzz"] {
        source_files(Path::new(dir), &mut files);
    }
    let mut problems = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("readable");
        for (line, comment) in comment_blocks(&text) {
            let lower = comment.to_lowercase();
            for outside in ["shared/docs", "spec section", "spec §", "-spec.md"] {
                if lower.contains(outside) {
                    problems.push(format!(
                        "{}:{line}: cites a document outside the repository ({outside})",
                        file.display()
                    ));
                }
            }
            let mut rest = comment.as_str();
            while let Some(at) = rest.find("docs/") {
                let cited = &rest[at..];
                let name_len = cited
                    .find(|c: char| !(c.is_alphanumeric() || "/-_.".contains(c)))
                    .unwrap_or(cited.len());
                let page = cited[..name_len].trim_end_matches('.');
                rest = &cited[name_len..];
                if !page.ends_with(".md") {
                    continue;
                }
                let Ok(page_text) = fs::read_to_string(page) else {
                    problems.push(format!("{}:{line}: no page {page}", file.display()));
                    continue;
                };
                let known: BTreeSet<String> = headings(&page_text).into_iter().collect();
                // The sections named right after the page, up to the end of the parenthesis.
                let citation = rest.split(')').next().unwrap_or("");
                for (k, section) in citation.split('"').enumerate() {
                    if k % 2 == 1 && !known.contains(section) {
                        problems.push(format!(
                            "{}:{line}: {page} has no section \"{section}\"",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn anchors_and_links_are_read_as_github_reads_them() {
    assert_eq!(anchor("MPI ranks"), "mpi-ranks");
    assert_eq!(
        anchor("GPU first, never silently elsewhere"),
        "gpu-first-never-silently-elsewhere"
    );
    assert_eq!(
        link_targets("see [a](docs/x.md#y) and `[b](not-a-link)` and [c](https://e)"),
        ["docs/x.md#y", "https://e"]
    );
    let blocks = comment_blocks("// one\n/// two\nlet x = 1;\n//! three");
    assert_eq!(blocks, [(1, "one two".to_owned()), (4, "three".to_owned())]);
}
