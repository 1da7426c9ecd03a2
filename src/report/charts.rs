//! The report's charts, drawn with plotters into SVG text (no system fonts needed): the ratio to
//! the vendor per shape, the roofline, and a version's time across commits.

use plotters::prelude::*;

use super::data::Roof;

const W: u32 = 860;
const H: u32 = 420;

/// A colour per series index.
fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    C[i % C.len()]
}

/// Draws with `draw` into a fresh SVG; a plotting error becomes an SVG that says so.
fn svg(
    draw: impl FnOnce(
        &DrawingArea<SVGBackend, plotters::coord::Shift>,
    ) -> Result<(), Box<dyn std::error::Error>>,
) -> String {
    let mut out = String::new();
    let failed = {
        let root = SVGBackend::with_string(&mut out, (W, H)).into_drawing_area();
        let r = root
            .fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|_| draw(&root).map_err(|e| e.to_string()))
            .and_then(|_| root.present().map_err(|e| e.to_string()));
        r.err()
    };
    match failed {
        Some(e) => format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"40\"><text x=\"4\" y=\"20\">chart failed: {}</text></svg>", super::grid::escape(&e)),
        None => out,
    }
}

/// Grouped bars: for each shape (x), one bar per version with its ratio to the vendor.
pub fn ratio_chart(
    shapes: &[String],
    versions: &[String],
    ratio: impl Fn(usize, usize) -> Option<f64>,
) -> String {
    let ratio = &ratio;
    let max = (0..shapes.len())
        .flat_map(|s| (0..versions.len()).filter_map(move |v| ratio(s, v)))
        .fold(1.0f64, f64::max)
        * 1.1;
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                "time ratio to the vendor (vendor ms / version ms; 1 = parity)",
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..shapes.len().max(1) as f64, 0f64..max)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(shapes.len().max(1) * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 1e-6 && i < shapes.len() {
                    shapes[i].clone()
                } else {
                    String::new()
                }
            })
            .y_desc("ratio")
            .draw()?;
        let n = versions.len().max(1) as f64;
        for (vi, v) in versions.iter().enumerate() {
            let bars: Vec<Rectangle<(f64, f64)>> = (0..shapes.len())
                .filter_map(|si| ratio(si, vi).map(|r| (si, r)))
                .map(|(si, r)| {
                    let x0 = si as f64 + 0.1 + 0.8 * vi as f64 / n;
                    Rectangle::new([(x0, 0.0), (x0 + 0.8 / n, r)], colour(vi).filled())
                })
                .collect();
            chart
                .draw_series(bars)?
                .label(v.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour(vi).filled())
                });
        }
        chart.draw_series(LineSeries::new(
            [(0.0, 1.0), (shapes.len() as f64, 1.0)],
            BLACK.stroke_width(1),
        ))?;
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        Ok(())
    })
}

/// The roofline (log-log): attainable TFLOPS against FLOP/byte, and each (label, intensity,
/// TFLOPS) point, one colour per label.
pub fn roofline_chart(roof: &Roof, points: &[(String, f64, f64)]) -> String {
    let lo_x = points
        .iter()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
        / 2.0;
    let hi_x = points
        .iter()
        .map(|p| p.1)
        .fold(0.0f64, f64::max)
        .max(2.0 * roof.tflops / roof.tbps)
        * 2.0;
    let lo_y = points
        .iter()
        .map(|p| p.2)
        .filter(|t| *t > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
        / 2.0;
    let hi_y = roof.tflops * 2.0;
    let mut labels: Vec<&str> = Vec::new();
    for p in points {
        if !labels.contains(&p.0.as_str()) {
            labels.push(&p.0);
        }
    }
    svg(|root| {
        let title = if roof.measured {
            "roofline (measured ceilings)"
        } else {
            "roofline (H100 datasheet ceilings, not measured)"
        };
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((lo_x..hi_x).log_scale(), (lo_y..hi_y).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("FLOP per byte (minimum traffic)")
            .y_desc("TFLOPS")
            .draw()?;
        let ridge = roof.tflops / roof.tbps;
        let roof_line = [
            (lo_x, roof.attainable(lo_x)),
            (ridge, roof.tflops),
            (hi_x, roof.tflops),
        ];
        chart
            .draw_series(LineSeries::new(roof_line, BLACK.stroke_width(2)))?
            .label(format!(
                "roof: {:.0} TFLOPS, {:.2} TB/s",
                roof.tflops, roof.tbps
            ))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK));
        for (li, l) in labels.iter().enumerate() {
            let pts: Vec<Circle<(f64, f64), i32>> = points
                .iter()
                .filter(|p| p.0 == *l && p.2 > 0.0)
                .map(|p| Circle::new((p.1, p.2), 5, colour(li).filled()))
                .collect();
            chart
                .draw_series(pts)?
                .label(*l)
                .legend(move |(x, y)| Circle::new((x + 5, y), 4, colour(li).filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        Ok(())
    })
}

/// Median time across commits (x: commit index) for each named series on one problem, relative
/// to each series' first commit (1 = unchanged), so a small version's regression shows as
/// clearly as a large one's.
pub fn trend_chart(
    problem: &str,
    commits: &[String],
    series: &[(String, Vec<(usize, f64)>)],
) -> String {
    let rel: Vec<(String, Vec<(usize, f64)>)> = series
        .iter()
        .map(|(n, pts)| {
            (
                n.clone(),
                pts.iter().map(|(c, ms)| (*c, ms / pts[0].1)).collect(),
            )
        })
        .collect();
    let hi = rel
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let lo = rel
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0f64, f64::min)
        * 0.9;
    svg(|root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("median time relative to the first commit: {problem}"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(commits.len().max(1) as f64 - 0.5), lo..hi)?;
        chart
            .configure_mesh()
            .x_labels(commits.len().max(1))
            .x_label_formatter(&|x| {
                commits
                    .get(x.round().max(0.0) as usize)
                    .filter(|_| (x - x.round()).abs() < 1e-6)
                    .map(|c| c.chars().take(10).collect())
                    .unwrap_or_default()
            })
            .y_desc("time / first commit's")
            .draw()?;
        for (si, (name, pts)) in rel.iter().enumerate() {
            let line: Vec<(f64, f64)> = pts.iter().map(|(c, ms)| (*c as f64, *ms)).collect();
            chart
                .draw_series(LineSeries::new(line.clone(), colour(si).stroke_width(2)))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 12, y)], colour(si)));
            chart.draw_series(
                line.into_iter()
                    .map(|p| Circle::new(p, 4, colour(si).filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels() {
        let s = ratio_chart(
            &["4096 RC".into()],
            &["simt".into(), "wgmma".into()],
            |_, v| Some(0.1 + v as f64),
        );
        assert!(
            s.starts_with("<svg") && s.contains("wgmma") && s.contains("<rect"),
            "{s}"
        );
        let r = roofline_chart(
            &Roof::datasheet(),
            &[
                ("wgmma".into(), 1365.0, 600.0),
                ("simt".into(), 1365.0, 20.0),
            ],
        );
        assert!(
            r.contains("datasheet") && r.contains("<circle"),
            "{}",
            &r[..r.len().min(400)]
        );
        let t = trend_chart(
            "p",
            &["abc".into(), "def".into()],
            &[("v".into(), vec![(0, 1.0), (1, 1.2)])],
        );
        assert!(t.contains("<polyline") || t.contains("<path"), "{t}");
    }
}
