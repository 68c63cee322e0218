//! The table BENCHMARKS.md opens with: every target the project has set itself, what this run
//! measured against it, and whether it is met. Each row is computed from the same reports as the
//! section it summarises; a step left out of the run reads "not measured in this run".

use std::path::Path;

use serde_json::Value;

use crate::burst::{BurstRun, Role};
use crate::index_cost::IndexRow;
use crate::markdown::{rows_string, thousands};
use crate::records::{f, u, WireRow};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One target: what was promised, and what the run measured (`None`: not measured).
pub struct Target {
    pub what: String,
    pub measured: Option<(String, bool)>,
}

impl Target {
    fn new(what: &str, measured: Option<(String, bool)>) -> Self {
        Self {
            what: what.to_owned(),
            measured,
        }
    }
}

/// The rows of the "target | measured | met" table.
pub fn table(targets: &[Target]) -> String {
    rows_string(targets.iter().map(|t| match &t.measured {
        Some((m, met)) => vec![
            t.what.clone(),
            m.clone(),
            if *met { "yes" } else { "**no**" }.to_owned(),
        ],
        None => vec![
            t.what.clone(),
            "not measured in this run".into(),
            "—".into(),
        ],
    }))
}

/// Section 1's two: the happy path and the settled duplicate, counted on the wire.
pub fn requests(rows: &[WireRow]) -> Result<Vec<Target>, Error> {
    let scenario = |name: &str| {
        rows.iter()
            .find(|r| r.scenario == name)
            .map(|r| &r.ours)
            .ok_or_else(|| format!("wire.json has no {name} scenario"))
    };
    let (ho, dup) = (scenario("HappyPath")?, scenario("SettledDuplicate")?);
    let happy = format!(
        "{} writes, {} reads, {} SendMessage, {} Stripe",
        ho.dynamodb_writes(),
        ho.dynamodb_reads(),
        ho.sqs.get("SendMessage"),
        ho.stripe.total()
    );
    let happy_ok = ho.dynamodb_writes() == 3
        && ho.dynamodb_reads() == 0
        && ho.sqs.get("SendMessage") == 1
        && ho.sqs.total() == 1
        && ho.stripe.total() == 1;
    let duplicate = format!(
        "{} DynamoDB, {} Stripe",
        dup.dynamodb.total(),
        dup.stripe.total()
    );
    let dup_ok = dup.dynamodb.total() == 1 && dup.stripe.total() == 0;
    let refund = rows.iter().find(|r| r.scenario == "Refund").map(|r| {
        let o = &r.ours;
        let requests = |c: &crate::wire::scenarios::Counts| c.dynamodb.total();
        (
            format!(
                "{} DynamoDB requests ({} a read), {} SendMessage, {} Stripe; the charge's: {}",
                requests(o),
                o.dynamodb_reads(),
                o.sqs.get("SendMessage"),
                o.stripe.total(),
                requests(ho)
            ),
            requests(o) <= requests(ho)
                && o.dynamodb_reads() <= ho.dynamodb_reads()
                && o.sqs.total() <= ho.sqs.total()
                && o.stripe.total() <= ho.stripe.total(),
        )
    });
    Ok(vec![
        Target::new(
            "happy path: 3 DynamoDB writes, 0 reads, 1 SQS send, 1 Stripe call (section 1)",
            Some((happy, happy_ok)),
        ),
        Target::new(
            "a refund: as lean as the charge's happy path (section 1)",
            refund,
        ),
        Target::new(
            "settled duplicate: 1 DynamoDB call, 0 Stripe calls (section 1)",
            Some((duplicate, dup_ok)),
        ),
    ])
}

/// Section 3: the proof's speed, on the run with every fault (one thread, so CPU seconds).
pub fn throughput(faults: &Value) -> Target {
    let measured = (!faults.is_null()).then(|| {
        let per_cpu_s = u(&faults["orders"]) as f64 / f(&faults["cpu_secs"]).max(1e-9);
        (
            format!(
                "{} orders per CPU s at {} orders",
                thousands(per_cpu_s.round() as u64),
                thousands(u(&faults["orders"]))
            ),
            per_cpu_s >= 33_000.0 && u(&faults["orders"]) >= 1_000_000,
        )
    });
    Target::new(
        "the simulation, every fault: 1,000,000 orders at ≥ 33,000 orders per CPU second (section 3)",
        measured,
    )
}

/// Section 4: every function starts (x86-64 host, release build) within 30 ms, median.
pub fn init(footprints: &[Value]) -> Target {
    let release = footprints.iter().find(|fp| fp["profile"] == "release");
    let slowest = release.and_then(|fp| {
        fp["functions"]
            .as_array()?
            .iter()
            .max_by(|a, b| f(&a["init"]["median_ms"]).total_cmp(&f(&b["init"]["median_ms"])))
    });
    let measured = slowest.map(|x| {
        let ms = f(&x["init"]["median_ms"]);
        (
            format!(
                "slowest {}: {ms:.1} ms",
                x["function"].as_str().unwrap_or("?")
            ),
            ms <= 30.0,
        )
    });
    Target::new(
        "init ≤ 30 ms, every function (median, x86-64 host; section 4)",
        measured,
    )
}

/// Section 5: Lambda + DynamoDB + SQS per 1M charges at full batches.
pub fn cost(charge_path: Option<f64>) -> Target {
    Target::new(
        "Lambda + DynamoDB + SQS ≤ $4.00 per 1M charges at full batches (section 5)",
        charge_path.map(|c| (format!("${c:.2}"), c <= 4.0)),
    )
}

/// Section 6: a tick's reads do not grow with the settled operations beside the unsettled ones.
pub fn reads(index: &[IndexRow]) -> Target {
    let units = |settled: usize| {
        index
            .iter()
            .filter(|r| r.unsettled == 1_000)
            .find(|r| r.settled == settled)
            .map(|r| r.read_units)
    };
    let measured = match (units(1_000), units(10_000)) {
        (Some(small), Some(large)) => Some((
            format!("1,000 unsettled: {small:.1} read units among 1,000 settled, {large:.1} among 10,000"),
            // Within 1 %: the index entries' sizes round to read units differently; a Scan
            // reads ten times as much.
            large <= small * 1.01,
        )),
        _ => None,
    };
    Target::new(
        "a reconciler tick's reads do not grow with settled operations (within 1 %; section 6)",
        measured,
    )
}

/// Section 7: the reference burst as the functions ship (the paced runs), and below the limit.
pub fn burst(runs: &[(BurstRun, Option<Value>)]) -> Vec<Target> {
    let paced: Vec<&Value> = runs
        .iter()
        .filter(|(r, _)| r.role == Role::Paced)
        .filter_map(|(_, v)| Some(&v.as_ref()?["load"]))
        .collect();
    let worst = |key: &str| {
        (!paced.is_empty()).then(|| paced.iter().map(|l| f(&l[key])).fold(0.0, f64::max))
    };
    let ideal = paced.first().map(|l| f(&l["ideal_drain_secs"]));
    let of_ideal = |key: &str, limit: f64| {
        let (worst, ideal) = (worst(key)?, ideal?);
        let ratio = worst / ideal.max(1e-9);
        Some((
            format!("{ratio:.3} × N/L (worst of {} seeds)", paced.len()),
            ratio <= limit,
        ))
    };
    let below = runs
        .iter()
        .find(|(r, v)| r.role == Role::BelowLimit && v.is_some())
        .and_then(|(_, v)| Some(&v.as_ref()?["load"]));
    vec![
        Target::new(
            "reference burst drains in ≤ 1.15 × N/L (section 7)",
            of_ideal("drain_secs", 1.15),
        ),
        Target::new(
            "reference burst: p99 checkout → settled ≤ 1.2 × N/L (section 7)",
            of_ideal("latency_p99_secs", 1.2),
        ),
        Target::new(
            "reference burst: 0 orders wait a visibility timeout (section 7)",
            worst("waited_visibility_timeout").map(|w| (format!("{w:.0}"), w == 0.0)),
        ),
        Target::new(
            "reference burst: ≤ 1.05 Stripe creates per charge (section 7)",
            worst("creates_per_charge").map(|c| (format!("{c:.4}"), c <= 1.05)),
        ),
        Target::new(
            "below the limit: p99 checkout → settled ≤ the slowest Stripe call + 1 s (section 7)",
            below.map(|l| {
                let (p99, slowest) = (f(&l["latency_p99_secs"]), f(&l["max_create_latency_secs"]));
                (
                    format!("p99 {p99:.2} s, slowest call {slowest:.2} s"),
                    p99 <= slowest + 1.0,
                )
            }),
        ),
    ]
}

/// Every target, from the run's output directory.
pub fn all(
    dir: &Path,
    rows: &[WireRow],
    index: &[IndexRow],
    faults: &Value,
    footprints: &[Value],
    charge_path: Option<f64>,
) -> Result<Vec<Target>, Error> {
    let mut out = requests(rows)?;
    out.push(throughput(faults));
    out.push(init(footprints));
    out.push(cost(charge_path));
    out.push(reads(index));
    out.extend(burst(&crate::burst::read_reports(dir)?));
    Ok(out)
}
