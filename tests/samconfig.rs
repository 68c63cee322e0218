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

/// The `Name=value` pairs of a samconfig `parameter_overrides` value as `sam deploy --guided`
/// writes it (`"A=\"x\" B=\"y\""`) or as a TOML list (`["A=x", "B=y"]`).
fn overrides(raw: &str) -> Vec<(String, String)> {
    let unquote = |s: &str| {
        s.trim_matches(|c| c == '"' || c == '\\' || c == '\'')
            .to_owned()
    };
    raw.trim_matches(|c| c == '[' || c == ']')
        .replace("\\\"", "\"")
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (unquote(k), unquote(v)))
        .collect()
}

/// Whether a deploy with these overrides (every other parameter at its template Default) passes
/// the template's rule AlarmsPageSomebody: it names somebody to page, or says nobody is.
fn pages_somebody_or_says_not(pairs: &[(String, String)]) -> bool {
    let set = |name: &str| pairs.iter().any(|(k, v)| k == name && !v.is_empty());
    set("AlarmTopicArn")
        || set("AlarmEmail")
        || pairs
            .iter()
            .any(|(k, v)| k == "AllowUnpagedAlarms" && v == "true")
}

#[test]
fn what_a_deploy_takes_from_samconfig_names_who_is_paged_or_asks() {
    // Without saved parameter_overrides `sam deploy --guided` asks for every parameter, and the
    // template's rule refuses an answer that pages nobody. Saved ones must pass that rule on their
    // own: a `sam deploy` from this file must not stop at it, nor deploy a silent stack unsaid.
    for section in ["default.deploy.parameters", "default.sync.parameters"] {
        if let Some(raw) = value(SAMCONFIG, section, "parameter_overrides") {
            assert!(
                pages_somebody_or_says_not(&overrides(raw)),
                "samconfig.toml [{section}] parameter_overrides {raw} set neither AlarmTopicArn \
                 nor AlarmEmail, nor AllowUnpagedAlarms=\"true\""
            );
        }
    }
    // The check itself, on the shapes SAM writes.
    let guided = r#""StripeSecretArn=\"arn:aws:secretsmanager:us-east-1:123456789012:secret:s-AbCdEf\" AlarmEmail=\"on-call@example.com\"""#;
    assert!(pages_somebody_or_says_not(&overrides(guided)));
    let silent = r#""StripeSecretArn=\"arn:aws:secretsmanager:us-east-1:123456789012:secret:s-AbCdEf\" AlarmEmail=\"\"""#;
    assert!(!pages_somebody_or_says_not(&overrides(silent)));
    let said = r#"["StripeSecretArn=arn:x", "AllowUnpagedAlarms=true"]"#;
    assert!(pages_somebody_or_says_not(&overrides(said)));
    let unsaid = r#"["StripeSecretArn=arn:x", "AllowUnpagedAlarms=false"]"#;
    assert!(!pages_somebody_or_says_not(&overrides(unsaid)));
}
