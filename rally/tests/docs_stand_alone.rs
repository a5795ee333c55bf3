//! The project's documentation stands alone and keeps up with the facade: every `*.md` file that
//! the README, `docs/`, the crates' sources and CI name exists in the repository (a clone has
//! nothing else), and every feature of `rally` is in the README's and the crate page's tables.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

fn files(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                files(&path, keep, out);
            }
        } else if keep(&path) {
            out.push(path);
        }
    }
}

/// Every `name.md` (with its path, if any) mentioned in `text`.
fn mentioned_markdown(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices(".md") {
        let after = text[at + 3..].chars().next();
        if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let start = text[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
            .map_or(0, |i| i + 1);
        let name = &text[start..at + 3];
        if name.len() > 3 && !name.starts_with('.') || name.starts_with("../") {
            found.push(name.to_owned());
        }
    }
    found
}

#[test]
fn every_markdown_file_the_project_names_is_in_the_repository() {
    let root = root();
    let mut sources = vec![root.join("README.md")];
    let docs_or_code = |path: &Path| {
        path.extension()
            .is_some_and(|e| e == "md" || e == "rs" || e == "toml")
    };
    for dir in [
        "docs",
        "rally",
        "rally-actor",
        "rally-remote",
        "rally-wire",
        "rally-metrics",
        "rally-cluster",
        "rally-state",
        "rally-test",
        "rally-cli",
        "rally-bench",
        ".ci",
    ] {
        files(&root.join(dir), &docs_or_code, &mut sources);
    }
    files(&root.join(".ci"), &|_| true, &mut sources);
    let mut checked = 0;
    let mut missing = Vec::new();
    // This file names missing ones on purpose, to test the scan.
    sources.retain(|source| !source.ends_with("rally/tests/docs_stand_alone.rs"));
    for source in &sources {
        let text = std::fs::read_to_string(source).unwrap();
        let here = source.parent().unwrap();
        for name in mentioned_markdown(&text) {
            checked += 1;
            let exists = [
                here.join(&name),
                root.join(&name),
                root.join("docs").join(&name),
            ]
            .iter()
            .any(|candidate| candidate.is_file());
            if !exists {
                missing.push(format!("{}: {name}", source.display()));
            }
        }
    }
    assert!(checked > 50, "the scan finds the mentions: {checked}");
    assert!(
        missing.is_empty(),
        "files a clone does not have:\n{}",
        missing.join("\n")
    );
}

#[test]
fn mentions_are_found_with_their_paths() {
    assert_eq!(
        mentioned_markdown("see `docs/tuning.md`, BENCHMARKS.md and ../../README.md; x.mdx"),
        ["docs/tuning.md", "BENCHMARKS.md", "../../README.md"]
    );
}

#[test]
fn every_feature_of_the_facade_is_in_the_readme_and_on_the_crate_page() {
    let root = root();
    let manifest = std::fs::read_to_string(root.join("rally/Cargo.toml")).unwrap();
    let features: Vec<&str> = manifest
        .lines()
        .skip_while(|line| line.trim() != "[features]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split_once(" = ").map(|(name, _)| name.trim()))
        .filter(|name| *name != "default" && !name.starts_with('#'))
        .collect();
    assert!(features.len() >= 9, "{features:?}");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let crate_page = std::fs::read_to_string(root.join("rally/src/lib.rs")).unwrap();
    for feature in features {
        let row = format!("| `{feature}` |");
        assert!(
            readme.contains(&row),
            "the README's feature table lacks `{feature}`"
        );
        assert!(
            crate_page.contains(&format!("//! {row}")),
            "rally/src/lib.rs's feature table lacks `{feature}`"
        );
    }
}
