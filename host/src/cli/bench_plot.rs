//! The prompt-set bench's plot (`bench.svg`, plotters' SVG backend, no font files needed): on top
//! the decode tok/s per mode per dataset as grouped bars (the acceptance length written over
//! each speculative bar); below the accepted-depth histogram of each speculative mode over all
//! datasets, as the fraction of its rounds that accepted `d` draft tokens.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use super::bench_suite::DatasetSummary;
use crate::spec::Mode;

/// Width and height of the SVG in pixels.
pub const SIZE: (u32, u32) = (1000, 900);

fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 5] = [
        RGBColor(120, 120, 120),
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
    ];
    COLORS[i % COLORS.len()]
}

/// Writes the plot of `sums` to `path`.
pub fn write_svg(path: &Path, sums: &[DatasetSummary]) -> anyhow::Result<()> {
    draw(path, sums).map_err(|e| anyhow::anyhow!("{e}")).with_context(|| format!("drawing {}", path.display()))
}

fn draw(path: &Path, sums: &[DatasetSummary]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2);
    speed_chart(&top, sums)?;
    histogram_chart(&bottom, sums)?;
    root.present()?;
    Ok(())
}

/// Grouped bars: one group per dataset, one bar per mode.
fn speed_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    sums: &[DatasetSummary],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let modes: Vec<Mode> = sums.first().map_or_else(Vec::new, |d| d.modes.iter().map(|m| m.mode).collect());
    let ymax = sums.iter().flat_map(|d| d.modes.iter().map(|m| m.tokens_per_second)).fold(0.0f64, f64::max);
    let ymax = if ymax > 0.0 { ymax * 1.3 } else { 1.0 };
    let n = sums.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption("decode tok/s per mode (label: acceptance length)", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax)?;
    let names: Vec<String> = sums.iter().map(|d| d.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&|x| {
            let i = (x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("tok/s")
        .draw()?;
    let width = 0.8 / modes.len().max(1) as f64;
    for (mi, &mode) in modes.iter().enumerate() {
        let c = color(mi);
        let bars = sums.iter().enumerate().filter_map(|(di, d)| {
            let m = d.modes.iter().find(|m| m.mode == mode)?;
            let x0 = di as f64 + 0.1 + mi as f64 * width;
            Some(Rectangle::new([(x0, 0.0), (x0 + width * 0.95, m.tokens_per_second)], c.filled()))
        });
        chart
            .draw_series(bars)?
            .label(mode.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled()));
        if mode != Mode::Ar {
            let labels = sums.iter().enumerate().filter_map(|(di, d)| {
                let m = d.modes.iter().find(|m| m.mode == mode)?;
                let x0 = di as f64 + 0.1 + mi as f64 * width;
                Some(Text::new(
                    format!("{:.2}", m.acceptance_length),
                    (x0, m.tokens_per_second + ymax * 0.01),
                    ("sans-serif", 14),
                ))
            });
            chart.draw_series(labels)?;
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

/// Grouped bars: one group per accepted depth, one bar per speculative mode (fraction of its
/// rounds, all datasets together).
fn histogram_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    sums: &[DatasetSummary],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let modes: Vec<(usize, Mode)> = sums.first().map_or_else(Vec::new, |d| {
        d.modes.iter().map(|m| m.mode).enumerate().filter(|(_, m)| *m != Mode::Ar).collect()
    });
    let hists: Vec<(usize, Mode, Vec<f64>)> = modes
        .iter()
        .map(|&(i, mode)| {
            let mut h: Vec<u64> = Vec::new();
            for m in sums.iter().flat_map(|d| d.modes.iter().filter(|m| m.mode == mode)) {
                if h.len() < m.accepted_depth.len() {
                    h.resize(m.accepted_depth.len(), 0);
                }
                for (d, &n) in m.accepted_depth.iter().enumerate() {
                    h[d] += n;
                }
            }
            let total = h.iter().sum::<u64>().max(1) as f64;
            (i, mode, h.iter().map(|&n| n as f64 / total).collect())
        })
        .collect();
    let depths = hists.iter().map(|(_, _, h)| h.len()).max().unwrap_or(0).max(1);
    let ymax = hists.iter().flat_map(|(_, _, h)| h.iter().copied()).fold(0.0f64, f64::max);
    let ymax = if ymax > 0.0 { (ymax * 1.15).min(1.0) } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption("accepted draft tokens per round (fraction of rounds)", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..depths as f64 - 0.5, 0f64..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(depths.min(40))
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                format!("{}", x.round() as i64)
            } else {
                String::new()
            }
        })
        .x_desc("accepted draft tokens in a round")
        .y_desc("fraction of rounds")
        .draw()?;
    let width = 0.8 / hists.len().max(1) as f64;
    for (k, (i, mode, h)) in hists.iter().enumerate() {
        let c = color(*i);
        let bars = h.iter().enumerate().map(|(d, &f)| {
            let x0 = d as f64 - 0.4 + k as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width * 0.95, f)], c.filled())
        });
        chart
            .draw_series(bars)?
            .label(mode.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled()));
    }
    if !hists.is_empty() {
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}
