//! Holds `samconfig.toml` to the documented commands (README.md, docs/deploy.md): `sam build`
//! and `sam deploy` run as written, with no question asked. The template builds every function
//! with the `rust-cargolambda` build method, which SAM CLI releases before Rust support left beta
//! (aws-sam-cli pull request 8526) build only after a yes to "enable this beta feature?", and
//! without a terminal they abort; `beta_features = true` in the build (and sync) parameters is
//! that yes, so it must not get lost.
//!
//! Offline, no SAM CLI needed: the file is read as text by [`value`], which knows as much TOML as
//! samconfig.toml uses (`[section]` headers, `key = value` lines, `#` comments).

const SAMCONFIG: &str = include_str!("../samconfig.toml");

/// The raw value of `key` in `[section]` of a samconfig text (`None` when the section or the key
/// is absent; the value as written, strings with their quotes).
fn value<'a>(text: &'a str, section: &str, key: &str) -> Option<&'a str> {
    let mut current = None;
    for line in text.lines() {
        let line = without_comment(line).trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.trim());
            continue;
        }
        if current != Some(section) {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim() == key {
                return Some(v.trim());
            }
        }
    }
    None
}

/// The line up to a `#` outside a quoted string.
fn without_comment(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
    }
    line
}

#[test]
fn sam_build_and_sync_opt_in_to_the_rust_build_method_without_a_prompt() {
    for section in ["default.build.parameters", "default.sync.parameters"] {
        assert_eq!(
            value(SAMCONFIG, section, "beta_features"),
            Some("true"),
            "samconfig.toml [{section}] must set beta_features = true, or a SAM CLI from before \
             Rust support left beta asks about the beta build method rust-cargolambda (and aborts \
             without a terminal)"
        );
    }
}

#[test]
fn the_reader_finds_a_key_only_in_its_own_section() {
    // The file's other settings, read the same way: the reader is not blind.
    assert_eq!(
        value(SAMCONFIG, "default.build.parameters", "use_container"),
        Some("false")
    );
    assert_eq!(
        value(SAMCONFIG, "default.deploy.parameters", "capabilities"),
        Some("\"CAPABILITY_IAM\"")
    );
    let elsewhere = "[default.build.parameters]\ncached = false\n\
                     # beta_features = true\n\
                     [default.deploy.parameters]\nbeta_features = true # not the build's\n";
    assert_eq!(
        value(elsewhere, "default.build.parameters", "beta_features"),
        None,
        "a commented-out line or another section's key is not the build's"
    );
    assert_eq!(
        value(elsewhere, "default.deploy.parameters", "beta_features"),
        Some("true")
    );
    assert_eq!(
        value("[a]\nk = \"x # y\" # z\n", "a", "k"),
        Some("\"x # y\"")
    );
}
