//! The README's examples as a user's crate sees them: they may name only `rally` and the other
//! crates the README's `[dependencies]` block lists (the facade's doc tests compile the same
//! examples, but with the facade's dev-dependencies in reach, so an example importing an
//! internal crate such as `rally_actor` would pass there and fail for a user).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    std::fs::read_to_string(&path).expect("the README sits at the repository root")
}

/// The fenced blocks whose info string starts with `lang`: (info string, body).
fn blocks(text: &str, lang: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) if info.starts_with(lang) => {
                current = Some((info.to_owned(), String::new()));
            }
            (Some(_), Some("")) => found.extend(current.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    found
}

/// The crates the README's `[dependencies]` block names (not `[dev-dependencies]`).
fn dependencies(text: &str) -> BTreeSet<String> {
    let toml = blocks(text, "toml")
        .into_iter()
        .map(|(_, body)| body)
        .find(|body| body.contains("[dependencies]"))
        .expect("the README shows a [dependencies] block");
    toml.lines()
        .skip_while(|line| line.trim() != "[dependencies]")
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect()
}

/// The first segment of every path in `code` (`rally` in `rally::prelude::*`).
fn path_roots(code: &str) -> BTreeSet<String> {
    let bytes = code.as_bytes();
    let mut roots = BTreeSet::new();
    for (at, _) in code.match_indices("::") {
        let start = code[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let ident = &code[start..at];
        // Not a later segment (`a::b::`) nor a method's turbofish (`.add::<T>()`).
        let after_path = start >= 2 && &bytes[start - 2..start] == b"::";
        let method = start >= 1 && bytes[start - 1] == b'.';
        let lowercase = ident.chars().next().is_some_and(|c| c.is_ascii_lowercase());
        if !ident.is_empty() && lowercase && !after_path && !method {
            roots.insert(ident.to_owned());
        }
    }
    roots
}

#[test]
fn readme_examples_name_only_crates_its_dependencies_block_lists() {
    let text = readme();
    let deps = dependencies(&text);
    assert_eq!(
        deps,
        ["rally", "serde", "tokio", "tracing-subscriber"]
            .into_iter()
            .map(String::from)
            .collect(),
        "the README's [dependencies] block"
    );
    let rust = blocks(&text, "rust");
    assert!(
        rust.len() >= 3,
        "the README has its examples: {}",
        rust.len()
    );
    for (info, code) in &rust {
        for root in path_roots(code) {
            let known = deps.contains(&root.replace('_', "-")) || root == "std" || root == "core";
            assert!(
                known,
                "a README example ({info}) names `{root}::`, not a dependency:\n{code}"
            );
        }
    }
}

#[test]
fn path_roots_sees_only_the_first_segment() {
    let roots =
        path_roots("use rally::prelude::*;\nlet t = tokio::spawn(x); Duration::from_secs(1);");
    assert_eq!(
        roots,
        ["rally", "tokio"].into_iter().map(String::from).collect()
    );
}

/// Builds every README example that has a `main` in a fresh crate depending on exactly the
/// README's `[dependencies]` (with `rally` pointing at this repository): minutes of compiling,
/// so run on demand with `cargo test -p rally --test readme_user_crate -- --ignored`.
#[test]
#[ignore = "compiles a separate crate and its dependencies (minutes)"]
fn readme_examples_build_in_a_crate_that_depends_only_on_rally() {
    let text = readme();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root exists");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo.join("target"), PathBuf::from);
    let dir = target.join("readme-user-crate");
    let _ = std::fs::remove_dir_all(dir.join("examples"));
    std::fs::create_dir_all(dir.join("examples")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();

    let deps = blocks(&text, "toml")
        .into_iter()
        .map(|(_, body)| body)
        .find(|body| body.contains("[dependencies]"))
        .unwrap();
    let deps: String = deps
        .lines()
        .take_while(|line| line.trim() != "[dev-dependencies]")
        .map(|line| {
            if line.trim_start().starts_with("rally ") {
                // This repository's facade, with the features the README's line turns on.
                let features = line
                    .split_once("features")
                    .and_then(|(_, rest)| rest.split_once('[')?.1.split_once(']'))
                    .map_or(String::new(), |(list, _)| format!(", features = [{list}]"));
                format!("rally = {{ path = {:?}{features} }}\n", repo.join("rally"))
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    let manifest = format!(
        "[package]\nname = \"readme-user\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n{deps}\n[workspace]\n"
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    // Start from the repository's resolved versions, so the build needs no newer crates.
    std::fs::copy(repo.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let mut examples = 0;
    for (info, code) in blocks(&text, "rust") {
        if code.contains("fn main") && !info.contains("ignore") {
            examples += 1;
            std::fs::write(dir.join(format!("examples/readme_{examples}.rs")), code).unwrap();
        }
    }
    assert!(examples >= 3, "examples with a main: {examples}");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--examples", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "the README's examples build in {}",
        dir.display()
    );
}
