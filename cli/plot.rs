//! `--plot FILE.svg`: sweeps (throughput and TTFT against concurrency, the
//! knee and the KV-limited concurrency marked), checks (measured against
//! predicted), tunes (the Pareto front) and single runs (KV usage and
//! running/waiting requests over time). SVG, with no system libraries.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// One line of a sweep plot.
pub struct Series {
    pub label: String,
    /// (concurrency, output tok/s, mean TTFT ms, p99 TTFT ms)
    pub points: Vec<(f64, f64, f64, f64)>,
    pub dashed: bool,
    /// The 90% intervals, shaded: (concurrency, output tok/s p05, p95, mean TTFT ms p05, p95).
    pub band: Option<Vec<(f64, f64, f64, f64, f64)>>,
}

/// A band as one closed polygon: the lower edge left to right, the upper edge back.
fn band_polygon(
    band: &[(f64, f64, f64, f64, f64)],
    lo: impl Fn(&(f64, f64, f64, f64, f64)) -> (f64, f64),
    hi: impl Fn(&(f64, f64, f64, f64, f64)) -> (f64, f64),
) -> Vec<(f64, f64)> {
    band.iter().map(&lo).chain(band.iter().rev().map(&hi)).collect()
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Plots are SVG: a path that does not end in `.svg` is an error (before any run).
pub fn check_path(path: &str) -> Result<(), String> {
    if !(path.to_ascii_lowercase().ends_with(".svg") && path.len() > 4) {
        return Err(format!("--plot {path}: plots are written as SVG; give a file name ending in .svg"));
    }
    // The folder it goes in, checked before anything runs (a missing one failed after the whole
    // run, with the drawing library's "No such file or directory" and no report printed: the
    // robustness audit of 2026-12-07, for simulate, sweep and tune; plan's own check until then).
    let dir = std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(d) = dir.filter(|d| !d.is_dir()) {
        return Err(format!("--plot {path}: no folder {} to write it in", d.display()));
    }
    if std::path::Path::new(path).is_dir() {
        return Err(format!("--plot {path}: a folder of that name is in the way; give a file name"));
    }
    // That the file can be written there: opened for writing now (a read-only file or folder,
    // or /proc, failed after the whole run with no report printed; an audit, 2026-12-07). A file
    // this check creates is removed again; the plot writes it after the run.
    let existed = std::path::Path::new(path).exists();
    match std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path) {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(e) => Err(format!("--plot {path}: cannot write it: {e}")),
    }
}

/// The KV-limited concurrency's line: a colour of its own (not the grid's grey).
const KV_LIMIT: RGBColor = RGBColor(148, 0, 211);
/// The knee's line.
const KNEE: RGBColor = RGBColor(200, 0, 0);

/// A tick label without a spurious `.0` and without six-digit numbers: 100000 → `100k`.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = if v.fract() == 0.0 || v.abs() >= 10.0 { format!("{v:.0}") } else { format!("{v:.2}") };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Milliseconds shown in a sensible unit: (divisor, unit) — seconds past 10 s.
fn ms_unit(max_ms: f64) -> (f64, &'static str) {
    if max_ms >= 10_000.0 {
        (1000.0, "s")
    } else {
        (1.0, "ms")
    }
}

fn err(e: impl std::fmt::Display, path: &str) -> String {
    format!("--plot {path}: {e}")
}

fn vmark(
    chart: &mut ChartContext<SVGBackend, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    x: f64,
    y0: f64,
    y1: f64,
    color: RGBColor,
    label: &str,
) -> Result<(), String> {
    chart
        .draw_series(std::iter::once(PathElement::new(vec![(x, y0), (x, y1)], color.stroke_width(2))))
        .map_err(|e| e.to_string())?
        .label(label.to_string())
        .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], color));
    Ok(())
}

/// Throughput and TTFT against concurrency; `marks` are vertical lines (x, label).
pub fn sweep(path: &str, title: &str, series: &[Series], marks: &[(f64, String)]) -> Result<(), String> {
    check_path(path)?;
    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e, path))?;
    let (top, bottom) = root.split_vertically(350);
    let xmax = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0, f64::max) * 1.05;
    let bands = || series.iter().filter_map(|s| s.band.as_ref()).flatten();
    let tmax =
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain(bands().map(|b| b.2)).fold(1.0, f64::max) * 1.1;
    let lmax_ms = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.3.max(p.2)))
        .chain(bands().map(|b| b.4))
        .fold(1.0, f64::max)
        * 1.1;
    let shaded = if bands().next().is_some() { "; shaded: 90% interval" } else { "" };
    let (div, unit) = ms_unit(lmax_ms);
    let lmax = lmax_ms / div;
    {
        let mut c = ChartBuilder::on(&top)
            .caption(format!("{title}: output throughput{shaded}"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax, 0f64..tmax)
            .map_err(|e| err(e, path))?;
        c.configure_mesh()
            .x_desc("concurrency")
            .y_desc("output tok/s")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(|e| err(e, path))?;
        for (i, s) in series.iter().enumerate() {
            let col = COLORS[i % COLORS.len()];
            if let Some(b) = &s.band {
                let poly = band_polygon(b, |p| (p.0, p.1), |p| (p.0, p.2));
                c.draw_series(std::iter::once(Polygon::new(poly, col.mix(0.15).filled()))).map_err(|e| err(e, path))?;
            }
            let style = if s.dashed { col.stroke_width(1) } else { col.stroke_width(2) };
            c.draw_series(LineSeries::new(s.points.iter().map(|p| (p.0, p.1)), style))
                .map_err(|e| err(e, path))?
                .label(s.label.clone())
                .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], col));
            c.draw_series(s.points.iter().map(|p| Circle::new((p.0, p.1), 3, col.filled())))
                .map_err(|e| err(e, path))?;
        }
        for (k, (x, label)) in marks.iter().enumerate() {
            vmark(&mut c, *x, 0.0, tmax, if k == 0 { KV_LIMIT } else { KNEE }, label)?;
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e, path))?;
    }
    {
        let mut c = ChartBuilder::on(&bottom)
            .caption(
                format!(
                    "TTFT in {unit} (thick: mean, thin: p99{}",
                    if shaded.is_empty() { ")" } else { "; shaded: 90% interval of the mean)" }
                ),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..xmax, 0f64..lmax)
            .map_err(|e| err(e, path))?;
        c.configure_mesh()
            .x_desc("concurrency")
            .y_desc(unit)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(|e| err(e, path))?;
        for (i, s) in series.iter().enumerate() {
            let col = COLORS[i % COLORS.len()];
            if let Some(b) = &s.band {
                let poly = band_polygon(b, |p| (p.0, p.3 / div), |p| (p.0, p.4 / div));
                c.draw_series(std::iter::once(Polygon::new(poly, col.mix(0.15).filled()))).map_err(|e| err(e, path))?;
            }
            c.draw_series(LineSeries::new(s.points.iter().map(|p| (p.0, p.2 / div)), col.stroke_width(2)))
                .map_err(|e| err(e, path))?;
            c.draw_series(LineSeries::new(s.points.iter().map(|p| (p.0, p.3 / div)), col.stroke_width(1)))
                .map_err(|e| err(e, path))?;
        }
        for (k, (x, _)) in marks.iter().enumerate() {
            c.draw_series(std::iter::once(PathElement::new(
                vec![(*x, 0.0), (*x, lmax)],
                if k == 0 { KV_LIMIT.stroke_width(2) } else { KNEE.stroke_width(2) },
            )))
            .map_err(|e| err(e, path))?;
        }
    }
    root.present().map_err(|e| err(e, path))
}

/// Throughput against latency for every configuration (each labelled with its
/// knob values), the Pareto front joined, and the SLO bounds on either axis drawn
/// (`slos`: label, bound, true when on the latency axis).
pub fn pareto(
    path: &str,
    latency: &str,
    all: &[(f64, f64, bool, String)],
    front: &[(f64, f64)],
    slos: &[(String, f64, bool)],
) -> Result<(), String> {
    check_path(path)?;
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e, path))?;
    let lat_max = all.iter().map(|p| p.1).chain(slos.iter().filter(|s| s.2).map(|s| s.1)).fold(1.0, f64::max) * 1.15;
    let thr_max = all.iter().map(|p| p.0).chain(slos.iter().filter(|s| !s.2).map(|s| s.1)).fold(1.0, f64::max) * 1.15;
    let is_ms = latency.ends_with("_ms");
    let (div, unit) = if is_ms { ms_unit(lat_max) } else { (1.0, "") };
    let xmax = lat_max / div;
    let mut c = ChartBuilder::on(&root)
        .caption(format!("output throughput against {latency}"), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..thr_max)
        .map_err(|e| err(e, path))?;
    c.configure_mesh()
        .x_desc(if unit.is_empty() { latency.to_string() } else { format!("{latency} (in {unit})") })
        .y_desc("output tok/s")
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .draw()
        .map_err(|e| err(e, path))?;
    c.draw_series(all.iter().map(|(t, l, ok, _)| {
        Circle::new((l / div, *t), 4, if *ok { COLORS[2].filled() } else { COLORS[3].mix(0.6).filled() })
    }))
    .map_err(|e| err(e, path))?
    .label("configurations (green: meet every SLO)")
    .legend(|(a, b)| Circle::new((a + 10, b), 4, COLORS[2].filled()));
    // Each configuration named by its knob values (at most 40 labels: past that they are unreadable).
    if all.len() <= 40 {
        c.draw_series(all.iter().map(|(t, l, _, label)| {
            Text::new(label.clone(), (l / div, *t), ("sans-serif", 10).into_font().color(&BLACK.mix(0.8)))
        }))
        .map_err(|e| err(e, path))?;
    }
    c.draw_series(LineSeries::new(front.iter().map(|&(t, l)| (l / div, t)), COLORS[0].stroke_width(2)))
        .map_err(|e| err(e, path))?
        .label("Pareto front")
        .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], COLORS[0]));
    for (label, bound, on_latency) in slos {
        let pts = if *on_latency {
            vec![(bound / div, 0.0), (bound / div, thr_max)]
        } else {
            vec![(0.0, *bound), (xmax, *bound)]
        };
        c.draw_series(std::iter::once(PathElement::new(pts, KNEE.stroke_width(2))))
            .map_err(|e| err(e, path))?
            .label(format!("SLO {label}"))
            .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], KNEE));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(e, path))?;
    root.present().map_err(|e| err(e, path))
}

/// KV usage and running/waiting requests over a run.
pub fn timeseries(path: &str, title: &str, samples: &[sim::simulation::GaugeSample]) -> Result<(), String> {
    check_path(path)?;
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e, path))?;
    let (top, bottom) = root.split_vertically(300);
    let tmax = samples.iter().map(|s| s.t_ns as f64 / 1e9).fold(1.0, f64::max);
    {
        let mut c = ChartBuilder::on(&top)
            .caption(format!("{title}: KV cache usage"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..tmax, 0f64..100f64)
            .map_err(|e| err(e, path))?;
        c.configure_mesh()
            .x_desc("seconds")
            .y_desc("%")
            .x_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(|e| err(e, path))?;
        c.draw_series(LineSeries::new(
            samples.iter().map(|s| (s.t_ns as f64 / 1e9, 100.0 * s.kv_usage)),
            COLORS[0].stroke_width(1),
        ))
        .map_err(|e| err(e, path))?;
    }
    {
        let ymax = samples.iter().map(|s| f64::from(s.running.max(s.waiting))).fold(1.0, f64::max) * 1.1;
        let mut c = ChartBuilder::on(&bottom)
            .caption("requests", ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..tmax, 0f64..ymax)
            .map_err(|e| err(e, path))?;
        c.configure_mesh()
            .x_desc("seconds")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(|e| err(e, path))?;
        c.draw_series(LineSeries::new(
            samples.iter().map(|s| (s.t_ns as f64 / 1e9, f64::from(s.running))),
            COLORS[2].stroke_width(1),
        ))
        .map_err(|e| err(e, path))?
        .label("running")
        .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], COLORS[2]));
        c.draw_series(LineSeries::new(
            samples.iter().map(|s| (s.t_ns as f64 / 1e9, f64::from(s.waiting))),
            COLORS[3].stroke_width(1),
        ))
        .map_err(|e| err(e, path))?
        .label("waiting")
        .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], COLORS[3]));
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e, path))?;
    }
    root.present().map_err(|e| err(e, path))
}

/// A progress bar on stderr, drawn only when stderr is a terminal.
pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::with_draw_target(Some(len), indicatif::ProgressDrawTarget::stderr());
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}
