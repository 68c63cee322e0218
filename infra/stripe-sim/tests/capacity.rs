//! Stripe's capacity: token buckets per endpoint and for the account, on the simulated clock and
//! on real time, their 429s (Stripe's shape, counted apart from the random `rate_limit` fault),
//! the admin API and flags, and the seeded create latency.

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use stripe_sim::{
    Answer, Capacity, Capacity429s, CapacityClock, CreateLatency, CreateStart, FaultKind, Outcome,
    SimConfig, StripeSim,
};

const T0: i64 = 1_800_000_000_000;

fn sim_with(capacity: Capacity) -> StripeSim {
    StripeSim::new(SimConfig {
        start_ms: Some(T0),
        capacity,
        ..SimConfig::default()
    })
}

/// The HTTP harness with `capacity` and nothing else changed.
async fn start_with_capacity(capacity: Capacity) -> Harness {
    start_with(SimConfig {
        capacity,
        ..SimConfig::default()
    })
    .await
}

/// One in-process create with a fresh key; its HTTP status (a slow create is completed at once).
fn create_status(sim: &StripeSim, n: usize) -> u16 {
    let key = format!("k-{n}");
    match sim.create_in_process(Some(&key), visa(&format!("op-{n}"))) {
        CreateStart::Done(Outcome::Answered(a)) => a.status,
        CreateStart::Done(Outcome::Dropped) => panic!("no fault was set"),
        CreateStart::Slow(s) => match s.complete() {
            Outcome::Answered(a) => a.status,
            Outcome::Dropped => panic!("no fault was set"),
        },
    }
}

fn passes(sim: &StripeSim, from: usize, n: usize) -> usize {
    (from..from + n)
        .filter(|i| match create_status(sim, *i) {
            200 => true,
            429 => false,
            s => panic!("unexpected status {s}"),
        })
        .count()
}

#[test]
fn default_config_is_unlimited_and_changes_nothing() {
    assert_eq!(SimConfig::default().capacity, Capacity::unlimited());
    let sim = StripeSim::new(SimConfig::default());
    assert_eq!(passes(&sim, 0, 300), 300, "no limit by default");
    assert_eq!(sim.capacity_429s(), Capacity429s::default());
    assert_eq!(sim.next_create_latency(), None, "no latency by default");
}

#[test]
fn buckets_refill_at_the_configured_rate_on_the_manual_clock() {
    let sim = sim_with(Capacity::stripe_defaults());
    assert_eq!(passes(&sim, 0, 25), 25, "a full bucket: one second's worth");
    assert_eq!(create_status(&sim, 25), 429, "the 26th at t=0");
    sim.advance(Duration::from_millis(39));
    assert_eq!(
        create_status(&sim, 26),
        429,
        "25/s: a token every 40 ms, not yet"
    );
    sim.advance(Duration::from_millis(1));
    assert_eq!(create_status(&sim, 27), 200, "one token after 40 ms");
    assert_eq!(create_status(&sim, 28), 429);
    sim.advance(Duration::from_millis(200));
    assert_eq!(passes(&sim, 29, 10), 5, "200 ms = 5 tokens");
    sim.advance(Duration::from_secs(3600));
    assert_eq!(
        passes(&sim, 39, 40),
        25,
        "a long pause refills to the burst, no more"
    );
    assert_eq!(
        sim.capacity_429s(),
        Capacity429s {
            create: 1 + 1 + 1 + 5 + 15,
            ..Capacity429s::default()
        }
    );
    // Retrieve and search have their own buckets (25/s and 20/s).
    let ok = |a: Answer| a.status != 429;
    assert_eq!(
        (0..30)
            .filter(|_| ok(sim.retrieve_in_process("pi_x")))
            .count(),
        25
    );
    assert_eq!(
        (0..30)
            .filter(|_| ok(sim.search_in_process("metadata['operation_id']:'op-1'")))
            .count(),
        20
    );
    let refused = sim.capacity_429s();
    assert_eq!((refused.retrieve, refused.search), (5, 10));
    // Nothing refused was created: 25 + 1 + 5 + 25.
    assert_eq!(sim.ledger().len(), 56);
}

#[test]
fn buckets_follow_an_external_virtual_time_source() {
    let t = Arc::new(AtomicI64::new(T0));
    let source = t.clone();
    let sim = StripeSim::new(SimConfig {
        time_source: Some(Arc::new(move || source.load(Ordering::SeqCst))),
        capacity: Capacity {
            create_per_sec: Some(4),
            ..Capacity::unlimited()
        },
        ..SimConfig::default()
    });
    assert_eq!(passes(&sim, 0, 10), 4);
    t.fetch_add(249, Ordering::SeqCst);
    assert_eq!(passes(&sim, 10, 3), 0, "4/s: a token every 250 ms");
    t.fetch_add(1, Ordering::SeqCst);
    assert_eq!(passes(&sim, 13, 3), 1);
    t.fetch_add(500, Ordering::SeqCst);
    assert_eq!(passes(&sim, 16, 3), 2);
    assert_eq!(sim.capacity_429s().create, 6 + 3 + 2 + 1);
}

#[test]
fn the_account_bucket_caps_the_sum_across_endpoints() {
    let sim = sim_with(Capacity {
        account_per_sec: Some(30),
        ..Capacity::stripe_defaults()
    });
    assert_eq!(passes(&sim, 0, 25), 25);
    let statuses: Vec<u16> = (0..10)
        .map(|_| sim.retrieve_in_process("pi_x").status)
        .collect();
    assert_eq!(statuses.iter().filter(|s| **s == 404).count(), 5);
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 5);
    let searched = sim.search_in_process("metadata['operation_id']:'op-1'");
    assert_eq!(
        searched.status, 429,
        "the account is spent, search's own bucket is full"
    );
    assert_eq!(
        sim.capacity_429s(),
        Capacity429s {
            create: 0,
            retrieve: 5,
            search: 1,
            cancel: 0,
            account: 6,
            ..Capacity429s::default()
        }
    );
    // A refusal by the account took nothing from the endpoint's bucket.
    let tokens = sim.capacity_tokens();
    assert_eq!(tokens.retrieve, Some(20.0));
    assert_eq!(tokens.search, Some(20.0));
    assert_eq!(tokens.account, Some(0.0));
    // 100 ms later: 3 account tokens (30/s), shared by whoever asks first.
    sim.advance(Duration::from_millis(100));
    assert_eq!(sim.retrieve_in_process("pi_x").status, 404);
    assert_eq!(
        sim.search_in_process("metadata['operation_id']:'op-1'")
            .status,
        200
    );
    assert_eq!(
        passes(&sim, 100, 5),
        1,
        "create's bucket regained 2.5, the account 1"
    );
    assert_eq!(sim.capacity_429s().account, 6 + 4);
    // With Stripe's defaults the endpoints (25 + 25 + 20 = 70/s) stay under the account's 100/s.
    let d = sim_with(Capacity::stripe_defaults());
    assert_eq!(passes(&d, 0, 30), 25);
    assert_eq!(
        (0..30)
            .filter(|_| d.retrieve_in_process("pi_x").status == 404)
            .count(),
        25
    );
    assert_eq!(d.capacity_429s().account, 0);
    // Test mode's account limit (25/s) binds before the endpoints do.
    let t = sim_with(Capacity::stripe_test_mode());
    assert_eq!(passes(&t, 0, 20), 20);
    assert_eq!(
        (0..10)
            .filter(|_| t.retrieve_in_process("pi_x").status == 404)
            .count(),
        5
    );
    assert_eq!(t.capacity_429s().account, 5);
}

#[tokio::test]
async fn capacity_429s_have_stripes_shape_and_are_counted_apart_from_the_fault() {
    let h = start_with_capacity(Capacity {
        create_per_sec: Some(2),
        ..Capacity::unlimited()
    })
    .await;
    for n in 0..2 {
        let key = format!("k{n}");
        let r = h.create(Some(&key), &visa(&format!("op{n}"))).await;
        assert_eq!(r.status(), 200);
    }
    let r = h.create(Some("k2"), &visa("op2")).await;
    assert_eq!(r.status(), 429);
    assert_eq!(
        header(&r, "stripe-rate-limited-reason"),
        Some("endpoint-rate")
    );
    assert_eq!(header(&r, "stripe-should-retry"), None);
    assert!(header(&r, "request-id").unwrap().starts_with("req_"));
    let capacity_body: Value = r.json().await.unwrap();
    let e = &capacity_body["error"];
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["code"], "rate_limit");
    assert!(e["message"]
        .as_str()
        .unwrap()
        .starts_with("Request rate limit exceeded."));
    assert_eq!(
        e["doc_url"],
        "https://stripe.com/docs/error-codes/rate-limit"
    );

    // The random fault's 429 (with a token to spare): the same body, counted elsewhere.
    h.sim.advance(Duration::from_millis(500));
    h.sim.push_script([FaultKind::RateLimit]);
    let r = h.create(Some("k2"), &visa("op2")).await;
    assert_eq!(r.status(), 429);
    assert_eq!(header(&r, "stripe-rate-limited-reason"), None);
    let fault_body: Value = r.json().await.unwrap();
    assert_eq!(fault_body, capacity_body);

    // Neither saved anything under the key: it creates now.
    h.sim.advance(Duration::from_millis(500));
    let r = h.create(Some("k2"), &visa("op2")).await;
    assert_eq!(r.status(), 200);
    assert!(!replayed(&r));
    assert_eq!(h.sim.ledger().len(), 3);

    assert_eq!(h.sim.capacity_429s().create, 1);
    assert_eq!(h.sim.injected()[&FaultKind::RateLimit], 1);
    assert_eq!(
        h.sim.request_counts().create,
        5,
        "refused requests are counted too"
    );
    let stats = h.admin_get("stats").await;
    assert_eq!(
        stats["capacity_429s"],
        serde_json::json!({"create":1,"retrieve":0,"search":0,"cancel":0,"capture":0,"refund":0,"refund_read":0,"account":0})
    );
    assert_eq!(stats["injected"]["rate_limit"], 1);
    assert_eq!(h.admin_get("ledger").await["capacity_429s"]["create"], 1);
    assert_eq!(h.admin_get("capacity").await["capacity_429s"]["create"], 1);
}

#[tokio::test]
async fn account_429s_over_http_say_global_rate() {
    let h = start_with_capacity(Capacity {
        account_per_sec: Some(1),
        ..Capacity::unlimited()
    })
    .await;
    assert_eq!(h.create(None, &visa("op")).await.status(), 200);
    let r = h.retrieve("pi_x").await;
    assert_eq!(r.status(), 429);
    assert_eq!(
        header(&r, "stripe-rate-limited-reason"),
        Some("global-rate")
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit");
    assert_eq!(h.sim.capacity_429s().account, 1);
}

#[tokio::test]
async fn admin_api_reads_and_sets_capacity() {
    let h = start().await;
    let v = h.admin_get("capacity").await;
    assert_eq!(
        v["create_per_sec"],
        Value::Null,
        "the library's default: unlimited"
    );
    assert_eq!(v["clock"], "simulated");
    assert_eq!(v["create_latency"], Value::Null);

    let (s, v) = h
        .admin_post("capacity", r#"{"stripe_defaults":true,"create_per_sec":1}"#)
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["create_per_sec"], 1);
    assert_eq!(v["retrieve_per_sec"], 25);
    assert_eq!(v["search_per_sec"], 20);
    assert_eq!(v["account_per_sec"], 100);
    assert_eq!(v["tokens"]["create"], 1.0);
    assert_eq!(h.create(None, &visa("op")).await.status(), 200);
    assert_eq!(h.create(None, &visa("op")).await.status(), 429);
    assert_eq!(h.admin_get("capacity").await["tokens"]["create"], 0.0);

    let (s, v) = h
        .admin_post(
            "capacity",
            r#"{"account_per_sec":null,"clock":"real","create_latency":{"p50_ms":5}}"#,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["account_per_sec"], Value::Null);
    assert_eq!(v["create_per_sec"], 1, "absent fields are kept");
    assert_eq!(v["clock"], "real");
    assert_eq!(v["create_latency"]["p50_ms"], 5);
    assert_eq!(v["create_latency"]["sigma"], CreateLatency::DEFAULT_SIGMA);
    assert_eq!(
        v["tokens"]["create"], 1.0,
        "setting capacity refills the buckets"
    );
    let c = h.sim.capacity();
    assert_eq!(c.clock, CapacityClock::Real);
    assert_eq!(c.create_latency.unwrap().p50, Duration::from_millis(5));

    // Reset keeps the configuration and zeroes the counters.
    let (s, _) = h.admin_post("reset", "").await;
    assert_eq!(s, 200);
    assert_eq!(h.sim.capacity(), c);
    assert_eq!(h.sim.capacity_429s(), Capacity429s::default());

    let (s, v) = h
        .admin_post("capacity", r#"{"unlimited":true,"create_latency":null}"#)
        .await;
    assert_eq!(s, 200, "{v}");
    for f in [
        "create_per_sec",
        "retrieve_per_sec",
        "search_per_sec",
        "account_per_sec",
        "create_latency",
    ] {
        assert_eq!(v[f], Value::Null, "{f}");
    }
    for bad in [
        r#"{"create_per_sec":-1}"#,
        r#"{"create_per_sec":"fast"}"#,
        r#"{"clock":"sundial"}"#,
        r#"{"unlimited":true,"stripe_defaults":true}"#,
        r#"{"create_latency":{"sigma":-1}}"#,
        r#"{"create_latency":{"p99_ms":1}}"#,
        r#"{"bogus":1}"#,
        "{not json",
    ] {
        let (s, v) = h.admin_post("capacity", bad).await;
        assert_eq!(s, 400, "{bad}: {v}");
    }
    assert_eq!(
        h.sim.capacity(),
        Capacity::unlimited().with_clock(CapacityClock::Real)
    );
}

#[tokio::test]
async fn the_binary_limits_on_real_time_with_stripes_defaults() {
    let bin = spawn_binary(&["--create-rps", "10"]).await;
    let base = &bin.base;
    let client = common::client();
    let capacity = get_json(&format!("{base}/_sim/capacity")).await;
    assert_eq!(capacity["create_per_sec"], 10);
    assert_eq!(capacity["retrieve_per_sec"], 25, "Stripe's default");
    assert_eq!(capacity["search_per_sec"], 20, "Stripe's default");
    assert_eq!(
        capacity["account_per_sec"], 100,
        "Stripe's default (live mode)"
    );
    assert_eq!(capacity["clock"], "real");
    assert_eq!(
        capacity["create_latency"],
        Value::Null,
        "no latency by default"
    );

    let create = || {
        client
            .post(format!("{base}/v1/payment_intents"))
            .bearer_auth(stripe_sim::DEFAULT_API_KEY)
            .form(&visa("op-rt"))
            .send()
    };
    let started = Instant::now();
    let mut ok: usize = 0;
    for _ in 0..40 {
        match create().await.unwrap().status().as_u16() {
            200 => ok += 1,
            429 => {}
            s => panic!("unexpected status {s}"),
        }
    }
    let took = started.elapsed();
    // 10 from the full bucket, plus what real time refilled meanwhile (1 per 100 ms).
    let refilled = (took.as_millis() / 100) as usize;
    assert!(
        (10..=13.max(10 + refilled)).contains(&ok),
        "{ok} of 40 passed in {took:?}"
    );
    // The simulated clock did not move; real time refills the bucket: 3 tokens in 300 ms, plus
    // what was left (under 1) and what the next requests' own time refills.
    let paused = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut later: usize = 0;
    for _ in 0..10 {
        if create().await.unwrap().status() == 200 {
            later += 1;
        }
    }
    let most = 1 + (paused.elapsed().as_millis() / 100) as usize;
    assert!(
        (3..=most).contains(&later),
        "{later} passed 300 ms later (at most {most})"
    );
    let stats = get_json(&format!("{base}/_sim/stats")).await;
    assert_eq!(stats["capacity_429s"]["create"], 50 - ok - later);
    assert_eq!(stats["injected"]["rate_limit"], 0);
}

#[tokio::test]
async fn the_binary_flag_unlimited_turns_the_limits_off() {
    let bin = spawn_binary(&["--unlimited", "--create-latency-p50-ms", "1"]).await;
    let v = get_json(&format!("{}/_sim/capacity", bin.base)).await;
    for f in [
        "create_per_sec",
        "retrieve_per_sec",
        "search_per_sec",
        "account_per_sec",
    ] {
        assert_eq!(v[f], Value::Null, "{f}");
    }
    assert_eq!(v["create_latency"]["p50_ms"], 1);
}

#[test]
fn create_latency_is_seeded_and_has_the_configured_median() {
    let with = |seed: u64, p50_ms: u64| {
        StripeSim::new(SimConfig {
            seed,
            capacity: Capacity::unlimited()
                .with_create_latency(CreateLatency::with_p50(Duration::from_millis(p50_ms))),
            ..SimConfig::default()
        })
    };
    let draws = |sim: &StripeSim| -> Vec<Duration> {
        (0..1000)
            .map(|_| sim.next_create_latency().unwrap())
            .collect()
    };
    let a = draws(&with(7, 300));
    assert_eq!(a, draws(&with(7, 300)), "same seed, same sequence");
    assert_ne!(a, draws(&with(8, 300)), "another seed, another sequence");
    for (p50_ms, sample) in [(300, a), (120, draws(&with(3, 120)))] {
        let mut sorted = sample.clone();
        sorted.sort();
        let median = sorted[sorted.len() / 2].as_secs_f64() * 1000.0;
        let want = p50_ms as f64;
        assert!(
            (median - want).abs() <= want * 0.10,
            "median {median:.1} ms, configured {want} ms"
        );
        assert!(sorted[990] > sorted[500] * 2, "a lognormal tail");
    }
}

#[test]
fn in_process_creates_hand_back_their_latency_with_the_key_in_flight() {
    let cfg = |seed| SimConfig {
        seed,
        capacity: Capacity::unlimited().with_create_latency(CreateLatency::default()),
        ..SimConfig::default()
    };
    let sim = StripeSim::new(cfg(11));
    let twin = StripeSim::new(cfg(11));
    let CreateStart::Slow(slow) = sim.create_in_process(Some("k"), visa("op")) else {
        panic!("with create latency on, an executing create is slow");
    };
    let drawn = twin.next_create_latency().unwrap();
    assert_eq!(
        slow.create_latency(),
        Some(drawn),
        "the seeded stream, in request order"
    );
    assert_eq!(slow.latency(), drawn);
    assert!(!slow.is_latency_fault());
    // Meanwhile the key is in flight.
    match sim.create_in_process(Some("k"), visa("op")) {
        CreateStart::Done(Outcome::Answered(a)) => assert_eq!(a.status, 409),
        _ => panic!("a same-key create while the first executes is a 409"),
    }
    match slow.complete() {
        Outcome::Answered(a) => assert_eq!(a.status, 200),
        Outcome::Dropped => panic!("no fault"),
    }
    // A replay does not execute: answered at once, nothing drawn.
    match sim.create_in_process(Some("k"), visa("op")) {
        CreateStart::Done(Outcome::Answered(a)) => assert!(a.replayed),
        _ => panic!("a replay is answered at once"),
    }
    let CreateStart::Slow(second) = sim.create_in_process(Some("k2"), visa("op2")) else {
        panic!("slow");
    };
    assert_eq!(second.create_latency(), twin.next_create_latency());

    // The latency fault adds its own delay on top.
    sim.push_script([FaultKind::Latency]);
    let CreateStart::Slow(third) = sim.create_in_process(Some("k3"), visa("op3")) else {
        panic!("slow");
    };
    let drawn = twin.next_create_latency().unwrap();
    assert!(third.is_latency_fault());
    assert_eq!(third.latency(), sim.faults().latency + drawn);
    drop((second, third));
}

#[tokio::test]
async fn the_http_server_sleeps_the_create_latency_with_the_key_in_flight() {
    let h = start_with_capacity(Capacity::unlimited().with_create_latency(CreateLatency {
        p50: Duration::from_millis(300),
        sigma: 0.0,
    }))
    .await;
    let form = visa("op");
    let started = Instant::now();
    let (first, second) = tokio::join!(h.create(Some("k"), &form), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.create(Some("k"), &form).await
    });
    assert_eq!(first.status(), 200);
    assert_eq!(
        second.status(),
        409,
        "the key is in flight during the latency"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
}
