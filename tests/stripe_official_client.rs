//! The official `stripe` Python package, unchanged, against the simulator (its API base pointed at
//! it): proof that the simulator speaks Stripe's wire format, not just what our client expects.
//! Needs the venv that `infra/local/with-stack.sh` installs (`make test` does).

use std::process::Command;

use stripe_sim::{SimConfig, StripeSim};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_client_talks_to_the_simulator() {
    let venv = std::env::var("CHARGE_ONCE_VENV").expect(
        "CHARGE_ONCE_VENV is not set: run the tests through `make test` (infra/local/with-stack.sh)",
    );
    let sim = StripeSim::new(SimConfig::default());
    let running = sim.start(0).await.unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../infra/stripe-sim/tests/official_client.py"
    );
    let base = running.base_url();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(format!("{venv}/bin/python"))
            .arg(script)
            .env("STRIPE_SIM_URL", base)
            .output()
            .expect("run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "official client failed:\n{stdout}\n{stderr}"
    );
    assert!(
        !sim.ledger().is_empty(),
        "the client really created PaymentIntents"
    );
    assert_eq!(
        sim.capacity_429s().create,
        1,
        "the client met the simulator's create limit once"
    );
    let disputes = sim.dispute_ledger();
    assert_eq!(
        disputes
            .iter()
            .map(|d| d.status.as_str())
            .collect::<Vec<_>>(),
        ["won", "lost"],
        "the client's dispute test cards made two disputes, answered and accepted"
    );
}
