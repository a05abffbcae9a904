//! Charts drawn with `plotters` into SVG: axes with ticks and units, a grid, and a log scale
//! where values span decades. Titles and legends are HTML around the SVG, so a legend never
//! covers the data and a page's text stays selectable.

use std::fmt::Write;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::page::escape;

const WIDTH: u32 = 600;
const HEIGHT: u32 = 320;

/// Colours that stay apart for the usual colour-vision deficiencies (Okabe-Ito, with grey).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(240, 228, 66),
];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Points joined in order.
    Line,
    /// The same, dashed: a second figure of the same run (throughput beside goodput).
    Dashed,
    /// Held until the next point: CDFs and counts over time.
    Step,
    /// Unjoined points, one per request.
    Dots,
    /// Marks along the bottom edge at each x (the y values are ignored): when requests
    /// were scheduled, rejected or failed.
    Rug,
}

pub struct Series {
    pub name: String,
    pub color: usize,
    pub kind: Kind,
    pub points: Vec<(f64, f64)>,
    /// Shown after the name in the legend, e.g. how many samples a CDF holds.
    pub note: Option<String>,
}

impl Series {
    pub fn new(name: impl Into<String>, color: usize, kind: Kind, points: Vec<(f64, f64)>) -> Self {
        Self { name: name.into(), color, kind, points, note: None }
    }

    /// A CDF of the samples, its legend saying how many there were.
    pub fn cdf(name: impl Into<String>, color: usize, samples: Vec<f64>) -> Self {
        let points = cdf(samples);
        let note = Some(format!("{} samples", points.len()));
        Self { note, ..Self::new(name, color, Kind::Step, points) }
    }

    /// Points, one per request, their legend saying how many.
    pub fn counted(name: impl Into<String>, color: usize, kind: Kind, points: Vec<(f64, f64)>) -> Self {
        let note = Some(points.len().to_string());
        Self { note, ..Self::new(name, color, kind, points) }
    }
}

/// A labelled dashed line across the plot: the knee, an SLO.
/// One too far from the data to widen the axis for is left out, and the legend gives its value.
pub struct Guide {
    pub at: f64,
    pub label: String,
}

impl Guide {
    pub fn new(at: f64, label: impl Into<String>) -> Self {
        Self { at, label: label.into() }
    }
}

/// The values, plus the guides near enough to them (within 5x of their ends) to be worth
/// widening the axis for: an SLO of 100 ms beside TTFTs of 20 ms is, one of 60 s is not.
fn with_near_guides(mut values: Vec<f64>, guides: &[Guide]) -> Vec<f64> {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values.extend(guides.iter().map(|g| g.at).filter(|&at| at >= min / 5.0 && at <= max * 5.0));
    values
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub x_guides: Vec<Guide>,
    pub y_guides: Vec<Guide>,
    /// Start the y axis at zero (counts, rates) rather than at the data.
    pub y_from_zero: bool,
    /// A fixed y range, e.g. 0..=1 for a CDF or 0..=100 for a percentage.
    pub y_range: Option<(f64, f64)>,
    /// Let an axis go logarithmic when its values span more than 20x.
    pub log_x: bool,
    pub log_y: bool,
}

impl Chart {
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            x_guides: Vec::new(),
            y_guides: Vec::new(),
            y_from_zero: false,
            y_range: None,
            log_x: false,
            log_y: false,
        }
    }

    /// The chart as an HTML `<figure>`: caption, SVG, legend.
    pub fn render(&self) -> String {
        let mut html = format!("<figure class=\"chart\"><figcaption>{}</figcaption>", escape(&self.title));
        let xs: Vec<f64> = self.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
        let ys: Vec<f64> =
            self.series.iter().filter(|s| s.kind != Kind::Rug).flat_map(|s| s.points.iter().map(|p| p.1)).collect();
        let xs = with_near_guides(xs, &self.x_guides);
        let ys = with_near_guides(ys, &self.y_guides);
        let axes =
            Axis::fit(&xs, false, None, self.log_x).zip(Axis::fit(&ys, self.y_from_zero, self.y_range, self.log_y));
        match axes.map(|(x, y)| self.svg(x, y)) {
            Some(Ok(svg)) => html.push_str(&svg),
            Some(Err(e)) => {
                let _ = write!(html, "<p class=\"empty\">chart not drawn: {}</p>", escape(&e));
            }
            None => html.push_str("<p class=\"empty\">no data</p>"),
        }
        html.push_str("<ul class=\"legend\">");
        for s in self.series.iter().filter(|s| !s.name.is_empty()) {
            let RGBColor(r, g, b) = PALETTE[s.color % PALETTE.len()];
            let (swatch, paint) = match s.kind {
                Kind::Dots | Kind::Rug => ("dot", "background"),
                Kind::Dashed => ("dash", "border-color"),
                Kind::Line | Kind::Step => ("line", "background"),
            };
            let note = s.note.as_ref().map_or(String::new(), |n| format!(" <small>({})</small>", escape(n)));
            let _ = write!(
                html,
                "<li><span class=\"{swatch}\" style=\"{paint}:rgb({r},{g},{b})\"></span>{}{note}</li>",
                escape(&s.name)
            );
        }
        let off_axis = |g: &&Guide, axis: Option<Axis>| axis.is_some_and(|a| !a.contains(g.at));
        let x_off = self.x_guides.iter().filter(|g| off_axis(g, axes.map(|a| a.0)));
        for g in x_off.chain(self.y_guides.iter().filter(|g| off_axis(g, axes.map(|a| a.1)))) {
            let _ = write!(html, "<li><small>{}: {}, off this axis</small></li>", escape(&g.label), tick(g.at));
        }
        html.push_str("</ul></figure>");
        html
    }

    fn svg(&self, x: Axis, y: Axis) -> Result<String, String> {
        // plotters needs one concrete coordinate type per axis.
        match (x.log, y.log) {
            (false, false) => self.draw(&x, &y, x.lo..x.hi, y.lo..y.hi),
            (true, false) => self.draw(&x, &y, (x.lo..x.hi).log_scale(), y.lo..y.hi),
            (false, true) => self.draw(&x, &y, x.lo..x.hi, (y.lo..y.hi).log_scale()),
            (true, true) => self.draw(&x, &y, (x.lo..x.hi).log_scale(), (y.lo..y.hi).log_scale()),
        }
    }

    fn draw<XR, YR>(&self, x: &Axis, y: &Axis, x_range: XR, y_range: YR) -> Result<String, String>
    where
        XR: AsRangedCoord<Value = f64>,
        YR: AsRangedCoord<Value = f64>,
        XR::CoordDescType: ValueFormatter<f64>,
        YR::CoordDescType: ValueFormatter<f64>,
    {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
            self.draw_on(&root, x, y, x_range, y_range).map_err(|e| e.to_string())?;
            root.present().map_err(|e| e.to_string())?;
        }
        Ok(svg)
    }

    fn draw_on<XR, YR>(
        &self,
        root: &DrawingArea<SVGBackend<'_>, Shift>,
        x: &Axis,
        y: &Axis,
        x_range: XR,
        y_range: YR,
    ) -> Result<(), DrawingAreaErrorKind<<SVGBackend<'_> as DrawingBackend>::ErrorType>>
    where
        XR: AsRangedCoord<Value = f64>,
        YR: AsRangedCoord<Value = f64>,
        XR::CoordDescType: ValueFormatter<f64>,
        YR::CoordDescType: ValueFormatter<f64>,
    {
        root.fill(&WHITE)?;
        let mut ctx = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(62)
            .build_cartesian_2d(x_range, y_range)?;
        let label = |v: &f64| tick(*v);
        ctx.configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&label)
            .y_label_formatter(&label)
            .x_labels(8)
            .y_labels(6)
            .bold_line_style(BLACK.mix(0.12))
            .light_line_style(BLACK.mix(0.04))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .draw()?;
        for s in &self.series {
            let color = PALETTE[s.color % PALETTE.len()];
            // Out-of-range values sit on the edge: plotters does not clip to the plot area.
            let points: Vec<(f64, f64)> = s.points.iter().map(|&(px, py)| (x.clamp(px), y.clamp(py))).collect();
            match s.kind {
                Kind::Line => {
                    ctx.draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?;
                    ctx.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                }
                Kind::Dashed => {
                    ctx.draw_series(DashedLineSeries::new(points.iter().copied(), 8, 5, color.stroke_width(2)))?;
                    ctx.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.stroke_width(1))))?;
                }
                Kind::Step => {
                    ctx.draw_series(LineSeries::new(staircase(&points), color.stroke_width(2)))?;
                }
                Kind::Dots => {
                    ctx.draw_series(points.iter().map(|&p| Circle::new(p, 2, color.mix(0.7).filled())))?;
                }
                Kind::Rug => {
                    // Just above the bottom edge, so a mark never hides in the axis line.
                    let at = y.lift(0.03);
                    ctx.draw_series(points.iter().map(|&(px, _)| Circle::new((px, at), 2, color.filled())))?;
                }
            }
        }
        let guide_style = BLACK.mix(0.55).stroke_width(1);
        let text = ("sans-serif", 12).into_font().color(&BLACK.mix(0.75));
        for (i, g) in self.x_guides.iter().filter(|g| x.contains(g.at)).enumerate() {
            ctx.draw_series(DashedLineSeries::new([(g.at, y.lo), (g.at, y.hi)], 6, 4, guide_style))?;
            // Labels of guides at one x stack instead of overprinting.
            let at = (g.at, y.lift(0.97 - 0.07 * i as f64));
            ctx.draw_series(std::iter::once(Text::new(format!(" {}", g.label), at, text.clone())))?;
        }
        for g in self.y_guides.iter().filter(|g| y.contains(g.at)) {
            ctx.draw_series(DashedLineSeries::new([(x.lo, g.at), (x.hi, g.at)], 6, 4, guide_style))?;
            ctx.draw_series(std::iter::once(Text::new(g.label.clone(), (x.lift(0.01), g.at), text.clone())))?;
        }
        Ok(())
    }
}

/// One axis's extent, and whether it is logarithmic.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    /// Fits the values: from the data (not from zero, unless asked), padded by 5 %; log when
    /// allowed, all values are positive and they span more than 20x, widened to whole decades
    /// so the ticks land on 1-2-5 marks.
    /// A log axis starts at the 1st percentile: a few near-zero gaps (tokens that arrived
    /// together) would otherwise stretch it over decades nobody needs to see.
    fn fit(values: &[f64], from_zero: bool, fixed: Option<(f64, f64)>, allow_log: bool) -> Option<Self> {
        let mut finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if let Some((lo, hi)) = fixed {
            return Some(Self { lo, hi, log: false });
        }
        if finite.is_empty() {
            return None;
        }
        finite.sort_by(f64::total_cmp);
        let (min, max) = (finite[0], finite[finite.len() - 1]);
        let floor = finite[finite.len() / 100];
        if allow_log && !from_zero && floor > 0.0 && max / floor > 20.0 {
            let lo = 10f64.powf(floor.log10().floor());
            let hi = 10f64.powf(max.log10().ceil());
            return Some(Self { lo, hi, log: true });
        }
        let lo = if from_zero { min.min(0.0) } else { min };
        let span = (max - lo).max(max.abs() * 0.1).max(1e-6);
        let lo = if from_zero { lo } else { lo - span * 0.05 };
        Some(Self { lo, hi: max + span * 0.05, log: false })
    }

    fn contains(&self, v: f64) -> bool {
        v >= self.lo && v <= self.hi
    }

    fn clamp(&self, v: f64) -> f64 {
        v.clamp(self.lo, self.hi)
    }

    /// The value at `fraction` of the way up the axis, in the axis's own scale.
    fn lift(&self, fraction: f64) -> f64 {
        if self.log {
            self.lo * (self.hi / self.lo).powf(fraction)
        } else {
            self.lo + (self.hi - self.lo) * fraction
        }
    }
}

/// A staircase through the points: each value holds until the next point's x.
fn staircase(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

/// Tick labels without float noise: 0.30000000000000004 reads 0.3, 12000 reads 12k.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        format!("{}k", trim(v / 1000.0))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{:.3}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// Sorted samples as a CDF: (value, fraction of samples at or below it).
pub fn cdf(mut samples: Vec<f64>) -> Vec<(f64, f64)> {
    samples.retain(|v| v.is_finite());
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    samples.iter().enumerate().map(|(i, &v)| (v, (i + 1) as f64 / n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_fit_the_data_and_go_log_only_across_decades() {
        let narrow = Axis::fit(&[40.0, 50.0, 60.0], false, None, true).unwrap();
        assert!(!narrow.log && narrow.lo > 30.0 && narrow.lo < 40.0 && narrow.hi > 60.0, "{narrow:?}");
        let wide = Axis::fit(&[15.0, 4000.0], false, None, true).unwrap();
        assert_eq!(wide, Axis { lo: 10.0, hi: 10_000.0, log: true });
        let counts = Axis::fit(&[3.0, 9.0], true, None, false).unwrap();
        assert_eq!(counts.lo, 0.0);
        assert!(Axis::fit(&[], false, None, true).is_none());
        // One near-zero value in 200 does not drag a log axis down four decades.
        let mut gaps = vec![10.0; 199];
        gaps.extend([0.001, 900.0]);
        assert_eq!(Axis::fit(&gaps, false, None, true).unwrap(), Axis { lo: 10.0, hi: 1000.0, log: true });
    }

    #[test]
    fn tick_labels_read_cleanly() {
        assert_eq!(tick(0.30000000000000004), "0.3");
        assert_eq!(tick(250.0), "250");
        assert_eq!(tick(12_000.0), "12k");
        assert_eq!(tick(-0.0001), "0");
    }

    #[test]
    fn a_chart_renders_axes_ticks_and_a_legend_outside_the_svg() {
        let mut chart = Chart::new("TTFT CDF", "TTFT (ms)", "fraction of requests");
        chart.y_range = Some((0.0, 1.0));
        chart.log_x = true;
        chart.series.push(Series::cdf("2 req/s", 0, vec![20.0, 45.0, 900.0, 1500.0]));
        chart.x_guides.push(Guide::new(500.0, "SLO"));
        chart.x_guides.push(Guide::new(1e6, "far SLO"));
        let html = chart.render();
        assert!(html.contains("<svg") && html.contains("viewBox"), "{html}");
        // plotters writes each text on its own line.
        assert!(html.contains("\nTTFT (ms)\n") && html.contains("\n1000\n"), "axis label and a decade tick: {html}");
        let svg_end = html.find("</svg>").unwrap();
        assert!(html[svg_end..].contains("2 req/s") && html[svg_end..].contains("4 samples"), "legend after the SVG");
        assert!(html[..svg_end].contains("\n SLO\n"), "a near guide is drawn");
        assert!(html[svg_end..].contains("far SLO: 1000k, off this axis"), "a far one is named: {html}");
        assert!(Chart::new("empty", "x", "y").render().contains("no data"));
    }
}
