//! A load run drawn as an SVG: one panel per series, each on its own scale, sharing one time axis.

use std::fmt::Write;

/// One second of a load run, as the monitor samples it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// Virtual seconds since the run began.
    pub at_s: f64,
    /// Messages visible in the charge queue (waiting).
    pub visible: u64,
    /// Messages received and not yet deleted (being charged).
    pub in_flight: u64,
    /// Orders settled so far (cumulative).
    pub settled: u64,
    /// Stripe capacity 429s so far (cumulative).
    pub r429: u64,
}

const WIDTH: f64 = 960.0;
/// Room left of the plots for the y tick labels.
const LEFT: f64 = 100.0;
const RIGHT: f64 = 30.0;
/// Baseline of the first panel's title.
const TOP: f64 = 56.0;
/// From one panel's title to the next.
const PANEL_STRIDE: f64 = 150.0;
/// From a panel's title down to the top of its plot.
const TITLE_GAP: f64 = 8.0;
const PLOT_HEIGHT: f64 = 100.0;
const PANELS: usize = 4;
const HEIGHT: f64 = TOP + 3.0 * PANEL_STRIDE + TITLE_GAP + PLOT_HEIGHT + 50.0;
/// Above this many points a series is thinned (see [`thin`]).
const MAX_POINTS: usize = 1500;

/// One panel: the series it names, its colour and its points as (seconds, value).
struct Panel {
    title: &'static str,
    note: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
}

/// An axis from `low` up to a round `top`, ticked every `step` (1, 2 or 5 × 10ⁿ).
struct Axis {
    low: f64,
    top: f64,
    step: f64,
}

impl Axis {
    /// Covers `low..=high` in at most `max_steps` round steps, none smaller than `min_step`.
    fn new(low: f64, high: f64, max_steps: f64, min_step: f64) -> Axis {
        let span = (high - low).max(0.0);
        let rough = (span / max_steps).max(min_step);
        let power = 10f64.powf(rough.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * power)
            .find(|s| *s >= rough * (1.0 - 1e-9))
            .unwrap_or(10.0 * power);
        let top = low + (span / step).ceil().max(1.0) * step;
        Axis { low, top, step }
    }

    fn ticks(&self) -> impl Iterator<Item = f64> + '_ {
        let count = ((self.top - self.low) / self.step).round() as usize;
        (0..=count).map(move |i| self.low + i as f64 * self.step)
    }

    /// Where `v` falls on the axis, 0 at `low` and 1 at `top`.
    fn fraction(&self, v: f64) -> f64 {
        (v - self.low) / (self.top - self.low)
    }
}

/// The run as an SVG: `title` on top (escape it for XML), then stacked panels sharing one time axis.
pub(crate) fn draw(samples: &[Sample], title: &str) -> String {
    let samples: Vec<&Sample> = samples.iter().filter(|s| s.at_s.is_finite()).collect();
    let first = samples.iter().map(|s| s.at_s).fold(0.0, f64::min);
    let last = samples.iter().map(|s| s.at_s).fold(0.0, f64::max);
    let time = Axis::new(first.floor(), last, 10.0, 1.0);
    let x = |t: f64| LEFT + (WIDTH - LEFT - RIGHT) * time.fraction(t);

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>\n\
         <text x=\"20\" y=\"24\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        escape(title)
    );
    for (i, panel) in panels(&samples).into_iter().enumerate() {
        let plot_top = TOP + i as f64 * PANEL_STRIDE + TITLE_GAP;
        let bottom = plot_top + PLOT_HEIGHT;
        let peak = panel.points.iter().map(|p| p.1).fold(0.0, f64::max);
        let scale = Axis::new(0.0, peak, 3.0, 1.0);
        let y = |v: f64| bottom - PLOT_HEIGHT * scale.fraction(v);
        let _ = writeln!(
            svg,
            "<text x=\"{LEFT}\" y=\"{}\"><tspan font-weight=\"bold\" fill=\"{}\">{}</tspan>\
             <tspan dx=\"10\" fill=\"#555\">{}</tspan></text>",
            plot_top - TITLE_GAP,
            panel.color,
            panel.title,
            panel.note
        );
        for t in time.ticks() {
            let _ = writeln!(
                svg,
                "<line x1=\"{0:.1}\" y1=\"{plot_top}\" x2=\"{0:.1}\" y2=\"{bottom}\" stroke=\"#e4e4e4\"/>",
                x(t)
            );
        }
        for v in scale.ticks() {
            let _ = writeln!(
                svg,
                "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#e4e4e4\"/>\
                 <text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\" font-size=\"11\">{4}</text>",
                y(v),
                WIDTH - RIGHT,
                LEFT - 6.0,
                y(v) + 4.0,
                thousands(v)
            );
        }
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"#333\" points=\"{LEFT},{plot_top} {LEFT},{bottom} {},{bottom}\"/>",
            WIDTH - RIGHT
        );
        svg.push_str(&line(&panel.points, panel.color, &x, &y));
    }
    let axis_y = TOP + (PANELS - 1) as f64 * PANEL_STRIDE + TITLE_GAP + PLOT_HEIGHT;
    for t in time.ticks() {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
            x(t),
            axis_y + 16.0,
            thousands(t)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">virtual time (s)</text>",
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        axis_y + 38.0
    );
    if samples.is_empty() {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"16\" fill=\"#555\">no samples</text>",
            WIDTH / 2.0,
            TOP + TITLE_GAP + PLOT_HEIGHT / 2.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The four series, top to bottom, with a short note on each (final, peak, total).
fn panels(samples: &[&Sample]) -> [Panel; PANELS] {
    let series = |value: fn(&Sample) -> u64| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (s.at_s, value(s) as f64)).collect()
    };
    let peak = |value: fn(&Sample) -> u64| samples.iter().map(|s| value(s)).max().unwrap_or(0);
    let per_second: Vec<(f64, f64)> = samples
        .windows(2)
        .map(|pair| {
            let new = pair[1].r429.saturating_sub(pair[0].r429) as f64;
            let seconds = pair[1].at_s - pair[0].at_s;
            (
                pair[1].at_s,
                if seconds > 0.0 { new / seconds } else { new },
            )
        })
        .collect();
    let total_429s = peak(|s| s.r429);
    let note_429s = if total_429s == 0 {
        "(none in this run)".to_string()
    } else {
        let worst = per_second.iter().map(|p| p.1).fold(0.0, f64::max);
        format!(
            "peak {}/s, {} in the run",
            thousands(worst),
            thousands(total_429s as f64)
        )
    };
    let last_settled = samples.last().map_or(0, |s| s.settled);
    [
        Panel {
            title: "orders settled (cumulative count)",
            note: format!("{} at the end", thousands(last_settled as f64)),
            color: "seagreen",
            points: thin(series(|s| s.settled)),
        },
        Panel {
            title: "queue depth (messages visible)",
            note: format!("peak {}", thousands(peak(|s| s.visible) as f64)),
            color: "steelblue",
            points: thin(series(|s| s.visible)),
        },
        Panel {
            title: "messages in flight (being charged)",
            note: format!("peak {}", thousands(peak(|s| s.in_flight) as f64)),
            color: "darkorange",
            points: thin(series(|s| s.in_flight)),
        },
        Panel {
            title: "Stripe capacity 429s per second",
            note: note_429s,
            color: "crimson",
            points: thin(per_second),
        },
    ]
}

/// Keeps a series under [`MAX_POINTS`]: past that, each bucket of neighbouring points keeps
/// only its lowest and its highest, in time order, so a single-second spike is not lost.
fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let per_bucket = points.len().div_ceil(MAX_POINTS / 2);
    let mut kept = Vec::with_capacity(MAX_POINTS);
    for bucket in points.chunks(per_bucket) {
        let by_value = |a: &usize, b: &usize| bucket[*a].1.total_cmp(&bucket[*b].1);
        let lowest = (0..bucket.len()).min_by(by_value).unwrap_or(0);
        let highest = (0..bucket.len()).max_by(by_value).unwrap_or(0);
        kept.push(bucket[lowest.min(highest)]);
        if lowest != highest {
            kept.push(bucket[lowest.max(highest)]);
        }
    }
    kept
}

/// One series as a polyline (a dot if it has a single point), coordinates to 0.1 px.
fn line(
    points: &[(f64, f64)],
    color: &str,
    x: &dyn Fn(f64) -> f64,
    y: &dyn Fn(f64) -> f64,
) -> String {
    match points {
        [] => String::new(),
        [(t, v)] => format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{color}\"/>\n",
            x(*t),
            y(*v)
        ),
        _ => {
            let mut coords = String::new();
            for (t, v) in points {
                let _ = write!(coords, "{:.1},{:.1} ", x(*t), y(*v));
            }
            format!(
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.3\" stroke-linejoin=\"round\" points=\"{}\"/>\n",
                coords.trim_end()
            )
        }
    }
}

/// A whole number with thousands separated by commas: 20000 as "20,000".
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    if v <= -0.5 {
        out.push('-');
    }
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `text` safe to put inside an XML element.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(len: u64, at: impl Fn(u64) -> (u64, u64, u64, u64)) -> Vec<Sample> {
        (0..len)
            .map(|i| {
                let (visible, in_flight, settled, r429) = at(i);
                Sample {
                    at_s: i as f64,
                    visible,
                    in_flight,
                    settled,
                    r429,
                }
            })
            .collect()
    }

    /// The points of the polyline drawn in `color`.
    fn points(svg: &str, color: &str) -> Vec<(f64, f64)> {
        let start = format!("stroke=\"{color}\"");
        let Some(line) = svg
            .lines()
            .find(|l| l.starts_with("<polyline") && l.contains(&start))
        else {
            return Vec::new();
        };
        let coords = line
            .split("points=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("");
        coords
            .split_whitespace()
            .filter_map(|p| p.split_once(','))
            .map(|(a, b)| (a.parse().unwrap_or(f64::NAN), b.parse().unwrap_or(f64::NAN)))
            .collect()
    }

    /// Top and bottom y of panel `i`'s plot.
    fn plot_span(i: usize) -> (f64, f64) {
        let top = TOP + i as f64 * PANEL_STRIDE + TITLE_GAP;
        (top, top + PLOT_HEIGHT)
    }

    fn y_range(points: &[(f64, f64)]) -> (f64, f64) {
        let low = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let high = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        (low, high)
    }

    #[test]
    fn each_series_has_its_own_scale() {
        let svg = draw(
            &run(900, |i| (17_800 - 19 * i, i % 10, 22 * i, i / 300)),
            "t",
        );
        let (top, bottom) = plot_span(2);
        let (high, low) = y_range(&points(&svg, "darkorange"));
        assert!(high >= top && low <= bottom, "in flight stays in its panel");
        assert!(
            low - high > 0.6 * PLOT_HEIGHT,
            "in flight 0..9 spans its panel: {high}..{low}"
        );
        let (top, _) = plot_span(0);
        let (high, _) = y_range(&points(&svg, "seagreen"));
        assert!(
            high - top < 0.1 * PLOT_HEIGHT,
            "settled reaches near the top of its own panel"
        );
    }

    #[test]
    fn no_429s_is_a_flat_line_on_zero_to_one_and_says_so() {
        let svg = draw(&run(60, |i| (100 - i, 5, i, 0)), "t");
        assert!(svg.contains("(none in this run)"));
        let (top, bottom) = plot_span(3);
        let line = points(&svg, "crimson");
        assert!(line.iter().all(|p| (p.1 - bottom).abs() < 0.01));
        for (label, y) in [("0", bottom), ("1", top)] {
            assert!(svg.contains(&format!(
                "y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\">{label}<",
                y + 4.0
            )));
        }
    }

    #[test]
    fn empty_run_is_a_frame_saying_no_samples() {
        let svg = draw(&[], "empty");
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("no samples") && !svg.contains("NaN"));
    }

    #[test]
    fn axes_and_panels_are_labelled() {
        let svg = draw(&run(30, |i| (i, i, i, i)), "a & b <c>");
        assert!(svg.contains("a &amp; b &lt;c&gt;"));
        for label in [
            "virtual time (s)",
            "orders settled (cumulative count)",
            "queue depth (messages visible)",
            "messages in flight",
            "Stripe capacity 429s per second",
        ] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(!svg.contains("(none in this run)"));
    }

    #[test]
    fn long_run_is_thinned_but_keeps_a_one_second_spike() {
        let svg = draw(
            &run(20_000, |i| {
                (i % 50, i % 13, i, if i >= 12_345 { 300 } else { 0 })
            }),
            "t",
        );
        for color in ["seagreen", "steelblue", "darkorange", "crimson"] {
            let n = points(&svg, color).len();
            assert!(n > 100 && n <= 3_000, "{color}: {n} points");
        }
        let (top, _) = plot_span(3);
        let (high, _) = y_range(&points(&svg, "crimson"));
        assert!(
            (high - top).abs() < 0.01,
            "the 300/s spike reaches the top of its panel"
        );
        assert!(svg.contains("peak 300/s, 300 in the run"));
    }

    #[test]
    fn odd_inputs_do_not_break_the_picture() {
        let huge = 999_999_999;
        for samples in [
            run(1, |_| (7, 7, 7, 7)),
            run(5, |_| (0, 0, 0, 0)),
            run(5, |_| (huge, huge, huge, huge)),
            vec![Sample {
                at_s: f64::NAN,
                visible: 1,
                in_flight: 1,
                settled: 1,
                r429: 1,
            }],
        ] {
            let svg = draw(&samples, "t");
            assert!(svg.ends_with("</svg>\n") && !svg.contains("NaN") && !svg.contains("inf"));
        }
        assert!(draw(&run(5, |_| (huge, 0, 0, 0)), "t").contains(">1,000,000,000<"));
    }

    #[test]
    fn ticks_are_round() {
        let ticks = |high: f64| Axis::new(0.0, high, 3.0, 1.0).ticks().collect::<Vec<_>>();
        assert_eq!(ticks(17_800.0), [0.0, 10_000.0, 20_000.0]);
        assert_eq!(ticks(0.0), [0.0, 1.0]);
        assert_eq!(ticks(3.0), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(thousands(20_000.0), "20,000");
        assert_eq!(thousands(999.0), "999");
    }
}
