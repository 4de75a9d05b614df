//! The two chart kinds the reproductions need, as PNG files: lines over a numeric x axis, and
//! grouped bars. Files are drawn into a temporary file and renamed into place.

use super::output::{commit, temp_path};
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// Picture size of every plot, in pixels.
const SIZE: (u32, u32) = (960, 640);
/// Font family of every label: DejaVu Sans, embedded in the binary and drawn by plotters'
/// pure-Rust `ab_glyph` backend, so plotting needs no system font, fontconfig or freetype
/// (`assets/fonts/LICENSE-DejaVu.txt` gives its licence). A name of our own, so that nothing but
/// the embedded font can stand behind it.
const FONT: &str = "windrose-dejavu-sans";

/// The embedded font file.
const FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// Registers [`FONT_BYTES`] as [`FONT`] with plotters, once per process.
fn register_font() -> Result<(), String> {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the embedded font (DejaVu Sans) does not parse".into())
    }
}

/// Colours of the series, in order (colour-blind-friendly Okabe-Ito palette).
const COLORS: [RGBColor; 6] = [
    RGBColor(213, 94, 0),
    RGBColor(0, 114, 178),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
];

/// One line of a line chart.
pub(crate) struct Line {
    /// Legend entry.
    pub name: String,
    /// Points in increasing x.
    pub points: Vec<(f64, f64)>,
}

/// Axis texts and title of a chart.
pub(crate) struct Labels<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
}

/// A tick label: integers without decimals, other values with at most three, trailing zeros
/// dropped.
fn tick(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Upper end of a y axis starting at 0 that leaves headroom above `max` for the legend.
fn y_top(max: f64) -> f64 {
    if max > 0.0 && max.is_finite() {
        max * 1.25
    } else {
        1.0
    }
}

/// Draws `lines` (with point markers) against a linear x axis and writes the PNG to `path`.
pub(crate) fn line_chart(path: &Path, labels: &Labels<'_>, lines: &[Line]) -> Result<()> {
    let temp = temp_path(path);
    draw_lines(&temp, labels, lines).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        anyhow!("cannot draw {}: {e}", path.display())
    })?;
    commit(&temp, path)
}

fn draw_lines(
    path: &Path,
    labels: &Labels<'_>,
    lines: &[Line],
) -> Result<(), Box<dyn std::error::Error>> {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let (x_min, x_max) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let (x_min, x_max) = if x_min.is_finite() && x_max > x_min {
        (x_min, x_max)
    } else {
        (0.0, 1.0)
    };
    register_font()?;
    let pad = (x_max - x_min) * 0.03;
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(labels.title, (FONT, 26))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d((x_min - pad)..(x_max + pad), 0.0..y_top(y_max))?;
    chart
        .configure_mesh()
        .x_desc(labels.x)
        .y_desc(labels.y)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 16))
        .draw()?;
    for (i, line) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                color.stroke_width(3),
            ))?
            .label(line.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart.draw_series(
            line.points
                .iter()
                .map(|&p| Circle::new(p, 5, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 18))
        .draw()?;
    root.present()?;
    Ok(())
}

/// One series of a grouped bar chart: a value per group.
pub(crate) struct Bars {
    /// Legend entry.
    pub name: String,
    /// One value per group, in group order.
    pub values: Vec<f64>,
}

/// Draws one bar per series inside each group (value printed above it) and writes the PNG.
pub(crate) fn grouped_bars(
    path: &Path,
    labels: &Labels<'_>,
    groups: &[String],
    bars: &[Bars],
) -> Result<()> {
    let temp = temp_path(path);
    draw_bars(&temp, labels, groups, bars).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        anyhow!("cannot draw {}: {e}", path.display())
    })?;
    commit(&temp, path)
}

fn draw_bars(
    path: &Path,
    labels: &Labels<'_>,
    groups: &[String],
    bars: &[Bars],
) -> Result<(), Box<dyn std::error::Error>> {
    register_font()?;
    let g = groups.len().max(1) as f64;
    let y_max = bars
        .iter()
        .flat_map(|b| b.values.iter().copied())
        .fold(0.0f64, f64::max);
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(labels.title, (FONT, 26))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..g, 0.0..y_top(y_max))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_desc(labels.x)
        .y_desc(labels.y)
        .y_label_formatter(&tick)
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 16))
        .draw()?;
    // Each group spans one x unit: bars share 80 % of it, centred.
    let k = bars.len().max(1) as f64;
    let width = 0.8 / k;
    let value_style =
        TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (i, series) in bars.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let left = |gi: usize| gi as f64 + 0.1 + i as f64 * width;
        chart
            .draw_series(series.values.iter().enumerate().map(|(gi, &v)| {
                Rectangle::new(
                    [(left(gi), 0.0), (left(gi) + width * 0.92, v)],
                    color.filled(),
                )
            }))?
            .label(series.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.filled()));
        chart.draw_series(series.values.iter().enumerate().map(|(gi, &v)| {
            Text::new(
                format!("{v:.1}"),
                (left(gi) + width * 0.46, v),
                value_style.clone(),
            )
        }))?;
    }
    // Group names under the x axis, centred on each group.
    let name_style = TextStyle::from((FONT, 18).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (gi, name) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(gi as f64 + 0.5, 0.0));
        root.draw(&Text::new(name.clone(), (px, py + 8), name_style.clone()))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 18))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decoded RGB pixels of a PNG and its width.
    fn decode(path: &Path) -> (Vec<[u8; 3]>, usize) {
        let decoder = png::Decoder::new(std::fs::File::open(path).unwrap());
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let samples = info.color_type.samples();
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        let px = buf[..info.buffer_size()]
            .chunks(samples)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        (px, info.width as usize)
    }

    /// Dark pixels (text is black) in rows `rows` and columns `cols`.
    fn dark(
        px: &[[u8; 3]],
        width: usize,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) -> usize {
        rows.flat_map(|y| cols.clone().map(move |x| px[y * width + x]))
            .filter(|p| p.iter().all(|&c| c < 128))
            .count()
    }

    #[test]
    fn charts_decode_and_draw_their_text_with_the_embedded_font() {
        let dir = tempfile::tempdir().unwrap();
        let line = |name: &str| Line {
            name: name.into(),
            points: vec![(1.0, 2.0), (2.0, 3.5), (4.0, 1.0)],
        };
        let with = Labels {
            title: "Gain over the static tree",
            x: "slowdown factor",
            y: "average gain (ms)",
        };
        let without = Labels {
            title: "",
            x: "",
            y: "",
        };
        let (a, b) = (dir.path().join("a.png"), dir.path().join("b.png"));
        line_chart(&a, &with, &[line("position")]).unwrap();
        line_chart(&b, &without, &[line("position")]).unwrap();
        let (pa, w) = decode(&a);
        let (pb, wb) = decode(&b);
        assert_eq!((w, pa.len()), (SIZE.0 as usize, (SIZE.0 * SIZE.1) as usize));
        assert_eq!(wb, w);
        // The caption band above the plot holds only the title; the left edge holds only the
        // (rotated) y description.
        let title = |px: &[[u8; 3]]| dark(px, w, 0..50, 0..w);
        let y_desc = |px: &[[u8; 3]]| dark(px, w, 80..560, 0..40);
        assert!(title(&pa) > 200, "title: {} dark pixels", title(&pa));
        assert_eq!(title(&pb), 0);
        assert!(y_desc(&pa) > 100, "y label: {} dark pixels", y_desc(&pa));
        assert_eq!(y_desc(&pb), 0);

        let c = dir.path().join("c.png");
        let bars = [Bars {
            name: "windrose".into(),
            values: vec![1.0, 2.0],
        }];
        grouped_bars(&c, &with, &["a".into(), "b".into()], &bars).unwrap();
        let (pc, _) = decode(&c);
        assert!(title(&pc) > 200, "bar chart title: {}", title(&pc));
    }
}
