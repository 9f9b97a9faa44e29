//! Line charts as plain SVG, written by hand: axes (linear or log), ticks,
//! grid, one polyline per series, a legend on the right.

use std::fmt::Write;

/// How an axis maps values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

#[derive(Clone, Debug)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    /// Fixed bounds; `None`: from the data.
    pub range: Option<(f64, f64)>,
    /// Fixed tick positions; `None`: chosen from the range.
    pub ticks: Option<Vec<f64>>,
}

impl Axis {
    pub fn new(label: &str, scale: Scale) -> Axis {
        Axis { label: label.to_string(), scale, range: None, ticks: None }
    }
}

#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub color: String,
    pub dashed: bool,
    pub markers: bool,
    pub points: Vec<(f64, f64)>,
}

#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub subtitle: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

/// Colors that stay apart on white and for most color-blind readers.
pub const PALETTE: &[&str] =
    &["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 540.0;
const LEFT: f64 = 86.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 84.0;
const BOTTOM: f64 = 62.0;

struct Mapped {
    scale: Scale,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Mapped {
    fn new(axis: &Axis, values: impl Iterator<Item = f64>) -> Mapped {
        let values: Vec<f64> = values.filter(|v| v.is_finite() && (axis.scale == Scale::Linear || *v > 0.0)).collect();
        let (data_lo, data_hi) =
            values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let (data_lo, data_hi) = if data_lo.is_finite() { (data_lo, data_hi) } else { (1.0, 10.0) };
        match axis.scale {
            Scale::Linear => {
                let (lo, hi) = axis.range.unwrap_or((data_lo.min(0.0), data_hi.max(data_lo + 1e-9)));
                let step = nice_step((hi - lo) / 6.0);
                let (lo, hi) = if axis.range.is_some() {
                    (lo, hi)
                } else {
                    ((lo / step).floor() * step, (hi / step).ceil() * step)
                };
                let ticks = axis.ticks.clone().unwrap_or_else(|| {
                    let first = (lo / step).ceil() as i64;
                    let last = (hi / step + 1e-9).floor() as i64;
                    (first..=last).map(|i| i as f64 * step).collect()
                });
                Mapped { scale: Scale::Linear, lo, hi: hi.max(lo + 1e-12), ticks }
            }
            Scale::Log => {
                let (lo, hi) = axis.range.unwrap_or_else(|| {
                    (
                        10f64.powf(data_lo.log10().floor()),
                        10f64.powf(data_hi.log10().ceil().max(data_lo.log10().floor() + 1.0)),
                    )
                });
                let ticks = axis.ticks.clone().unwrap_or_else(|| {
                    let decades = (hi / lo).log10().round() as i32;
                    let mults: &[f64] = if decades <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
                    let mut ticks = Vec::new();
                    let mut decade = lo;
                    while decade <= hi * 1.0001 {
                        ticks
                            .extend(mults.iter().map(|m| m * decade).filter(|&t| t >= lo * 0.9999 && t <= hi * 1.0001));
                        decade *= 10.0;
                    }
                    ticks
                });
                Mapped { scale: Scale::Log, lo, hi, ticks }
            }
        }
    }

    /// 0..1 along the axis.
    fn frac(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            Scale::Log => (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10()),
        }
    }

    fn usable(&self, v: f64) -> bool {
        v.is_finite() && (self.scale == Scale::Linear || v > 0.0)
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|&s| s >= raw).unwrap_or(10.0 * power)
}

/// A tick label: 0.05, 2.5, 150, 12k, 1.5M.
pub fn format_number(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

impl Chart {
    pub fn to_svg(&self) -> String {
        let x = Mapped::new(&self.x, self.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
        let y = Mapped::new(&self.y, self.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let px = |v: f64| LEFT + x.frac(v) * pw;
        let py = |v: f64| TOP + (1.0 - y.frac(v)) * ph;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r##"<text x="{LEFT}" y="28" font-size="18" font-weight="bold" fill="#222">{}</text>"##,
            escape(&self.title)
        );
        for (i, line) in self.subtitle.lines().enumerate() {
            let _ = writeln!(
                s,
                r##"<text x="{LEFT}" y="{}" font-size="12" fill="#555">{}</text>"##,
                48 + 15 * i,
                escape(line)
            );
        }
        let _ = writeln!(
            s,
            r#"<defs><clipPath id="plot"><rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/></clipPath></defs>"#
        );

        // Grid and ticks.
        for &t in x.ticks.iter().filter(|&&t| x.usable(t) && (0.0..=1.0001).contains(&x.frac(t))) {
            let gx = px(t);
            let _ =
                writeln!(s, r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{:.1}" stroke="#e4e4e4"/>"##, TOP + ph);
            let _ = writeln!(
                s,
                r##"<text x="{gx:.1}" y="{:.1}" font-size="12" fill="#333" text-anchor="middle">{}</text>"##,
                TOP + ph + 18.0,
                format_number(t)
            );
        }
        for &t in y.ticks.iter().filter(|&&t| y.usable(t) && (-0.0001..=1.0001).contains(&y.frac(t))) {
            let gy = py(t);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#e4e4e4"/>"##,
                LEFT + pw
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="12" fill="#333" text-anchor="end">{}</text>"##,
                LEFT - 8.0,
                gy + 4.0,
                format_number(t)
            );
        }
        let _ = writeln!(s, r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##);
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="13" fill="#222" text-anchor="middle">{}</text>"##,
            LEFT + pw / 2.0,
            HEIGHT - 16.0,
            escape(&self.x.label)
        );
        let _ = writeln!(
            s,
            r##"<text transform="translate(22 {:.1}) rotate(-90)" font-size="13" fill="#222" text-anchor="middle">{}</text>"##,
            TOP + ph / 2.0,
            escape(&self.y.label)
        );

        // Series.
        let _ = writeln!(s, r#"<g clip-path="url(#plot)" fill="none" stroke-width="2.2" stroke-linejoin="round">"#);
        for series in &self.series {
            let dash = if series.dashed { r#" stroke-dasharray="7 4""# } else { "" };
            let mut segment: Vec<String> = Vec::new();
            let mut segments = Vec::new();
            for &(vx, vy) in &series.points {
                if x.usable(vx) && y.usable(vy) {
                    segment.push(format!("{:.1},{:.1}", px(vx), py(vy)));
                } else if !segment.is_empty() {
                    segments.push(std::mem::take(&mut segment));
                }
            }
            segments.push(segment);
            for points in segments.iter().filter(|p| !p.is_empty()) {
                let _ = writeln!(s, r#"<polyline points="{}" stroke="{}"{dash}/>"#, points.join(" "), series.color);
            }
            if series.markers {
                for &(vx, vy) in series.points.iter().filter(|&&(vx, vy)| x.usable(vx) && y.usable(vy)) {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{}" stroke="white" stroke-width="1"/>"#,
                        px(vx),
                        py(vy),
                        series.color
                    );
                }
            }
        }
        let _ = writeln!(s, "</g>");

        // Legend.
        let lx = LEFT + pw + 20.0;
        for (i, series) in self.series.iter().enumerate() {
            let ly = TOP + 10.0 + i as f64 * 22.0;
            let dash = if series.dashed { r#" stroke-dasharray="7 4""# } else { "" };
            let _ = writeln!(
                s,
                r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2.5"{dash}/>"#,
                lx + 30.0,
                series.color
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="13" fill="#222">{}</text>"##,
                lx + 38.0,
                ly + 4.5,
                escape(&series.label)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_steps() {
        assert_eq!(format_number(12000.0), "12k");
        assert_eq!(format_number(1_500_000.0), "1.5M");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(0.05), "0.05");
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(37.0), 50.0);
    }

    #[test]
    fn a_chart_is_well_formed_and_skips_unusable_points() {
        let chart = Chart {
            title: "t <&>".into(),
            subtitle: String::new(),
            x: Axis::new("x", Scale::Log),
            y: Axis::new("y", Scale::Linear),
            series: vec![Series {
                label: "a".into(),
                color: PALETTE[0].into(),
                dashed: true,
                markers: true,
                points: vec![(1.0, 1.0), (0.0, 2.0), (4.0, f64::NAN), (16.0, 3.0)],
            }],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("t &lt;&amp;&gt;"));
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
