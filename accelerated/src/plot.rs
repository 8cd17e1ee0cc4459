//! Figures: log-perplexity against evaluation length (the paper's Figure 1) and learned FIRE
//! biases against key position (Figures 4 and 8).
//!
//! SVG carries all text. plotters' bitmap backend needs a font feature to draw text, which
//! would mean shipping a font file; the PNG is therefore drawn without text (same axes, same
//! colours, in the SVG's order) and the SVG is the figure to read.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{Error, Result};

/// One line of a figure.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend entry.
    pub label: String,
    /// Points `(x, y)`.
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// x-axis label.
    pub x_label: String,
    /// y-axis label.
    pub y_label: String,
    /// Log-scale (base 2) x axis.
    pub log_x: bool,
    /// The lines.
    pub series: Vec<Series>,
}

fn plot_err(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |reason| Error::Plot {
        path: path.display().to_string(),
        reason,
    }
}

/// Writes `chart` as `<stem>.svg` and `<stem>.png`.
pub fn save(chart: &Chart, stem: &Path) -> Result<()> {
    if let Some(dir) = stem.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(crate::error::io(dir))?;
        }
    }
    let svg = stem.with_extension("svg");
    {
        let root = SVGBackend::new(&svg, (900, 600)).into_drawing_area();
        draw(chart, &root, true).map_err(plot_err(&svg))?;
        root.present().map_err(|e| plot_err(&svg)(e.to_string()))?;
    }
    let png = stem.with_extension("png");
    {
        let root = BitMapBackend::new(&png, (900, 600)).into_drawing_area();
        draw(chart, &root, false).map_err(plot_err(&png))?;
        root.present().map_err(|e| plot_err(&png)(e.to_string()))?;
    }
    Ok(())
}

fn bounds(chart: &Chart) -> ((f64, f64), (f64, f64)) {
    let pts = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    if x0 > x1 {
        return ((0.0, 1.0), (0.0, 1.0));
    }
    let pad = ((y1 - y0) * 0.05).max(1e-3);
    let xr = if x1 > x0 {
        (x0, x1)
    } else {
        (x0 - 1.0, x1 + 1.0)
    };
    (xr, (y0 - pad, y1 + pad))
}

fn draw<DB: DrawingBackend>(
    chart: &Chart,
    root: &DrawingArea<DB, Shift>,
    text: bool,
) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let tx = |x: f64| if chart.log_x { x.max(1e-12).log2() } else { x };
    let (lx0, lx1) = (tx(x0), tx(x1));
    let mut builder = ChartBuilder::on(root);
    builder.margin(20);
    if text {
        builder
            .caption(&chart.title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(65);
    }
    let mut ctx = builder
        .build_cartesian_2d(lx0..lx1, y0..y1)
        .map_err(|e| e.to_string())?;
    let log_x = chart.log_x;
    let x_fmt = move |v: &f64| {
        if log_x {
            format!("{:.0}", 2f64.powf(*v))
        } else {
            format!("{v:.0}")
        }
    };
    let mut mesh = ctx.configure_mesh();
    if text {
        mesh.x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .x_label_formatter(&x_fmt);
    } else {
        mesh.x_labels(0)
            .y_labels(0)
            .disable_x_mesh()
            .disable_y_mesh();
    }
    mesh.draw().map_err(|e| e.to_string())?;
    for (n, s) in chart.series.iter().enumerate() {
        let color = Palette99::pick(n).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
        let line = ctx
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        if text {
            line.label(s.label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    if text {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
