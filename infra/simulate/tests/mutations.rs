//! The checker is proven: for each deliberately broken variant (a wrapper around a port or a
//! policy switch in the simulator, never a branch in the production core) the simulation reports
//! a violation, with the order and the invariant, within a bounded number of orders; the unbroken
//! build holds every invariant on the same seeds.

use simulate::mutations::Mutation;
use simulate::{simulate, Backend, SimulateArgs};

/// Every variant is caught within this many orders, on every seed below.
const BOUND: u64 = 2_000;
const SEEDS: [u64; 2] = [1, 2];

fn run(seed: u64, mutation: Option<Mutation>) -> simulate::report::Report {
    let mut args = SimulateArgs::new(BOUND, seed, Backend::Memory);
    args.mutation = mutation;
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(simulate(&args))
        .unwrap()
}

#[test]
fn every_broken_variant_is_caught_with_its_order_and_invariant() {
    let mut caught = Vec::new();
    for mutation in Mutation::ALL {
        for seed in SEEDS {
            let report = run(seed, Some(mutation));
            let why = report.first_violation.clone().unwrap_or_default();
            assert!(
                !report.invariants_hold,
                "{} not caught within {BOUND} orders (seed {seed}):\n{}",
                mutation.name(),
                report.render()
            );
            assert!(why.contains(&format!("order sim-{seed}-")), "{why}");
            caught.push(format!("{} seed {seed}: {why}", mutation.name()));
        }
    }
    // The suite's result, for the CI log.
    println!("{}", caught.join("\n"));
}

#[test]
fn the_unbroken_build_holds_every_invariant_on_the_same_seeds() {
    for seed in SEEDS {
        let report = run(seed, None);
        assert!(report.invariants_hold, "seed {seed}: {}", report.render());
        assert_eq!(report.stale_lease_writes, 0);
        assert_eq!(report.foreign_dedup_ids, 0);
        assert_eq!(report.orphan_charges, 0);
    }
}
