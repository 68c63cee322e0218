//! The load model (`simulate --arrival-rate`): a burst at Stripe's limit, measured in virtual
//! time. Counts and virtual-time ratios only, never wall time.
//!
//! The reference burst: 20,000 orders at 200/s (8 x the limit), Stripe's create limit 25/s, create
//! latency p50 300 ms, 2 charge environments. N/L = 800 s. The stall without pacing is measured on
//! 4,000 orders at the same 200/s (R/L = 8 kept): its runs wait out 1,800 s visibility timeouts
//! with 20,000 messages in the queue, which takes minutes in a debug build.

use std::time::Duration;

use simulate::load::{run, LoadConfig, LoadReport};
use stripe_sim::CreateLatency;

async fn load(cfg: LoadConfig) -> LoadReport {
    let report = run(&cfg).await.expect("load run");
    assert!(
        report.invariants_hold,
        "{:?}: {:?}",
        cfg, report.first_violation
    );
    assert_eq!(report.double_charges, 0);
    let load = report.load.expect("a load report");
    assert_eq!(load.checkout_errors, 0, "{load:?}");
    // Every order's charge, and in a mixed burst every capture and refund asked of them.
    let asks = load
        .mix
        .as_ref()
        .map_or(0, |m| m.captures_accepted + m.refunds_accepted);
    assert_eq!(
        load.settled,
        cfg.orders + asks,
        "every order settled: {load:?}"
    );
    load
}

fn reference(seed: u64) -> LoadConfig {
    LoadConfig::new(20_000, 200.0, seed)
}

#[tokio::test]
async fn the_reference_burst_drains_at_stripes_limit_on_two_seeds() {
    for seed in [1, 2] {
        let r = load(reference(seed)).await;
        let ideal = 20_000.0 / 25.0;
        assert_eq!(r.ideal_drain_secs, ideal);
        // The floor is 25/22 = 1.136 (the charge environments get 22 of the 24 calls/s).
        assert!(r.drain_secs <= 1.15 * ideal, "seed {seed}: drain {r:?}");
        assert!(
            r.latency_p99_secs <= 1.2 * ideal,
            "seed {seed}: p99 checkout -> settled {r:?}"
        );
        assert_eq!(r.waited_visibility_timeout, 0, "seed {seed}: {r:?}");
        // The environments' banks together stay within Stripe's one-second bucket.
        assert_eq!(r.capacity_429s, 0, "seed {seed}: {r:?}");
        assert_eq!(r.creates_per_charge, 1.0, "seed {seed}: {r:?}");
        // The queue stays minutes deep: the reconciler finds pending operations past their
        // grace at every tick, and waits for the queue instead of sending them again.
        assert!(r.waited_for_queue > 1_000, "seed {seed}: {r:?}");
        assert!(r.sends_per_order <= 1.05, "seed {seed}: {r:?}");
        // Not faster than Stripe allows: the model really is at the limit.
        assert!(r.drain_secs >= ideal, "seed {seed}: {r:?}");
    }
}

#[tokio::test]
async fn more_charge_environments_are_never_worse_than_the_default() {
    let default = load(reference(1)).await;
    for concurrency in [5, 20] {
        let r = load(LoadConfig {
            charge_concurrency: concurrency,
            ..reference(1)
        })
        .await;
        // Within 1 %: each environment's carry is a smaller share's (the reference burst:
        // 1.136 × N/L at 4 environments, 1.140 at 20).
        assert!(
            r.drain_secs <= 1.01 * default.drain_secs,
            "{concurrency} environments: {} s against {} s with {}",
            r.drain_secs,
            default.drain_secs,
            default.charge_concurrency
        );
        assert_eq!(r.waited_visibility_timeout, 0, "{r:?}");
        // More environments, more banks, each smaller: never a 429 more.
        assert_eq!(r.capacity_429s, 0, "{concurrency} environments: {r:?}");
    }
}

#[tokio::test]
async fn below_the_limit_an_order_settles_within_one_stripe_call() {
    let r = load(LoadConfig::new(2_000, 10.0, 1)).await;
    // The create latency's p99 (z = 2.326) and one second.
    let bound = CreateLatency::default().at_z(2.326) + Duration::from_secs(1);
    assert!(
        r.latency_p99_secs <= bound.as_secs_f64(),
        "p99 {} s > {bound:?}: {r:?}",
        r.latency_p99_secs
    );
    assert_eq!(r.capacity_429s, 0, "{r:?}");
    assert_eq!(r.creates_per_charge, 1.0, "{r:?}");
}

#[tokio::test]
async fn without_pacing_the_burst_stalls_on_visibility_timeouts() {
    // At 2 environments, as the stall was first measured: more only add 429s and waits.
    let cfg = LoadConfig {
        pacing: false,
        charge_concurrency: 2,
        ..LoadConfig::new(4_000, 200.0, 1)
    };
    let r = load(cfg).await;
    assert!(r.drain_secs > 2.0 * r.ideal_drain_secs, "{r:?}");
    assert!(r.waited_visibility_timeout > 0, "{r:?}");
    assert!(r.capacity_429s > 0, "{r:?}");
    // The same burst paced does not.
    let paced = load(LoadConfig::new(4_000, 200.0, 1)).await;
    // A fifth of the reference burst: its first seconds (banks filling) weigh more (1.151).
    assert!(
        paced.drain_secs <= 1.16 * paced.ideal_drain_secs,
        "{paced:?}"
    );
    assert_eq!(paced.waited_visibility_timeout, 0, "{paced:?}");
}

#[tokio::test]
async fn a_load_run_is_deterministic_per_seed() {
    let cfg = || LoadConfig::new(2_000, 200.0, 7);
    let a = load(cfg()).await;
    let b = load(cfg()).await;
    assert_eq!(a, b);
    let other = load(LoadConfig::new(2_000, 200.0, 8)).await;
    assert_ne!(a.fingerprint, other.fingerprint);
}

/// A mixed burst in test mode (the account's 25/s binds every call): a third of the orders
/// authorized and captured once the order service hears of it, a third refunded once charged.
fn mixed(stripe_rps: u64) -> LoadConfig {
    LoadConfig {
        account_limit: 25,
        stripe_rps,
        capture_share: 0.3,
        refund_share: 0.3,
        ..LoadConfig::new(2_000, 200.0, 1)
    }
}

#[tokio::test]
async fn a_mixed_burst_keeps_every_endpoint_and_the_account_under_their_limits() {
    let alone = load(LoadConfig {
        account_limit: 25,
        ..LoadConfig::new(2_000, 200.0, 1)
    })
    .await;
    let r = load(mixed(24)).await;
    let mix = r.mix.clone().expect("a mixed burst reports its mix");
    assert!(mix.captures_accepted > 500, "{mix:?}");
    assert!(mix.refunds_accepted > 500, "{mix:?}");
    assert_eq!(mix.ask_errors, 0, "{mix:?}");
    // Each refund once at Stripe, none over its charge; every order's intent succeeded once.
    assert_eq!(mix.refunds_at_stripe, mix.refunds_accepted, "{mix:?}");
    assert_eq!(mix.over_refunded, 0, "{mix:?}");
    assert_eq!(mix.succeeded_at_stripe, 2_000, "{mix:?}");
    // Stripe refused nothing: no endpoint and not the account went over its limit.
    assert_eq!(r.capacity_429s, 0, "{r:?}");
    assert_eq!(mix.account_429s, 0, "{mix:?}");
    // The charges drain first: within 5 % of the same charges alone, well before the
    // captures and refunds asked of them.
    assert!(
        mix.charges_done_secs <= 1.05 * alone.drain_secs,
        "{} s against {} s alone",
        mix.charges_done_secs,
        alone.drain_secs
    );
    assert!(mix.charges_done_secs < 0.8 * r.drain_secs, "{r:?}");
    // Its twin: a budget set over the account's limit (48/s against 25/s) is refused by the
    // account's bucket, so the check above can fail.
    let over = load(mixed(48)).await;
    let over_mix = over.mix.expect("a mixed burst reports its mix");
    assert!(over_mix.account_429s > 0, "{over_mix:?}");
}
