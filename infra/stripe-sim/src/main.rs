//! `stripe-sim` binary: serves the simulator on 127.0.0.1 until SIGINT/SIGTERM.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use stripe_sim::{
    Capacity, CapacityClock, CreateLatency, DeliveryMode, SimConfig, StripeSim, WebhookConfig,
};

const USAGE: &str = "usage: stripe-sim [--port N] [--api-key KEY] [--seed N] \
[--search-lag-secs N] [--processing-settle-secs N] [--refund-settle-secs N] \
[--uncaptured-expiry-secs N] [--dispute-delay-secs N] [--dispute-window-secs N] \
[--dispute-review-secs N] [--latency-ms N] [--api-version V] [--webhook-api-version V] \
[--webhook-url URL --webhook-secret whsec_...] [--event-delivery webhook|eventbridge] \
[--event-source aws.partner/stripe.com/...] \
[--create-rps N] [--retrieve-rps N] [--search-rps N] [--capture-rps N] [--refund-rps N] \
[--refund-read-rps N] \
[--account-rps N] [--unlimited] \
[--capacity-clock real|simulated] [--create-latency-p50-ms N] [--create-latency-sigma X]

  --port N                     port on 127.0.0.1 (0 = ephemeral, default 12111)
  --api-key KEY                accepted secret key (default sk_test_charge_once)
  --seed N                     seed for fault decisions and ids (default 0)
  --search-lag-secs N          search visibility lag, simulated (default 30)
  --processing-settle-secs N   processing -> final status, simulated (default 600)
  --refund-settle-secs N       pending refund -> succeeded, late refund failure, simulated (default 600)
  --uncaptured-expiry-secs N   an uncaptured (capture_method=manual) PaymentIntent is canceled this
                               long after creation, or at its card's capture_before if earlier
                               (default 604800: 7 days)
  --dispute-delay-secs N       a dispute test card's charge -> its dispute, simulated (default 0)
  --dispute-window-secs N      a dispute's creation -> its evidence_details.due_by, simulated
                               (default 604800: 7 days, the shortest of Stripe's response windows)
  --dispute-review-secs N      submitted evidence -> won/lost, simulated (default 3600)
  --latency-ms N               real sleep of the `latency` fault (default 12000)
  --api-version V              the account's default API version, for requests without a
                               Stripe-Version header and Stripe's own actions (default 2024-06-20;
                               from 2025-03-31 on a lapse says `expired` and no refund is made of
                               an authorization's released part)
  --webhook-api-version V      the endpoint's API version, what events are written in (default
                               2024-06-20)
  --webhook-url URL            send webhook events to this loopback URL (also POST /_sim/webhooks)
  --webhook-secret SECRET      the endpoint's signing secret (whsec_...; or STRIPE_SIM_WEBHOOK_SECRET)
  --event-delivery MODE        webhook (signed POST, default) or eventbridge (the event as the detail
                               of an EventBridge envelope, unsigned; no secret needed)
  --event-source NAME          eventbridge: the envelope's source (default
                               aws.partner/stripe.com/ed_test_61SimulatedDestination)
  --create-rps N               POST /v1/payment_intents limit, requests/s (default 25; `unlimited`)
  --retrieve-rps N             GET /v1/payment_intents/{id} limit (default 25; `unlimited`)
  --search-rps N               GET /v1/payment_intents/search limit (default 20; `unlimited`)
  --capture-rps N              POST /v1/payment_intents/{id}/capture limit (default 25; `unlimited`)
  --refund-rps N               POST /v1/refunds (and its cancel) limit (default 25; `unlimited`)
  --refund-read-rps N          GET /v1/refunds/{id} and GET /v1/refunds together (default 25)
  --account-rps N              the account's overall limit (default 100, Stripe's live mode; 25 is
                               test mode's; `unlimited`). Over a limit: 429 rate_limit
  --unlimited                  no rate limit at all (later --*-rps flags still apply)
  --capacity-clock CLOCK       what refills the buckets: real (default) or simulated time
  --create-latency-p50-ms N    creates take a seeded lognormal time with this median (real sleep,
                               key in flight); off by default
  --create-latency-sigma X     its spread, sd of ln(latency) (default 0.6; turns latency on)";

struct Args {
    port: u16,
    cfg: SimConfig,
    webhooks: WebhookConfig,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        port: 12111,
        cfg: SimConfig {
            // Stripe's documented limits, on real time: the simulated clock moves only when
            // advanced. No create latency unless asked for (tests would slow down).
            capacity: Capacity::stripe_defaults().with_clock(CapacityClock::Real),
            ..SimConfig::default()
        },
        webhooks: WebhookConfig {
            // A secret in the environment keeps it out of `ps` output.
            secret: std::env::var("STRIPE_SIM_WEBHOOK_SECRET")
                .ok()
                .filter(|s| !s.is_empty()),
            ..WebhookConfig::default()
        },
    };
    while let Some(flag) = args.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.clone(), None),
        };
        if name == "--help" || name == "-h" {
            return Err(String::new());
        }
        if name == "--unlimited" {
            if inline.is_some() {
                return Err("--unlimited takes no value".into());
            }
            let c = &mut out.cfg.capacity;
            c.create_per_sec = None;
            c.retrieve_per_sec = None;
            c.search_per_sec = None;
            c.cancel_per_sec = None;
            c.capture_per_sec = None;
            c.refund_per_sec = None;
            c.refund_read_per_sec = None;
            c.account_per_sec = None;
            continue;
        }
        let value = match inline.or_else(|| args.next()) {
            Some(v) => v,
            None => return Err(format!("missing value for {name}")),
        };
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("invalid number for {name}: {v}"))
        };
        let rps = |v: &str| -> Result<Option<u32>, String> {
            if v == "unlimited" {
                return Ok(None);
            }
            v.parse::<u32>()
                .map(Some)
                .map_err(|_| format!("invalid rate for {name}: {v} (requests/s, or unlimited)"))
        };
        match name.as_str() {
            "--create-rps" => out.cfg.capacity.create_per_sec = rps(&value)?,
            "--retrieve-rps" => out.cfg.capacity.retrieve_per_sec = rps(&value)?,
            "--search-rps" => out.cfg.capacity.search_per_sec = rps(&value)?,
            "--capture-rps" => out.cfg.capacity.capture_per_sec = rps(&value)?,
            "--refund-rps" => out.cfg.capacity.refund_per_sec = rps(&value)?,
            "--refund-read-rps" => out.cfg.capacity.refund_read_per_sec = rps(&value)?,
            "--account-rps" => out.cfg.capacity.account_per_sec = rps(&value)?,
            "--capacity-clock" => out.cfg.capacity.clock = value.parse()?,
            "--create-latency-p50-ms" => {
                latency(&mut out.cfg.capacity).p50 = Duration::from_millis(num(&value)?)
            }
            "--create-latency-sigma" => {
                let sigma = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| format!("invalid sigma for {name}: {value}"))?;
                latency(&mut out.cfg.capacity).sigma = sigma
            }
            "--port" => {
                out.port = value
                    .parse()
                    .map_err(|_| format!("invalid port: {value}"))?
            }
            "--api-key" => out.cfg.api_key = value,
            "--seed" => out.cfg.seed = num(&value)?,
            "--search-lag-secs" => out.cfg.search_lag = Duration::from_secs(num(&value)?),
            "--processing-settle-secs" => {
                out.cfg.processing_settle = Duration::from_secs(num(&value)?)
            }
            "--refund-settle-secs" => out.cfg.refund_settle = Duration::from_secs(num(&value)?),
            "--uncaptured-expiry-secs" => {
                out.cfg.uncaptured_expiry = Duration::from_secs(num(&value)?)
            }
            "--dispute-delay-secs" => out.cfg.disputes.delay_ms = secs_ms(num(&value)?),
            "--dispute-window-secs" => out.cfg.disputes.response_window_ms = secs_ms(num(&value)?),
            "--dispute-review-secs" => out.cfg.disputes.review_ms = secs_ms(num(&value)?),
            "--latency-ms" => out.cfg.faults.latency = Duration::from_millis(num(&value)?),
            "--api-version" => {
                out.cfg.api_version =
                    stripe_sim::version::ApiVersion::parse(&value).map_err(|e| e.message)?
            }
            "--webhook-api-version" => {
                stripe_sim::version::ApiVersion::parse(&value).map_err(|e| e.message)?;
                out.webhooks.api_version = Some(value)
            }
            "--webhook-url" => {
                stripe_sim::webhooks::check_url(&value)?;
                out.webhooks.url = Some(value)
            }
            "--webhook-secret" => {
                if !value.starts_with("whsec_") {
                    return Err("--webhook-secret must be a whsec_ secret".into());
                }
                out.webhooks.secret = Some(value)
            }
            "--event-delivery" => out.webhooks.mode = value.parse()?,
            "--event-source" => out.webhooks.event_source = Some(value),
            _ => return Err(format!("unknown flag: {name}")),
        }
    }
    Ok(out)
}

/// The create latency, turned on with the defaults if it was off.
/// Whole seconds as milliseconds (saturating).
fn secs_ms(secs: u64) -> i64 {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)
}

fn latency(c: &mut Capacity) -> &mut CreateLatency {
    c.create_latency.get_or_insert_with(CreateLatency::default)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            if msg.is_empty() {
                let _ = writeln!(std::io::stdout(), "{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("stripe-sim: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let sim = StripeSim::new(args.cfg);
    if args.webhooks.url.is_some()
        && args.webhooks.secret.is_none()
        && args.webhooks.mode == DeliveryMode::Webhook
    {
        eprintln!(
            "stripe-sim: --webhook-url needs --webhook-secret (or STRIPE_SIM_WEBHOOK_SECRET), \
             or --event-delivery eventbridge"
        );
        return ExitCode::from(2);
    }
    if let Err(e) = sim.set_webhooks(args.webhooks) {
        eprintln!("stripe-sim: {e}");
        return ExitCode::from(2);
    }
    let running = match sim.start(args.port).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stripe-sim: cannot bind 127.0.0.1:{}: {e}", args.port);
            return ExitCode::FAILURE;
        }
    };
    // A closed stdout must not kill the server (no println!: it panics on EPIPE).
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on {}", running.addr);
    let _ = out.flush();
    wait_for_signal().await;
    running.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Args, String> {
        parse_args(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn api_versions_are_flags_and_a_bad_one_is_refused() {
        let a = parse(&[
            "--api-version",
            "2026-09-30.endive",
            "--webhook-api-version",
            "2026-09-30.endive",
        ])
        .unwrap();
        assert_eq!(a.cfg.api_version.as_str(), "2026-09-30.endive");
        assert_eq!(a.webhooks.api_version.as_deref(), Some("2026-09-30.endive"));
        assert_eq!(parse(&[]).unwrap().cfg.api_version.as_str(), "2024-06-20");
        for flag in ["--api-version", "--webhook-api-version"] {
            let Err(err) = parse(&[flag, "latest"]) else {
                panic!("{flag} latest is refused")
            };
            assert!(err.contains("Invalid Stripe API version"), "{err}");
        }
    }

    #[test]
    fn flags() {
        let a = parse(&["--port", "0", "--seed=7", "--search-lag-secs", "5"]).unwrap();
        assert_eq!(a.port, 0);
        assert_eq!(a.cfg.seed, 7);
        assert_eq!(a.cfg.search_lag, Duration::from_secs(5));
        assert!(parse(&["--port"]).is_err());
        assert!(parse(&["--port", "x"]).is_err());
        assert!(parse(&["--bogus", "1"]).is_err());
        let e = parse(&[
            "--event-delivery",
            "eventbridge",
            "--event-source",
            "aws.partner/stripe.com/ed_x",
        ])
        .unwrap();
        assert_eq!(e.webhooks.mode, DeliveryMode::EventBridge);
        assert_eq!(e.webhooks.event_source(), "aws.partner/stripe.com/ed_x");
        assert!(parse(&["--event-delivery", "carrier-pigeon"]).is_err());
    }

    #[test]
    fn capacity_flags() {
        let d = parse(&[]).unwrap().cfg.capacity;
        assert_eq!(
            d,
            Capacity::stripe_defaults().with_clock(CapacityClock::Real),
            "the binary defaults to Stripe's documented limits, on real time, no latency"
        );
        let a = parse(&[
            "--unlimited",
            "--create-rps",
            "3",
            "--search-rps=unlimited",
            "--capacity-clock",
            "simulated",
            "--create-latency-p50-ms",
            "120",
        ])
        .unwrap()
        .cfg
        .capacity;
        assert_eq!(a.create_per_sec, Some(3));
        assert_eq!(a.retrieve_per_sec, None);
        assert_eq!(a.search_per_sec, None);
        assert_eq!(a.account_per_sec, None);
        assert_eq!(a.clock, CapacityClock::Simulated);
        assert_eq!(
            a.create_latency,
            Some(CreateLatency::with_p50(Duration::from_millis(120)))
        );
        let s = parse(&["--account-rps", "25", "--create-latency-sigma", "0"])
            .unwrap()
            .cfg
            .capacity;
        assert_eq!(s.account_per_sec, Some(25));
        assert_eq!(s.create_latency.unwrap().sigma, 0.0);
        assert_eq!(s.create_latency.unwrap().p50, CreateLatency::DEFAULT_P50);
        let r = parse(&[
            "--refund-rps",
            "7",
            "--refund-read-rps=unlimited",
            "--refund-settle-secs",
            "90",
        ])
        .unwrap()
        .cfg;
        assert_eq!(
            (r.capacity.refund_per_sec, r.capacity.refund_read_per_sec),
            (Some(7), None)
        );
        assert_eq!(r.refund_settle, Duration::from_secs(90));
        let timing = parse(&[
            "--dispute-delay-secs",
            "60",
            "--dispute-window-secs",
            "86400",
            "--dispute-review-secs",
            "5",
        ])
        .unwrap()
        .cfg
        .disputes;
        assert_eq!(
            (timing.delay_ms, timing.response_window_ms, timing.review_ms),
            (60_000, 86_400_000, 5_000)
        );
        assert!(parse(&["--dispute-window-secs", "soon"]).is_err());
        let m = parse(&["--capture-rps", "3", "--uncaptured-expiry-secs", "3600"])
            .unwrap()
            .cfg;
        assert_eq!(m.capacity.capture_per_sec, Some(3));
        assert_eq!(m.uncaptured_expiry, Duration::from_secs(3600));
        assert_eq!(d.capture_per_sec, Some(Capacity::STRIPE_ENDPOINT_PER_SEC));
        assert_eq!(
            (a.capture_per_sec, a.cancel_per_sec),
            (None, None),
            "--unlimited lifts the capture and cancel buckets too"
        );
        assert_eq!(d.refund_per_sec, Some(Capacity::STRIPE_ENDPOINT_PER_SEC));
        assert_eq!(
            a.refund_per_sec, None,
            "--unlimited lifts the refund buckets too"
        );
        for bad in [
            &["--refund-rps", "many"][..],
            &["--create-rps", "-1"],
            &["--create-rps", "lots"],
            &["--unlimited=yes"],
            &["--capacity-clock", "sundial"],
            &["--create-latency-sigma", "-0.5"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
