//! Holds Cargo.toml's `sim` profile to what its comment promises: the simulation is built at
//! opt-level 3. It inherits `release`, whose per-crate `[profile.release.package.NAME]` overrides
//! (opt-level "s" for the charge path, for the 2 MB zips) would otherwise come along, and a named
//! override beats `"*"`, so each must be set back by name.

use std::collections::BTreeMap;

/// `[profile.P.package.NAME]` sections of P, with their `opt-level` value as written.
fn package_overrides(manifest: &str, profile: &str) -> BTreeMap<String, Option<String>> {
    let header = format!("[profile.{profile}.package.");
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            current = line
                .strip_prefix(&header)
                .and_then(|rest| rest.strip_suffix(']'))
                .map(|name| name.trim_matches('"').to_owned());
            if let Some(name) = &current {
                out.insert(name.clone(), None);
            }
        } else if let (Some(name), Some(value)) = (&current, line.strip_prefix("opt-level")) {
            let value = value
                .trim_start()
                .trim_start_matches('=')
                .trim()
                .trim_matches('"');
            out.insert(name.clone(), Some(value.to_owned()));
        }
    }
    out
}

#[test]
fn every_release_crate_override_is_set_back_to_3_in_the_sim_profile() {
    let manifest = include_str!("../Cargo.toml");
    let release = package_overrides(manifest, "release");
    let sim = package_overrides(manifest, "sim");
    assert!(
        !release.is_empty(),
        "the release profile's per-crate overrides were not found"
    );
    for name in release.keys() {
        assert_eq!(
            sim.get(name),
            Some(&Some("3".to_owned())),
            "[profile.release.package.{name}] has no [profile.sim.package.{name}] with opt-level = 3"
        );
    }
}
