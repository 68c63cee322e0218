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

/// Draws the widgets from the tape over `[start, end]` (virtual ms) as one SVG.
pub fn render(widgets: &[Value], tape: &MetricsTape, start: i64, end: i64, title: &str) -> String {
    const W: f64 = 600.0;
    const H: f64 = 270.0;
    let span = (end - start).max(60_000);
    let rows = widgets.len().div_ceil(2);
    let total_h = 50.0 + rows as f64 * (H + 20.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{total_h}" font-family="sans-serif" font-size="11">"#,
        2.0 * W + 30.0
    );
    let _ = writeln!(
        svg,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="10" y="24" font-size="15" font-weight="bold">{}</text>"#,
        esc(title)
    );
    for (i, w) in widgets.iter().enumerate() {
        let x0 = 10.0 + (i % 2) as f64 * (W + 10.0);
        let y0 = 40.0 + (i / 2) as f64 * (H + 20.0);
        panel(&mut svg, w, tape, start, span, x0, y0, W, H);
    }
    svg.push_str("</svg>\n");
    svg
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

#[allow(clippy::too_many_arguments)]
fn panel(
    svg: &mut String,
    w: &Value,
    tape: &MetricsTape,
    start: i64,
    span: i64,
    x0: f64,
    y0: f64,
    width: f64,
    height: f64,
) {
    let p = &w["properties"];
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
    // The frame, the title, the plot area.
    let (px, py, pw, ph) = (x0 + 55.0, y0 + 28.0, width - 110.0, height - 95.0);
    let _ = writeln!(
        svg,
        r##"<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="#fafafa" stroke="#cccccc"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-weight="bold">{}</text>"#,
        x0 + 8.0,
        y0 + 16.0,
        esc(p["title"].as_str().unwrap_or(""))
    );
    let _ = writeln!(
        svg,
        r##"<rect x="{px}" y="{py}" width="{pw}" height="{ph}" fill="#ffffff" stroke="#999999"/>"##
    );
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
    let x_of = |t: i64| px + pw * (t - start) as f64 / span as f64;
    let y_of = |v: f64, right: bool| py + ph - ph * v / if right { right_max } else { left_max };
    // Axes: units, the scale's top, hours into the run.
    let label = |side: &str| p["yAxis"][side]["label"].as_str().unwrap_or("").to_owned();
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
        px - 4.0,
        py + 8.0,
        short(left_max / 1.1)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">0</text>"#,
        px - 4.0,
        py + ph
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        x0 + 14.0,
        py + ph / 2.0,
        esc(&label("left"))
    );
    if drawn.iter().any(|d| d.right) {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}">{}</text>"#,
            px + pw + 4.0,
            py + 8.0,
            short(right_max / 1.1)
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate({},{}) rotate(90)" text-anchor="middle">{}</text>"#,
            x0 + width - 14.0,
            py + ph / 2.0,
            esc(&label("right"))
        );
    }
    let hours = span as f64 / 3_600_000.0;
    for k in 0..=4 {
        let f = k as f64 / 4.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{:.0} h</text>"#,
            px + pw * f,
            py + ph + 13.0,
            hours * f
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">virtual hours into the run</text>"#,
        px + pw / 2.0,
        py + ph + 26.0
    );
    for (v, l) in &annotations {
        let y = y_of(*v, false);
        let _ = writeln!(
            svg,
            r##"<line x1="{px}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#d62728" stroke-dasharray="4 3"/>"##,
            px + pw
        );
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{:.1}" fill="#d62728" text-anchor="end">{}</text>"##,
            px + pw - 4.0,
            y - 3.0,
            esc(l)
        );
    }
    let mut legend_x = x0 + 8.0;
    let mut legend_y = y0 + height - 28.0;
    for (i, d) in drawn.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        if !d.points.is_empty() {
            let pts: Vec<String> = d
                .points
                .iter()
                .map(|(t, v)| format!("{:.1},{:.1}", x_of(*t), y_of(*v, d.right)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
                pts.join(" ")
            );
            // A series with few points (the daily audit's) shows each point.
            if d.points.len() <= 40 {
                for (t, v) in &d.points {
                    let _ = writeln!(
                        svg,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{colour}"/>"#,
                        x_of(*t),
                        y_of(*v, d.right)
                    );
                }
            }
        }
        let text = format!(
            "{}{}{}",
            d.label,
            if d.right { " (right)" } else { "" },
            if d.points.is_empty() { ": no data" } else { "" }
        );
        let step = 14.0 + 6.0 * text.len() as f64;
        if legend_x + step > x0 + width {
            legend_x = x0 + 8.0;
            legend_y += 12.0;
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{legend_x}" y="{}" width="10" height="3" fill="{colour}"/><text x="{}" y="{}">{}</text>"#,
            legend_y - 4.0,
            legend_x + 13.0,
            legend_y,
            esc(&text)
        );
        legend_x += step;
    }
    if !not_simulated.is_empty() {
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" fill="#666666">{}: SQS's own metric, not simulated</text>"##,
            px + 6.0,
            py + 14.0,
            esc(&not_simulated.join(", "))
        );
    }
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
    }
}
