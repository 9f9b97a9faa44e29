//! The report's outputs: a markdown table, a CSV file, SVG plots.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::svg::{Axis, Chart, Scale, Series, PALETTE};
use super::{Cell, Contestant, Report};
use crate::pool::Mode;

/// The CSV columns, in order. Times are microseconds; CPU is microseconds of
/// CPU per acquisition (CPU seconds x 10^6).
pub const CSV_COLUMNS: &[&str] = &[
    "strategy",
    "mode",
    "contenders",
    "rounds",
    "seconds",
    "critical_us",
    "critical_hold",
    "hold_mean_us",
    "outside_us",
    // The file system type, or for a lock kept on a server, its scheme and
    // transport (`redis-tcp`); `memory` for the floor.
    "fs",
    "acquisitions",
    "acq_per_s",
    "jain",
    "worker_min",
    "worker_max",
    "wait_p50_us",
    "wait_p99_us",
    "wait_max_us",
    "handoff_p50_us",
    "handoff_p99_us",
    "handoffs",
    "release_mean_us",
    "handoff_all_p50_us",
    "handoff_all_p99_us",
    "self_handoff_share",
    "cpu_us_per_acq",
    "rusage_cpu_us_per_acq",
    "task_clock_us_per_acq",
    "overlaps",
    "fence_regressions",
    "lost",
    "errors",
];

fn us(ns: Option<u64>) -> Option<f64> {
    ns.map(|ns| ns as f64 / 1e3)
}

/// Microseconds for the table: one decimal below 10, none above.
fn table_us(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() && v < 10.0 => format!("{v:.1}"),
        Some(v) if v.is_finite() => format!("{v:.0}"),
        _ => "–".into(),
    }
}

fn csv_num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.3}"),
        _ => String::new(),
    }
}

impl Report {
    /// One line on what was run, for the table's caption.
    pub fn caption(&self) -> String {
        let c = &self.config;
        let outside =
            if c.outside.is_zero() { String::new() } else { format!(", {} µs outside", c.outside.as_micros()) };
        format!(
            "{} per cell x {} round(s), critical section {} µs ({}){outside}, locks in {} ({}), {} CPUs",
            human_duration(c.cell_duration()),
            c.rounds,
            c.critical.as_micros(),
            c.hold.name(),
            c.dir.display(),
            self.fs,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        )
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}\n", self.caption());
        for note in &self.notes {
            let _ = writeln!(s, "{note}\n");
        }
        let _ = writeln!(
            s,
            "| strategy | mode | n | acq/s | Jain | per worker min–max | wait p50 / p99 / max µs | handoff p50 / p99 µs (count) | re-acquired by releaser | CPU µs / acq (task clock) | oracle |"
        );
        let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        for c in &self.cells {
            let oracle = match (c.violations(), c.errors) {
                (0, 0) => "0".to_string(),
                (0, e) => format!("0 ({e} errors)"),
                (v, 0) => format!("**{v} FAILED**"),
                (v, e) => format!("**{v} FAILED** ({e} errors)"),
            };
            let share = c.self_handoff_share();
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {:.0} | {} | {}–{} | {} / {} / {} | {} / {} ({}) | {} | {} ({}) | {} |",
                c.strategy,
                c.mode.name(),
                c.contenders,
                c.acquisitions_per_second(),
                if c.jain().is_finite() { format!("{:.2}", c.jain()) } else { "–".into() },
                if c.worker_min == u64::MAX { 0 } else { c.worker_min },
                c.worker_max,
                table_us(us(c.wait_quantile(0.5))),
                table_us(us(c.wait_quantile(0.99))),
                table_us(us(Some(c.wait_max_ns))),
                table_us(us(c.handoff.quantile(0.5))),
                table_us(us(c.handoff.quantile(0.99))),
                c.handoff.total(),
                if share.is_finite() { format!("{:.0}%", share * 100.0) } else { "–".into() },
                table_us(Some(c.cpu_us_per_acquisition())),
                table_us(c.task_clock_us_per_acquisition()),
                oracle,
            );
        }
        s
    }

    pub fn csv(&self) -> String {
        let mut s = CSV_COLUMNS.join(",");
        s.push('\n');
        let cfg = &self.config;
        for c in &self.cells {
            let row: Vec<String> = vec![
                c.strategy.to_string(),
                c.mode.name().to_string(),
                c.contenders.to_string(),
                c.rounds.to_string(),
                csv_num(Some(c.elapsed_ns as f64 / 1e9)),
                cfg.critical.as_micros().to_string(),
                cfg.hold.name().to_string(),
                csv_num(Some(c.hold_us())),
                cfg.outside.as_micros().to_string(),
                c.place.clone(),
                c.acquisitions.to_string(),
                csv_num(Some(c.acquisitions_per_second())),
                csv_num(Some(c.jain())),
                if c.worker_min == u64::MAX { "0".into() } else { c.worker_min.to_string() },
                c.worker_max.to_string(),
                csv_num(us(c.wait_quantile(0.5))),
                csv_num(us(c.wait_quantile(0.99))),
                csv_num(us(Some(c.wait_max_ns))),
                csv_num(us(c.handoff.quantile(0.5))),
                csv_num(us(c.handoff.quantile(0.99))),
                c.handoff.total().to_string(),
                csv_num(Some(c.release_us())),
                csv_num(us(c.handoff_all.quantile(0.5))),
                csv_num(us(c.handoff_all.quantile(0.99))),
                csv_num(Some(c.self_handoff_share())),
                csv_num(Some(c.cpu_us_per_acquisition())),
                csv_num(c.rusage_cpu_us_per_acquisition()),
                csv_num(c.task_clock_us_per_acquisition()),
                c.overlaps.to_string(),
                c.fence_regressions.to_string(),
                c.lost.to_string(),
                c.errors.to_string(),
            ];
            debug_assert_eq!(row.len(), CSV_COLUMNS.len());
            s.push_str(&row.join(","));
            s.push('\n');
        }
        s
    }

    /// The strategies in the order of `Scheme::ALL`, then the floor, each
    /// with its color.
    fn color(&self, contestant: Contestant) -> String {
        let index = Contestant::all().iter().position(|&c| c == contestant).unwrap_or(0);
        PALETTE[index % PALETTE.len()].to_string()
    }

    fn series_over_contenders(&self, value: impl Fn(&Cell) -> f64) -> Vec<Series> {
        let mut out = Vec::new();
        for &contestant in &self.config.strategies {
            for &mode in &self.config.modes {
                let points = self
                    .cells
                    .iter()
                    .filter(|c| c.contestant == contestant && c.mode == mode)
                    .map(|c| (c.contenders as f64, value(c)))
                    .collect();
                out.push(Series {
                    label: format!("{} · {}", contestant.name(), mode.name()),
                    color: self.color(contestant),
                    dashed: mode == Mode::Processes,
                    markers: true,
                    points,
                });
            }
        }
        out
    }

    fn contenders_axis(&self) -> Axis {
        let mut ticks: Vec<f64> = self.config.contenders.iter().map(|&n| n as f64).collect();
        ticks.sort_by(f64::total_cmp);
        let (lo, hi) = (ticks[0], ticks[ticks.len() - 1]);
        let scale = if hi / lo >= 4.0 { Scale::Log } else { Scale::Linear };
        let pad = if scale == Scale::Log { (lo / 1.15, hi * 1.15) } else { (lo - 0.2, hi + 0.2) };
        Axis { label: "contenders (workers wanting the lock)".into(), scale, range: Some(pad), ticks: Some(ticks) }
    }

    /// The plots, as (file name, SVG).
    pub fn charts(&self) -> Vec<(&'static str, String)> {
        let subtitle = format!("{}\nsolid: threads, dashed: processes", self.caption());
        let throughput = Chart {
            title: "Throughput under contention".into(),
            subtitle: subtitle.clone(),
            x: self.contenders_axis(),
            y: Axis::new("acquisitions per second (all workers)", Scale::Linear),
            series: self.series_over_contenders(Cell::acquisitions_per_second),
        };
        let fairness = Chart {
            title: "Fairness: Jain's index of per-worker acquisitions".into(),
            subtitle: subtitle.clone(),
            x: self.contenders_axis(),
            y: Axis {
                range: Some((0.0, 1.05)),
                ..Axis::new("Jain's index (1 = equal shares, 1/n = one worker)", Scale::Linear)
            },
            series: self.series_over_contenders(Cell::jain),
        };
        let cpu_series = self.series_over_contenders(Cell::cpu_us_per_acquisition);
        let (cpu_lo, cpu_hi) = cpu_series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let cpu = Chart {
            title: "CPU per acquisition (exposes polling)".into(),
            subtitle: subtitle.clone(),
            x: self.contenders_axis(),
            y: Axis::new(
                "CPU µs per acquisition (all workers)",
                if cpu_hi / cpu_lo > 30.0 { Scale::Log } else { Scale::Linear },
            ),
            series: cpu_series,
        };

        let top = self.config.contenders.iter().copied().max().unwrap_or(1);
        let others = top > 1;
        let mut cdf_series = Vec::new();
        for &contestant in &self.config.strategies {
            for &mode in &self.config.modes {
                let Some(cell) =
                    self.cells.iter().find(|c| c.contestant == contestant && c.mode == mode && c.contenders == top)
                else {
                    continue;
                };
                let hist = if others { &cell.handoff } else { &cell.handoff_all };
                let points = hist.cdf().into_iter().map(|(ns, f)| (ns as f64 / 1e3, f)).collect();
                cdf_series.push(Series {
                    label: format!("{} · {} ({})", contestant.name(), mode.name(), hist.total()),
                    color: self.color(contestant),
                    dashed: mode == Mode::Processes,
                    markers: false,
                    points,
                });
            }
        }
        let handoff = Chart {
            title: format!(
                "Handoff latency, release to next holder inside, {top} contender{}",
                if top == 1 { "" } else { "s" }
            ),
            subtitle: format!(
                "{}\n{} (how many in the legend); solid: threads, dashed: processes",
                self.caption(),
                if others { "handoffs to another worker" } else { "every handoff (one worker)" }
            ),
            x: Axis::new("handoff latency, µs (log scale)", Scale::Log),
            y: Axis { range: Some((0.0, 1.0)), ..Axis::new("fraction of handoffs at or below", Scale::Linear) },
            series: cdf_series,
        };
        vec![
            ("throughput.svg", throughput.to_svg()),
            ("fairness.svg", fairness.to_svg()),
            ("cpu.svg", cpu.to_svg()),
            ("handoff_cdf.svg", handoff.to_svg()),
        ]
    }

    /// Writes `results.csv`, `results.md` and the plots into `config.out`;
    /// returns the paths written.
    pub fn write(&self) -> std::io::Result<Vec<PathBuf>> {
        let out: &Path = &self.config.out;
        std::fs::create_dir_all(out)?;
        let mut written = Vec::new();
        let mut put = |name: &str, text: &str| -> std::io::Result<()> {
            let path = out.join(name);
            std::fs::write(&path, text)?;
            written.push(path);
            Ok(())
        };
        put("results.csv", &self.csv())?;
        put("results.md", &self.markdown())?;
        for (name, svg) in self.charts() {
            put(name, &svg)?;
        }
        Ok(written)
    }
}

/// `1s`, `200ms`, `1.5s`.
pub fn human_duration(d: std::time::Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < std::time::Duration::from_secs(1) && d.subsec_nanos() % 1_000_000 == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}
