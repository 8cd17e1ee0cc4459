//! Figures: log-perplexity against evaluation length (the paper's Figure 1) and learned FIRE
//! biases against key position (Figures 4 and 8).
//!
//! The SVG and the PNG are drawn by the same code and carry the same text (title, axis
//! labels, tick labels, legend). plotters lays out text with `ab_glyph` from a font registered
//! at run time, so the font (DejaVu Sans, Bitstream Vera licence in `data/fonts/LICENSE`) is
//! compiled into the binary: no system font is needed or consulted.

use std::path::Path;
use std::sync::OnceLock;

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

/// DejaVu Sans, embedded so figures render identically on any machine.
static FONT: &[u8] = include_bytes!("../data/fonts/DejaVuSans.ttf");

/// The family every text element asks for (plotters' own default for mesh labels).
const FAMILY: &str = "sans-serif";

/// Registers [`FONT`] with plotters under [`FAMILY`], once per process; both backends measure
/// text with it, so it must precede any drawing.
fn ensure_font() -> std::result::Result<(), String> {
    static READY: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    READY
        .get_or_init(|| {
            plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
                .map_err(|_| "the embedded DejaVu Sans font did not parse".to_string())
        })
        .clone()
}

fn plot_err(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |reason| Error::Plot {
        path: path.display().to_string(),
        reason,
    }
}

/// Figure size in pixels.
const SIZE: (u32, u32) = (900, 600);

/// Writes `chart` as `<stem>.svg` and `<stem>.png`.
pub fn save(chart: &Chart, stem: &Path) -> Result<()> {
    if let Some(dir) = stem.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).map_err(crate::error::io(dir))?;
        }
    }
    let svg = stem.with_extension("svg");
    ensure_font().map_err(plot_err(&svg))?;
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        draw(chart, &root).map_err(plot_err(&svg))?;
        root.present().map_err(|e| plot_err(&svg)(e.to_string()))?;
    }
    let png = stem.with_extension("png");
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        draw(chart, &root).map_err(plot_err(&png))?;
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
) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let tx = |x: f64| if chart.log_x { x.max(1e-12).log2() } else { x };
    let (lx0, lx1) = (tx(x0), tx(x1));
    let mut ctx = ChartBuilder::on(root)
        .margin(20)
        .caption(&chart.title, (FAMILY, 22))
        .x_label_area_size(45)
        .y_label_area_size(65)
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
    ctx.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .x_label_formatter(&x_fmt)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .draw()
        .map_err(|e| e.to_string())?;
    for (n, s) in chart.series.iter().enumerate() {
        let color = Palette99::pick(n).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (tx(x), y)).collect();
        ctx.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(title: &str) -> Chart {
        Chart {
            title: title.into(),
            x_label: "evaluation length".into(),
            y_label: "log perplexity".into(),
            log_x: true,
            series: vec![Series {
                label: "fire".into(),
                points: vec![(64.0, 3.0), (128.0, 2.5), (256.0, 2.8)],
            }],
        }
    }

    /// Renders `chart` to an RGB buffer with the bitmap backend, as the PNG is drawn.
    fn raster(chart: &Chart) -> Vec<u8> {
        ensure_font().unwrap();
        let mut buf = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, SIZE).into_drawing_area();
            draw(chart, &root).unwrap();
            root.present().unwrap();
        }
        buf
    }

    /// Dark pixels in columns `x0..x1`, all rows.
    fn dark_in_columns(buf: &[u8], x0: u32, x1: u32) -> usize {
        buf.chunks_exact(3)
            .enumerate()
            .filter(|(i, px)| {
                let x = (*i as u32) % SIZE.0;
                (x0..x1).contains(&x) && px.iter().all(|&c| c < 128)
            })
            .count()
    }

    #[test]
    fn bitmap_draws_the_title_text() {
        // Same layout, different title: only the caption's glyphs can differ.
        let a = raster(&chart("A"));
        let b = raster(&chart("Log perplexity against length"));
        let differing = a
            .chunks_exact(3)
            .zip(b.chunks_exact(3))
            .filter(|(p, q)| p != q)
            .count();
        assert!(differing > 200, "{differing} pixels differ");
    }

    #[test]
    fn bitmap_draws_tick_labels_and_axis_description() {
        // Left of the y axis (margin 20 + label area 65) there is only text.
        let buf = raster(&chart("t"));
        let dark = dark_in_columns(&buf, 0, 80);
        assert!(dark > 100, "{dark} dark pixels left of the y axis");
    }

    #[test]
    fn svg_and_png_carry_the_same_text() {
        let dir = std::env::temp_dir().join(format!("fire-plot-{}", std::process::id()));
        let stem = dir.join("fig");
        save(&chart("Figure one"), &stem).unwrap();
        let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
        for text in [
            "Figure one",
            "evaluation length",
            "log perplexity",
            "fire",
            "128",
        ] {
            assert!(svg.contains(text), "{text} missing from the SVG");
        }
        let png = std::fs::read(stem.with_extension("png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
