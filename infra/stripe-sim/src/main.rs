//! `stripe-sim` binary: serves the simulator on 127.0.0.1 until SIGINT/SIGTERM.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use stripe_sim::{DeliveryMode, SimConfig, StripeSim, WebhookConfig};

const USAGE: &str = "usage: stripe-sim [--port N] [--api-key KEY] [--seed N] \
[--search-lag-secs N] [--processing-settle-secs N] [--latency-ms N] \
[--webhook-url URL --webhook-secret whsec_...] [--event-delivery webhook|eventbridge] \
[--event-source aws.partner/stripe.com/...]

  --port N                     port on 127.0.0.1 (0 = ephemeral, default 12111)
  --api-key KEY                accepted secret key (default sk_test_charge_once)
  --seed N                     seed for fault decisions and ids (default 0)
  --search-lag-secs N          search visibility lag, simulated (default 30)
  --processing-settle-secs N   processing -> final status, simulated (default 600)
  --latency-ms N               real sleep of the `latency` fault (default 12000)
  --webhook-url URL            send webhook events to this loopback URL (also POST /_sim/webhooks)
  --webhook-secret SECRET      the endpoint's signing secret (whsec_...; or STRIPE_SIM_WEBHOOK_SECRET)
  --event-delivery MODE        webhook (signed POST, default) or eventbridge (the event as the detail
                               of an EventBridge envelope, unsigned; no secret needed)
  --event-source NAME          eventbridge: the envelope's source (default
                               aws.partner/stripe.com/ed_test_61SimulatedDestination)";

struct Args {
    port: u16,
    cfg: SimConfig,
    webhooks: WebhookConfig,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        port: 12111,
        cfg: SimConfig::default(),
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
        let value = match inline.or_else(|| args.next()) {
            Some(v) => v,
            None => return Err(format!("missing value for {name}")),
        };
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("invalid number for {name}: {v}"))
        };
        match name.as_str() {
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
            "--latency-ms" => out.cfg.faults.latency = Duration::from_millis(num(&value)?),
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
}
