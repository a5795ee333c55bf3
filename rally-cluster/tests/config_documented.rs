//! Every key of the cluster's configuration files has a row, with its default and why, in
//! `docs/configuration.md`: a key added to `ClusterConfig` or `VirtualActorsConfig` without
//! one fails here.

use rally_cluster::ClusterConfig;
use rally_cluster::virtual_actors::VirtualActorsConfig;

/// The keys of `config` in its file form (the defaults write every key).
fn keys(config: &impl serde::Serialize) -> Vec<String> {
    let text = toml::to_string(config).expect("a configuration always writes");
    let table: toml::Table = toml::from_str(&text).expect("and reads back");
    table.keys().cloned().collect()
}

/// The section of `docs/configuration.md` under the heading that starts with `heading`.
fn section(heading: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../", "docs/configuration.md");
    let docs = std::fs::read_to_string(path).expect("docs/configuration.md is in the repository");
    let start = docs
        .find(heading)
        .unwrap_or_else(|| panic!("a section {heading}"));
    let rest = &docs[start + heading.len()..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
}

fn undocumented(keys: &[String], section: &str) -> Vec<String> {
    keys.iter()
        .filter(|key| !section.contains(&format!("| `{key}` |")))
        .cloned()
        .collect()
}

#[test]
fn every_cluster_and_virtual_actor_key_has_a_row_in_the_configuration_docs() {
    let cluster = keys(&ClusterConfig::default());
    assert!(cluster.len() >= 16, "{cluster:?}");
    assert_eq!(
        undocumented(&cluster, &section("## `ClusterConfig`")),
        Vec::<String>::new(),
        "ClusterConfig keys without a row"
    );
    let grains = keys(&VirtualActorsConfig::default());
    assert!(grains.len() >= 7, "{grains:?}");
    assert_eq!(
        undocumented(&grains, &section("## `VirtualActorsConfig`")),
        Vec::<String>::new(),
        "VirtualActorsConfig keys without a row"
    );
}
