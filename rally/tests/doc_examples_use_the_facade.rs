//! The rustdoc pages of the facade show the doc examples of the crates it re-exports whole
//! (`rally-actor`, `rally-remote`, `rally-metrics`, `rally-cluster`, `rally-state`, the
//! simulation of `rally-test`). A user's crate depends on `rally` only, so an example there that
//! imports `rally_actor::…` would fail when copied; each crate's own doc tests do not catch it,
//! as the crate can always name itself. (`rally-wire` is left out: the facade re-exports only a
//! few of its types, whose examples use `rally::remote::…`; its other examples are internal.)

use std::path::{Path, PathBuf};

const INTERNAL: [&str; 7] = [
    "rally_actor::",
    "rally_remote::",
    "rally_wire::",
    "rally_metrics::",
    "rally_cluster::",
    "rally_state::",
    "rally_test::",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Lines of code inside fenced blocks of `//!` and `///` comments: (line number, text).
fn doc_code(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut inside = false;
    for (number, line) in source.lines().enumerate() {
        let trimmed = line.trim_start();
        let Some(doc) = trimmed
            .strip_prefix("///")
            .or_else(|| trimmed.strip_prefix("//!"))
        else {
            inside = false;
            continue;
        };
        let doc = doc.strip_prefix(' ').unwrap_or(doc);
        if doc.trim_start().starts_with("```") {
            inside = !inside;
        } else if inside {
            found.push((number + 1, doc.to_owned()));
        }
    }
    found
}

#[test]
fn doc_examples_shown_by_the_facade_import_only_rally() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in [
        "rally/src",
        "rally-actor/src",
        "rally-remote/src",
        "rally-metrics/src",
        "rally-cluster/src",
        "rally-state/src",
        "rally-test/src/sim",
    ] {
        let dir = root.join(dir);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
    }
    let sim = root.join("rally-test/src/sim.rs");
    if sim.is_file() {
        files.push(sim);
    }
    let mut examples = 0;
    let mut offending = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        let code = doc_code(&source);
        examples += code.len();
        for (line, text) in code {
            if INTERNAL.iter().any(|name| text.contains(name)) {
                offending.push(format!("{}:{line}: {text}", file.display()));
            }
        }
    }
    assert!(
        examples > 1000,
        "the scan finds the doc examples: {examples} lines"
    );
    assert!(
        offending.is_empty(),
        "doc examples a user's crate cannot compile:\n{}",
        offending.join("\n")
    );
}

#[test]
fn the_scan_sees_code_in_doc_blocks_only() {
    let source = "/// ```\n/// use rally_actor::Actor;\n/// ```\n/// rally_actor:: in prose\n\
                  //! ```\n//! let x = 1;\n//! ```\nfn main() {}\n";
    let code = doc_code(source);
    assert_eq!(
        code,
        [
            (2, "use rally_actor::Actor;".to_owned()),
            (6, "let x = 1;".to_owned())
        ]
    );
}
