//! The two charts of a run, as SVG: `ecdf.svg`, the empirical CDF of RTT on a
//! log x-axis (tail latency at a glance, with the floors marked), and
//! `rtt.svg`, RTT against invocation number with faults marked — the chart
//! the original project drew by hand; and, for a run that grew
//! (`bench --grow-at-s`), `goodput.svg`, answered calls per second over
//! the run with the partition moves marked.

use std::path::Path;

use plotters::prelude::*;

use super::growth::GrowthReport;
use super::record::Invocation;
use super::report::{ecdf, effective_rtt_us};

/// A fault to mark on `rtt.svg`.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultMark {
    /// When the fault was injected, since the start of the run.
    pub at_us: u64,
    pub label: String,
}

/// A vertical reference line on `ecdf.svg`, such as a floor's p50.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub value_us: u64,
    pub label: String,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {message}")]
pub struct PlotError {
    path: String,
    message: String,
}

const SIZE: (u32, u32) = (1000, 600);
/// Enough points for a smooth curve; a 60 s run has ~20 000 invocations.
const ECDF_POINTS: usize = 2000;

/// Draws the ECDF of the successful measured calls' RTT.
pub fn write_ecdf_svg(
    path: &Path,
    records: &[Invocation],
    references: &[Reference],
) -> Result<(), PlotError> {
    let rtts: Vec<u64> = measured_ok(records).map(effective_rtt_us).collect();
    draw(path, |root| {
        let points = ecdf(&rtts, ECDF_POINTS);
        let lowest = points
            .first()
            .map(|p| p.0)
            .into_iter()
            .chain(references.iter().map(|r| r.value_us))
            .min()
            .unwrap_or(100);
        let highest = points
            .last()
            .map(|p| p.0)
            .into_iter()
            .chain(references.iter().map(|r| r.value_us))
            .max()
            .unwrap_or(10_000);
        let x_from = (lowest.max(1) as f64 * 0.8).max(1.0);
        let x_to = (highest as f64 * 1.25).max(x_from * 10.0);
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("ECDF of RTT ({} calls)", rtts.len()),
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((x_from..x_to).log_scale(), 0f64..1.0)?;
        chart
            .configure_mesh()
            .x_desc("RTT (log scale)")
            .y_desc("fraction of calls ≤ RTT")
            .x_label_formatter(&log_label)
            .draw()?;
        // A step function: each value holds its fraction until the next one.
        let mut steps = Vec::with_capacity(points.len() * 2);
        let mut previous = 0.0;
        for (value, fraction) in &points {
            steps.push((*value as f64, previous));
            steps.push((*value as f64, *fraction));
            previous = *fraction;
        }
        chart
            .draw_series(LineSeries::new(steps, BLUE.stroke_width(2)))?
            .label("RTT")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
        for (i, reference) in references.iter().enumerate() {
            let color = Palette99::pick(i + 1).to_rgba();
            let x = reference.value_us.max(1) as f64;
            chart
                .draw_series(LineSeries::new([(x, 0.0), (x, 1.0)], color.stroke_width(1)))?
                .label(reference.label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}

/// Draws RTT (ms) against invocation number, faults as red vertical lines.
pub fn write_rtt_svg(
    path: &Path,
    records: &[Invocation],
    faults: &[FaultMark],
) -> Result<(), PlotError> {
    let mut calls: Vec<&Invocation> = records.iter().filter(|r| !r.warmup).collect();
    calls.sort_by_key(|r| r.start_us);
    draw(path, |root| {
        let y_max_ms = calls
            .iter()
            .map(|r| effective_rtt_us(r) as f64 / 1000.0)
            .fold(1.0, f64::max)
            * 1.05;
        let n = calls.len().max(1);
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!(
                    "RTT per invocation ({} calls, {} faults)",
                    calls.len(),
                    faults.len()
                ),
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0..n, 0f64..y_max_ms)?;
        chart
            .configure_mesh()
            .x_desc("invocation number")
            .y_desc("RTT (ms)")
            .draw()?;
        let mut kinds: Vec<&str> = faults.iter().map(|f| f.label.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for (i, fault) in faults.iter().enumerate() {
            let at = calls.partition_point(|r| r.start_us < fault.at_us);
            let series = chart.draw_series(LineSeries::new(
                [(at, 0.0), (at, y_max_ms)],
                RED.mix(0.6).stroke_width(1),
            ))?;
            if i == 0 {
                series
                    .label(format!("fault ({})", kinds.join(", ")))
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
            }
            chart.draw_series(std::iter::once(Text::new(
                fault.label.clone(),
                (at, y_max_ms * (0.99 - 0.03 * (i % 2) as f64)),
                ("sans-serif", 11).into_font().color(&RED),
            )))?;
        }
        chart
            .draw_series(
                calls
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.is_ok())
                    .map(|(i, r)| {
                        Circle::new((i, effective_rtt_us(r) as f64 / 1000.0), 1, BLUE.filled())
                    }),
            )?
            .label("successful call")
            .legend(|(x, y)| Circle::new((x + 10, y), 3, BLUE.filled()));
        chart
            .draw_series(
                calls
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| !r.is_ok())
                    .map(|(i, r)| Cross::new((i, r.rtt_us as f64 / 1000.0), 3, RED)),
            )?
            .label("failed call")
            .legend(|(x, y)| Cross::new((x + 10, y), 3, RED));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}

/// Draws answered calls per second over the run, the warm-up shaded
/// grey, the growth (from the first `add-cluster` to the last move's end)
/// shaded orange with each move's end as a line, and the goodput before
/// and after it as dashed levels.
pub fn write_goodput_svg(
    path: &Path,
    growth: &GrowthReport,
    warmup_us: u64,
) -> Result<(), PlotError> {
    let seconds = &growth.goodput_by_second;
    draw(path, |root| {
        let x_max = (seconds.len() as f64).max(1.0);
        let y_max = seconds
            .iter()
            .copied()
            .chain([growth.goodput_before_per_s, growth.goodput_after_per_s])
            .fold(1.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!(
                    "Goodput over the run: {} partitions moved, {:.0}/s before, {:.0}/s after ({}×)",
                    growth.moves.len(),
                    growth.goodput_before_per_s,
                    growth.goodput_after_per_s,
                    growth.after_to_before
                ),
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the run started (warm-up included)")
            .y_desc("answered calls per second")
            .draw()?;
        let warmup_s = warmup_us as f64 / 1e6;
        if warmup_s > 0.0 {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, 0.0), (warmup_s.min(x_max), y_max)],
                    BLACK.mix(0.08).filled(),
                )))?
                .label("warm-up (not measured)")
                .legend(|(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 20, y + 5)], BLACK.mix(0.15).filled())
                });
        }
        let orange = RGBColor(255, 140, 0);
        if let Some(started) = growth.started_s {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(started, 0.0), (growth.ended_s.max(started), y_max)],
                    orange.mix(0.15).filled(),
                )))?
                .label(format!(
                    "growth: {} cluster(s) added, then the moves",
                    growth.clusters_added.len()
                ))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 20, y + 5)], orange.mix(0.3).filled())
                });
            chart.draw_series(std::iter::once(PathElement::new(
                [(started, 0.0), (started, y_max)],
                orange.stroke_width(2),
            )))?;
        }
        for (i, moved) in growth.moves.iter().enumerate() {
            let series = chart.draw_series(std::iter::once(PathElement::new(
                [(moved.end_s, 0.0), (moved.end_s, y_max * 0.97)],
                orange.mix(0.7).stroke_width(1),
            )))?;
            if i == 0 {
                series
                    .label("a partition moved (its end)")
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], orange));
            }
        }
        let level = |from: f64, to: f64, value: f64| {
            DashedLineSeries::new([(from, value), (to, value)], 6, 4, BLACK.stroke_width(1))
        };
        if let Some(started) = growth.started_s {
            chart
                .draw_series(level(warmup_s, started, growth.goodput_before_per_s))?
                .label(format!(
                    "before: {:.0}/s; after the moves: {:.0}/s",
                    growth.goodput_before_per_s, growth.goodput_after_per_s
                ))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
            let after_from = (x_max - growth.after_s).max(started);
            chart.draw_series(level(after_from, x_max, growth.goodput_after_per_s))?;
        }
        chart
            .draw_series(LineSeries::new(
                seconds
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (i as f64 + 0.5, v)),
                BLUE.stroke_width(2),
            ))?
            .label("answered calls in each second")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}

/// Labels a log axis at 1, 2 and 5 of each decade only (the others would
/// overlap), in µs, ms or s.
/// One point of a capacity sweep, for `sweep.svg`.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPoint {
    pub games: u32,
    pub rtt_p50_us: u64,
    pub rtt_p99_us: u64,
    /// Ping + transaction floor p99 measured beside that point.
    pub floor_p99_us: u64,
}

/// Draws RTT p50 and p99 against the number of 20 Hz games, with 3× the
/// floor's p99 (the target) beside them, on a log y-axis.
pub fn write_sweep_svg(path: &Path, points: &[SweepPoint]) -> Result<(), PlotError> {
    draw(path, |root| {
        let max_games = points.iter().map(|p| p.games).max().unwrap_or(1).max(1);
        let values = points
            .iter()
            .flat_map(|p| [p.rtt_p50_us, p.rtt_p99_us, p.floor_p99_us * 3]);
        let highest = values.clone().max().unwrap_or(10_000).max(1) as f64;
        let lowest = values.min().unwrap_or(100).max(1) as f64;
        let mut chart = ChartBuilder::on(root)
            .caption("RTT against games at 20 Hz", ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(
                0u32..max_games + 1,
                ((lowest * 0.8)..(highest * 1.25)).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("games (4 players each, one call per player every 50 ms)")
            .y_desc("RTT (log scale)")
            .y_label_formatter(&log_label)
            .draw()?;
        let series = [
            (
                "RTT p50",
                BLUE,
                points
                    .iter()
                    .map(|p| (p.games, p.rtt_p50_us as f64))
                    .collect::<Vec<_>>(),
            ),
            (
                "RTT p99",
                RED,
                points
                    .iter()
                    .map(|p| (p.games, p.rtt_p99_us as f64))
                    .collect(),
            ),
            (
                "3 × floor p99",
                BLACK,
                points
                    .iter()
                    .map(|p| (p.games, 3.0 * p.floor_p99_us as f64))
                    .collect(),
            ),
        ];
        for (label, color, line) in series {
            chart
                .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
            chart.draw_series(line.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()?;
        Ok(())
    })
}

fn log_label(value_us: &f64) -> String {
    let decade = 10f64.powf(value_us.log10().floor());
    let leading = (value_us / decade).round();
    if ![1.0, 2.0, 5.0].contains(&leading) || (value_us / decade - leading).abs() > 0.01 {
        return String::new();
    }
    format_us(leading * decade)
}

fn format_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{} ms", us / 1e3)
    } else {
        format!("{us} µs")
    }
}

fn measured_ok(records: &[Invocation]) -> impl Iterator<Item = &Invocation> {
    records.iter().filter(|r| !r.warmup && r.is_ok())
}

type Root<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw(
    path: &Path,
    body: impl FnOnce(&Root<'_>) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<(), PlotError> {
    let fail = |message: String| PlotError {
        path: path.display().to_string(),
        message,
    };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    body(&root).map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::act;
    use super::*;

    fn run() -> Vec<Invocation> {
        (0..500u64)
            .map(|i| {
                let mut r = act((i % 8) as u32, i * 6_250, 300 + (i * 37) % 900);
                if i == 250 {
                    r.failed_over = true;
                    r.first_failure_us = Some(0);
                    r.rtt_us = 4_000;
                }
                if i == 260 {
                    r.status = "unavailable".into();
                }
                r.warmup = i < 10;
                r
            })
            .collect()
    }

    #[test]
    fn ecdf_svg_is_written_with_its_curve_and_references() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ecdf.svg");
        let floors = [Reference {
            value_us: 150,
            label: "ping p50".into(),
        }];
        write_ecdf_svg(&path, &run(), &floors).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        assert!(svg.contains("ECDF of RTT (489 calls)"));
        assert!(svg.contains("ping p50"));
        assert!(svg.contains("<polyline"), "the curve is drawn");
    }

    #[test]
    fn rtt_svg_marks_faults_and_failed_calls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rtt.svg");
        let faults = [FaultMark {
            at_us: 250 * 6_250,
            label: "kill".into(),
        }];
        write_rtt_svg(&path, &run(), &faults).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("RTT per invocation (490 calls, 1 faults)"));
        assert!(svg.contains("fault (kill)"));
        assert!(
            svg.contains(">kill</text>") || svg.contains(">\nkill"),
            "each fault is labelled"
        );
        assert!(
            svg.matches("<circle").count() >= 489,
            "one dot per successful call"
        );
    }

    #[test]
    fn goodput_svg_marks_the_growth_and_each_move() {
        use super::super::growth::PartitionMove;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("goodput.svg");
        let moved = |partition: u16, end_s: f64| PartitionMove {
            partition,
            from: "home".into(),
            to: "c1".into(),
            end_s,
            ..PartitionMove::default()
        };
        let growth = GrowthReport {
            started_s: Some(7.0),
            ended_s: 12.0,
            moves: vec![moved(63, 9.0), moved(62, 12.0)],
            goodput_before_per_s: 1000.0,
            goodput_after_per_s: 2000.0,
            after_to_before: 2.0,
            after_s: 8.0,
            goodput_by_second: (0..20)
                .map(|s| if s < 12 { 1000.0 } else { 2000.0 })
                .collect(),
            ..GrowthReport::default()
        };
        write_goodput_svg(&path, &growth, 2_000_000).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("2 partitions moved, 1000/s before, 2000/s after (2×)"));
        assert!(svg.contains("a partition moved (its end)"));
        assert!(svg.contains("before: 1000/s; after the moves: 2000/s"));
        assert!(svg.contains("<polyline"), "the goodput is drawn");
    }

    #[test]
    fn log_axis_labels_only_one_two_five() {
        assert_eq!(log_label(&1000.0), "1 ms");
        assert_eq!(log_label(&2000.0000001), "2 ms");
        assert_eq!(log_label(&500.0), "500 µs");
        assert_eq!(log_label(&5_000_000.0), "5 s");
        assert_eq!(log_label(&7000.0), "");
        assert_eq!(log_label(&1500.0), "");
    }

    #[test]
    fn empty_runs_still_draw() {
        let dir = tempfile::tempdir().unwrap();
        write_ecdf_svg(&dir.path().join("e.svg"), &[], &[]).unwrap();
        write_rtt_svg(&dir.path().join("r.svg"), &[], &[]).unwrap();
        assert!(std::fs::metadata(dir.path().join("e.svg")).unwrap().len() > 100);
        assert!(std::fs::metadata(dir.path().join("r.svg")).unwrap().len() > 100);
    }
}
