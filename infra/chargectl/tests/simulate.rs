//! `chargectl simulate` as CI runs it: the promise under every fault kind at once, in memory over
//! several seeds and on moto + a separately started Stripe simulator over HTTP; and the seeds'
//! figure (retry off → lost charges; key off → double charges; both on → neither).

use std::collections::BTreeMap;
use std::process::Command;

use chargectl::simulate::faults::Kind;
use chargectl::simulate::{simulate, Backend, SimulateArgs};
use chargectl::GlobalArgs;
use serde_json::Value;

fn args(orders: u32, seed: u64, backend: Backend) -> SimulateArgs {
    SimulateArgs {
        orders,
        concurrency: 8,
        seed,
        backend,
        stripe_url: None,
        faults: Vec::new(),
        no_faults: false,
        no_idempotency_key: false,
        no_retry: false,
        json: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_orders_in_memory_with_every_fault_kind_over_four_seeds() {
    let mut injected: BTreeMap<String, u64> = BTreeMap::new();
    let mut orders = 0;
    for seed in [11, 12, 13, 14] {
        let report = simulate(&args(5_000, seed, Backend::Memory), &GlobalArgs::default())
            .await
            .unwrap();
        assert!(report.invariants_hold, "seed {seed}: {}", report.render());
        assert_eq!(report.double_charges, 0);
        assert_eq!(report.lost_charges, 0);
        assert_eq!(report.unconverged, 0);
        assert_eq!(report.accepted, 5_000);
        orders += report.orders;
        for (k, n) in &report.faults_injected {
            *injected.entry(k.clone()).or_default() += n;
        }
    }
    assert!(orders >= 20_000);
    // Every fault kind really happened (counted where it was injected, not configured).
    for kind in Kind::ALL {
        let n = injected.get(kind.name()).copied().unwrap_or(0);
        assert!(n > 0, "fault kind {kind} never fired: {injected:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_orders_on_moto_and_a_separate_stripe_sim_over_http() {
    // The local stack (moto) from `make test`; a Stripe simulator this process did not configure:
    // simulate drives it through its admin API only.
    let _ = testkit::aws::sdk_config().await;
    let sim = stripe_sim::StripeSim::new(stripe_sim::SimConfig::default());
    let running = sim.start(0).await.unwrap();
    let mut a = args(500, 21, Backend::Aws);
    a.stripe_url = Some(running.base_url());
    let report = simulate(&a, &GlobalArgs::default()).await.unwrap();
    assert!(report.invariants_hold, "{}", report.render());
    assert_eq!(report.accepted, 500);
    assert_eq!(report.unconverged, 0);
    assert!(report.faults_injected.values().sum::<u64>() > 0);
    assert!(
        sim.ledger().len() as u64 >= report.succeeded,
        "the charges are in the separate simulator's ledger"
    );
    assert!(report.requests_per_charge["dynamodb_writes"] >= 3.0);
}

fn run_cli(extra: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chargectl"))
        .args(["simulate", "--orders", "1000", "--seed", "5", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().unwrap_or_default();
    let json: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_seeds_figure() {
    let (code, on, _) = run_cli(&[]);
    assert_eq!(code, 0);
    assert_eq!(on["double_charges"], 0);
    assert_eq!(on["lost_charges"], 0);
    assert_eq!(on["unconverged"], 0);
    for key in [
        "dynamodb_reads",
        "dynamodb_writes",
        "sqs_sends",
        "stripe_calls",
    ] {
        assert!(on["requests_per_charge"][key].is_number(), "{key}");
    }

    let (code, no_retry, err) = run_cli(&["--no-retry"]);
    assert_eq!(code, 1, "an invariant broke, so the exit is non-zero");
    assert!(err.contains("--seed 5"), "tells how to replay: {err}");
    assert!(no_retry["lost_charges"].as_u64().unwrap() > 0, "{no_retry}");
    assert_eq!(no_retry["double_charges"], 0);

    let (code, no_key, _) = run_cli(&["--no-idempotency-key"]);
    assert_eq!(code, 1);
    assert!(no_key["double_charges"].as_u64().unwrap() > 0, "{no_key}");
}

#[test]
fn bad_simulation_arguments_are_refused() {
    for bad in [
        vec!["simulate", "--fault", "nonsense=0.1"],
        vec!["simulate", "--fault", "crash=1.5"],
        vec!["simulate", "--orders", "0"],
        vec!["simulate", "--backend", "mainframe"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_chargectl"))
            .args(&bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(!out.stderr.is_empty());
    }
}
