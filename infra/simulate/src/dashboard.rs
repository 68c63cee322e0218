//! The operator's dashboard drawn from a simulation run (`simulate --dashboard PATH.svg`): the
//! template's `OperatorDashboard`, widget by widget, each series drawn from the EMF lines the
//! real handlers emitted during the run (the charge function, the reconciler's ticks, the
//! events function, checkout and the audit), on the run's virtual clock. What the picture in
//! the docs shows is what the template's dashboard would show for that run.
//!
//! The lines are kept on a [`MetricsTape`]: every metric of every line under each of its
//! dimension sets, with its time. A series that is SQS's own (`AWS/SQS`) is not simulated: its
//! legend says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use charge_once::ports::MetricsSink;
use serde_json::Value;

/// A metric's identity: its name and its dimensions (sorted).
type SeriesKey = (String, Vec<(String, String)>);

/// Every metric value the run emitted, by name and dimensions, with its time (virtual ms).
#[derive(Default)]
pub struct MetricsTape {
    series: Mutex<BTreeMap<SeriesKey, Vec<(i64, f64)>>>,
}

impl MetricsTape {
    /// Keeps one EMF line: each metric under each of its dimension sets, as CloudWatch files it.
    pub fn record(&self, line: &str) {
        let Some(v) = charge_once::telemetry::parse_emf(line) else {
            return;
        };
        let at = v["_aws"]["Timestamp"].as_i64().unwrap_or(0);
        let Some(cw) = v["_aws"]["CloudWatchMetrics"].get(0) else {
            return;
        };
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        for dims in cw["Dimensions"].as_array().into_iter().flatten() {
            let mut key_dims: Vec<(String, String)> = dims
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| {
                    let k = d.as_str()?;
                    Some((k.to_owned(), v[k].as_str()?.to_owned()))
                })
                .collect();
            key_dims.sort();
            for m in cw["Metrics"].as_array().into_iter().flatten() {
                let Some(name) = m["Name"].as_str() else {
                    continue;
                };
                if let Some(value) = v[name].as_f64() {
                    series
                        .entry((name.to_owned(), key_dims.clone()))
                        .or_default()
                        .push((at, value));
                }
            }
        }
    }

    fn points(&self, key: &SeriesKey) -> Vec<(i64, f64)> {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series.get(key).cloned().unwrap_or_default()
    }

    /// The keys of every series named `name` whose dimension names are `dims` (sorted).
    fn matching(&self, name: &str, dims: &[String]) -> Vec<SeriesKey> {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series
            .keys()
            .filter(|(n, d)| n == name && d.iter().map(|(k, _)| k).eq(dims.iter()))
            .cloned()
            .collect()
    }

    /// How many series were kept (the report's line).
    pub fn len(&self) -> usize {
        self.series.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A sink that hands each line to `inner` and keeps it on the tape.
pub struct Taped {
    pub inner: Arc<dyn MetricsSink>,
    pub tape: Option<Arc<MetricsTape>>,
}

impl MetricsSink for Taped {
    fn emit(&self, line: String) {
        if let Some(tape) = &self.tape {
            tape.record(&line);
        }
        self.inner.emit(line);
    }
}

/// `inner`, taped when there is a tape.
pub fn taped(inner: Arc<dyn MetricsSink>, tape: &Option<Arc<MetricsTape>>) -> Arc<dyn MetricsSink> {
    match tape {
        Some(_) => Arc::new(Taped {
            inner,
            tape: tape.clone(),
        }),
        None => inner,
    }
}

/// The template's dashboard body, its `${…}` substituted: the Stripe budget as the template's
/// default, anything else (the region, a queue's name) as a placeholder.
pub fn template_widgets(template: &str) -> Result<Vec<Value>, String> {
    let t: serde_norway::Value =
        serde_norway::from_str(template).map_err(|e| format!("template.yaml: {e}"))?;
    let plain = |v: &serde_norway::Value| -> serde_norway::Value {
        match v {
            serde_norway::Value::Tagged(t) => t.value.clone(),
            other => other.clone(),
        }
    };
    let body = plain(&t["Resources"]["OperatorDashboard"]["Properties"]["DashboardBody"]);
    let text = match &body {
        serde_norway::Value::Sequence(parts) => parts.first().and_then(|p| p.as_str()),
        other => other.as_str(),
    }
    .ok_or("template.yaml has no OperatorDashboard body")?
    .to_owned();
    let budget = t["Parameters"]["StripeRequestsPerSecond"]["Default"]
        .as_u64()
        .unwrap_or(24);
    let mut text = text.replace("${StripeRequestsPerSecond}", &budget.to_string());
    while let Some(i) = text.find("${") {
        let end = text[i..].find('}').map_or(text.len(), |e| i + e + 1);
        text.replace_range(i..end, "-");
    }
    let json: Value =
        serde_json::from_str(&text).map_err(|e| format!("the dashboard body: {e}"))?;
    json["widgets"]
        .as_array()
        .cloned()
        .ok_or_else(|| "the dashboard has no widgets".to_owned())
}

/// One drawn series: its label, its axis, its points (bucket start ms, value).
struct Drawn {
    label: String,
    right: bool,
    points: Vec<(i64, f64)>,
}

/// The values of `points` per bucket of `width` ms from `start`: the sum (rescaled to the
/// widget's period, so a per-minute sum stays per minute in wider buckets) or the maximum.
fn bucketed(
    points: &[(i64, f64)],
    start: i64,
    width: i64,
    period_ms: i64,
    sum: bool,
) -> Vec<(i64, f64)> {
    let mut b: BTreeMap<i64, f64> = BTreeMap::new();
    for (at, v) in points {
        let k = start + (at - start).div_euclid(width) * width;
        let e = b.entry(k).or_insert(if sum { 0.0 } else { f64::MIN });
        *e = if sum { *e + v } else { e.max(*v) };
    }
    let scale = if sum {
        period_ms as f64 / width as f64
    } else {
        1.0
    };
    b.into_iter().map(|(k, v)| (k, v * scale)).collect()
}

/// The dashboard's SVG, in parts (see its first lines).
const TEMPLATE: &str = include_str!("../templates/dashboard.svg");

/// The part `part` of [`TEMPLATE`] with each `{{key}}` replaced by its value in `values`; a key
/// without one stays as it is (the test finds none).
fn fill(part: &str, values: &[(&str, &dyn std::fmt::Display)]) -> String {
    let marker = format!("<!-- part: {part} -->\n");
    let text = TEMPLATE.split_once(marker.as_str()).map_or("", |(_, r)| r);
    let mut rest = &text[..text.find("<!-- part: ").unwrap_or(text.len())];
    let mut out = String::new();
    while let Some((before, (key, after))) = rest
        .split_once("{{")
        .and_then(|(b, a)| Some((b, a.split_once("}}")?)))
    {
        out.push_str(before);
        match values.iter().find(|(k, _)| *k == key) {
            Some((_, v)) => write!(out, "{v}"),
            None => write!(out, "{{{{{key}}}}}"),
        }
        .unwrap_or_default();
        rest = after;
    }
    out + rest
}

/// Draws the widgets from the tape over `[start, end]` (virtual ms) as one SVG.
pub fn render(widgets: &[Value], tape: &MetricsTape, start: i64, end: i64, title: &str) -> String {
    let span = (end - start).max(60_000);
    let height = 50 + widgets.len().div_ceil(2) * 290;
    let mut svg = fill(
        "svg",
        &[
            ("width", &1230),
            ("height", &height),
            ("title", &esc(title)),
        ],
    );
    for (i, w) in widgets.iter().enumerate() {
        let at = (10 + (i % 2) * 610, 40 + (i / 2) * 290);
        let (drawn, not_simulated) = series(&w["properties"], tape, start, span);
        svg += &panel(&w["properties"], &drawn, &not_simulated, start, span, at);
    }
    svg + "</svg>\n"
}

/// A panel's plot area in it (x, y, width, height): the template's.
const PLOT: (f64, f64, f64, f64) = (55.0, 28.0, 490.0, 175.0);

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// A widget's series (`p`: its properties) as the tape has them over `span` ms from `start`,
/// and the labels of those that are SQS's own (not simulated).
fn series(p: &Value, tape: &MetricsTape, start: i64, span: i64) -> (Vec<Drawn>, Vec<String>) {
    let period_ms = p["period"].as_i64().unwrap_or(300) * 1000;
    let widget_stat = p["stat"].as_str().unwrap_or("Maximum");
    // About 150 buckets across the run, each a whole number of the widget's periods.
    let width_ms = ((span / 150).max(period_ms) / period_ms).max(1) * period_ms;
    let mut by_id: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    let mut drawn: Vec<Drawn> = Vec::new();
    let mut not_simulated = Vec::new();
    let metrics = p["metrics"].as_array().cloned().unwrap_or_default();
    // Plain metrics first (an expression reads them by id).
    for m in &metrics {
        let Some(parts) = m.as_array() else { continue };
        if parts.first().and_then(|v| v.get("expression")).is_some() {
            continue;
        }
        let opts = parts
            .last()
            .filter(|o| o.is_object())
            .cloned()
            .unwrap_or(Value::Null);
        let ns = parts[0].as_str().unwrap_or("");
        let name = parts
            .get(1)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let label = opts["label"].as_str().unwrap_or(&name).to_owned();
        if ns != "ChargeOnce" {
            not_simulated.push(label);
            continue;
        }
        let mut dims: Vec<(String, String)> = parts[2..]
            .chunks(2)
            .filter_map(|c| {
                Some((
                    c.first()?.as_str()?.to_owned(),
                    c.get(1)?.as_str()?.to_owned(),
                ))
            })
            .collect();
        dims.sort();
        let sum = opts["stat"].as_str().unwrap_or(widget_stat) == "Sum";
        let points = bucketed(&tape.points(&(name, dims)), start, width_ms, period_ms, sum);
        if let Some(id) = opts["id"].as_str() {
            by_id.insert(id.to_owned(), points.clone());
        }
        if opts["visible"] != Value::Bool(false) {
            drawn.push(Drawn {
                label,
                right: opts["yAxis"] == "right",
                points,
            });
        }
    }
    for m in &metrics {
        let Some(e) = m.get(0).filter(|v| v.get("expression").is_some()) else {
            continue;
        };
        let expr = e["expression"].as_str().unwrap_or("");
        let label = e["label"].as_str().unwrap_or(expr).to_owned();
        if let Some(schema) = expr.split_once("SEARCH('{").map(|(_, r)| r) {
            let (keys, rest) = schema.split_once('}').unwrap_or(("", ""));
            let mut keys: Vec<String> = keys
                .split(',')
                .skip(1)
                .map(|k| k.trim().to_owned())
                .collect();
            keys.sort();
            let name = rest
                .split("MetricName=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("");
            for key in tape.matching(name, &keys) {
                let points = bucketed(&tape.points(&key), start, width_ms, period_ms, true);
                let dims: Vec<&str> = key.1.iter().map(|(_, v)| v.as_str()).collect();
                drawn.push(Drawn {
                    label: dims.join(" "),
                    right: false,
                    points,
                });
            }
        } else if let Some(ids) = expr
            .split_once("SUM([")
            .and_then(|(_, r)| r.split_once(']'))
        {
            let mut total: BTreeMap<i64, f64> = BTreeMap::new();
            for id in ids.0.split(',').map(str::trim) {
                for (k, v) in by_id.get(id).into_iter().flatten() {
                    *total.entry(*k).or_default() += v;
                }
            }
            let per_second = expr.contains("PERIOD(");
            let points = total
                .into_iter()
                .map(|(k, v)| {
                    (
                        k,
                        if per_second {
                            v / (period_ms as f64 / 1000.0)
                        } else {
                            v
                        },
                    )
                })
                .collect();
            drawn.push(Drawn {
                label,
                right: false,
                points,
            });
        }
    }
    (drawn, not_simulated)
}

/// A widget's panel (`p`: its properties) at `at` on the page: its frame, title, axes, the
/// horizontal annotations, the series and their legend.
fn panel(
    p: &Value,
    drawn: &[Drawn],
    not_simulated: &[String],
    start: i64,
    span: i64,
    at: (usize, usize),
) -> String {
    let annotations: Vec<(f64, String)> = p["annotations"]["horizontal"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            Some((
                a["value"].as_f64()?,
                a["label"].as_str().unwrap_or("").to_owned(),
            ))
        })
        .collect();
    let axis_max = |right: bool| -> f64 {
        let m = drawn
            .iter()
            .filter(|d| d.right == right)
            .flat_map(|d| d.points.iter().map(|(_, v)| *v))
            .chain(annotations.iter().filter(|_| !right).map(|(v, _)| *v))
            .fold(0.0_f64, f64::max);
        if m > 0.0 {
            m * 1.1
        } else {
            1.0
        }
    };
    let (left_max, right_max) = (axis_max(false), axis_max(true));
    let (px, py, pw, ph) = PLOT;
    let x_of = |t: i64| px + pw * (t - start) as f64 / span as f64;
    let y_of = |v: f64, right: bool| py + ph - ph * v / if right { right_max } else { left_max };
    let label = |side: &str| esc(p["yAxis"][side]["label"].as_str().unwrap_or(""));
    // Hours into the run at each quarter.
    let hour = |k: f64| format!("{:.0}", span as f64 / 3_600_000.0 * k / 4.0);
    let mut svg = fill(
        "panel",
        &[
            ("x0", &at.0),
            ("y0", &at.1),
            ("title", &esc(p["title"].as_str().unwrap_or(""))),
            ("left_max", &short(left_max / 1.1)),
            ("left_label", &label("left")),
            ("h1", &hour(1.0)),
            ("h2", &hour(2.0)),
            ("h3", &hour(3.0)),
            ("h4", &hour(4.0)),
        ],
    );
    if drawn.iter().any(|d| d.right) {
        let right_max = short(right_max / 1.1);
        svg += &fill(
            "right-axis",
            &[("right_max", &right_max), ("label", &label("right"))],
        );
    }
    for (v, l) in &annotations {
        let y = y_of(*v, false);
        let (y, text_y) = (format!("{y:.1}"), format!("{:.1}", y - 3.0));
        svg += &fill(
            "annotation",
            &[("y", &y), ("text_y", &text_y), ("label", &esc(l))],
        );
    }
    let (mut legend_x, mut legend_y) = (8.0, 242.0);
    for (i, d) in drawn.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let xy = |(t, v): &(i64, f64)| {
            (
                format!("{:.1}", x_of(*t)),
                format!("{:.1}", y_of(*v, d.right)),
            )
        };
        if !d.points.is_empty() {
            let points: Vec<String> = d
                .points
                .iter()
                .map(xy)
                .map(|(x, y)| format!("{x},{y}"))
                .collect();
            svg += &fill(
                "line",
                &[("colour", &colour), ("points", &points.join(" "))],
            );
            // A series with few points (the daily audit's) shows each point.
            for (x, y) in d.points.iter().filter(|_| d.points.len() <= 40).map(xy) {
                svg += &fill("point", &[("x", &x), ("y", &y), ("colour", &colour)]);
            }
        }
        let right = if d.right { " (right)" } else { "" };
        let no_data = if d.points.is_empty() { ": no data" } else { "" };
        let text = format!("{}{right}{no_data}", d.label);
        let step = 14.0 + 6.0 * text.len() as f64;
        if legend_x + step > 600.0 {
            (legend_x, legend_y) = (8.0, legend_y + 12.0);
        }
        svg += &fill(
            "legend",
            &[
                ("x", &legend_x),
                ("rect_y", &(legend_y - 4.0)),
                ("colour", &colour),
                ("text_x", &(legend_x + 13.0)),
                ("y", &legend_y),
                ("text", &esc(&text)),
            ],
        );
        legend_x += step;
    }
    if !not_simulated.is_empty() {
        svg += &fill(
            "not-simulated",
            &[("names", &esc(&not_simulated.join(", ")))],
        );
    }
    svg + &fill("end", &[])
}

fn short(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use charge_core::time::Timestamp;
    use charge_once::telemetry::{emf_line, emf_line_classed};

    use super::*;

    const TEMPLATE: &str = include_str!("../../../template.yaml");

    /// The tape files each metric under each of its dimension sets; the template's widgets are
    /// read whole; a widget's series is drawn from what was taped, and one nobody emitted says
    /// "no data".
    #[test]
    fn the_template_dashboard_draws_what_was_taped() {
        let tape = MetricsTape::default();
        let t0 = 1_800_000_000_000;
        for (i, age) in [(0, 100.0), (1, 4000.0)] {
            tape.record(&emf_line(
                "reconciler",
                Timestamp::from_millis(t0 + i * 60_000),
                &[("OldestUnsettledAge", age, "Seconds")],
            ));
        }
        tape.record(&emf_line_classed(
            "audit",
            ("DriftClass", "status_differs"),
            Timestamp::from_millis(t0 + 3_600_000),
            &[("AuditDrift", 2.0, "Count")],
        ));
        assert_eq!(
            tape.len(),
            3,
            "OldestUnsettledAge; AuditDrift alone and by class"
        );
        let widgets = template_widgets(TEMPLATE).unwrap();
        assert!(widgets.len() >= 10);
        let svg = render(&widgets, &tape, t0, t0 + 2 * 3_600_000, "test");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for w in &widgets {
            let title = esc(w["properties"]["title"].as_str().unwrap());
            assert!(svg.contains(&title), "{title} not drawn");
        }
        assert!(
            svg.contains("oldest unsettled (each tick)<"),
            "a taped series without no data"
        );
        assert!(svg.contains("status_differs<"));
        assert!(svg.contains("no data"));
        assert!(svg.contains("SQS's own metric, not simulated"));
        assert!(!svg.contains("{{"), "a template key without a value");
    }
}
