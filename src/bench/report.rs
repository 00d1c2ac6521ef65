//! Benchmark output: `results.json` (every measurement and the machine), `results.md` (the
//! tables), and SVG plots: launch time normalised to cold per app and scenario (FAST fig. 6,
//! Paralfetch fig. 10) and, per app, CPU and disk busy over a cold and a warmstart launch
//! (FAST fig. 7).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use std::collections::BTreeMap;

use super::run::{Results, ScenarioSummary};
use super::sampler::Point;
use super::stats::{PairedRatio, Spread};

fn pct(v: Option<f64>) -> String {
    v.map_or("–".into(), |g| format!("{:.0}%", g * 100.0))
}

/// The Markdown report.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(s, "# warmstart benchmark\n");
    let _ = writeln!(
        s,
        "Machine: Linux {}, {} × {}, {} MiB RAM, disk {} (rotational={:?}, scheduler {}){}. {} rounds, scenarios interleaved per round.\n",
        m.kernel,
        m.cpus,
        m.cpu,
        m.memory_mb,
        m.disk,
        m.disk_rotational,
        m.scheduler,
        match m.launcher_static {
            Some(true) => "; launcher linked statically",
            Some(false) => "; launcher linked dynamically",
            None => "",
        },
        r.rounds
    );
    if !r.apps.is_empty() {
        apps_markdown(r, &mut s);
    }
    loadings_markdown(r, &mut s);
    let errs: Vec<_> = r
        .apps
        .iter()
        .filter_map(|a| a.error.as_ref().map(|e| (a.name.clone(), e)))
        .chain(
            r.loadings
                .iter()
                .filter_map(|l| l.error.as_ref().map(|e| (l.name.clone(), e))),
        )
        .collect();
    if !errs.is_empty() {
        let _ = writeln!(s, "\n## Problems\n");
        for (n, e) in errs {
            let _ = writeln!(s, "- {n}: {e}");
        }
    }
    s
}

/// A paired ratio in points of a gap: (ratio − 1) × the base's normalised time / (1 −
/// warm's), positive is behind. None without both, or when warm is above `max_warm` of cold
/// (no gap to count in).
fn gap_points(base: Option<f64>, warm: Option<f64>, max_warm: f64) -> Option<impl Fn(f64) -> f64> {
    match (base, warm) {
        (Some(b), Some(w)) if w < max_warm => {
            Some(move |ratio: f64| (ratio - 1.0) * b / (1.0 - w) * 100.0)
        }
        _ => None,
    }
}

/// One row of a paired table: `label`, the ratio, its interval, the slower pairs, and the same
/// in points where `points` counts them.
fn paired_row(s: &mut String, label: &str, p: &PairedRatio, points: Option<impl Fn(f64) -> f64>) {
    let behind = points.map_or("–".into(), |f| {
        format!("{:+.1} ({:+.1} to {:+.1})", f(p.ratio), f(p.lo), f(p.hi))
    });
    let _ = writeln!(
        s,
        "| {label} | {:.3} | {:.3}-{:.3} | {} of {} | {behind} |",
        p.ratio, p.lo, p.hi, p.slower, p.pairs
    );
}

/// Each scenario against `warmstart`, paired by app and round, also in points of the gap at
/// the suite's means: (ratio − 1) × warmstart's normalised time / (1 − warm's).
fn paired_markdown(r: &Results, s: &mut String) {
    use super::run::PAIRED_BASE;
    if r.paired.is_empty() {
        return;
    }
    let norm = |n: &str| r.geomean.get(n).and_then(|g| g.normalized);
    let points = gap_points(norm(PAIRED_BASE), norm("warm"), 1.0);
    let _ = writeln!(
        s,
        "\n## Paired against `{PAIRED_BASE}`\n\nEach launch over the `{PAIRED_BASE}` launch of the \
         same app in the same round (the VM's speed drifts between rounds by more than most \
         differences between scenarios): the geometric mean of those ratios over every app's \
         rounds, its 90% interval (each app's rounds redrawn from its own), the pairs in which \
         the scenario was slower, and the same mean in points of the gap at the suite's means, \
         (ratio − 1) × `{PAIRED_BASE}`'s normalised time / (1 − warm's): positive is behind.\n"
    );
    let _ = writeln!(
        s,
        "| scenario | time over `{PAIRED_BASE}` | 90% interval | slower in | points behind (interval) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for sc in &r.scenarios {
        let Some(p) = r.paired.get(sc) else { continue };
        paired_row(s, sc, p, points.as_ref());
    }
}

/// The daemon against `warmstart` app by app (issue #26: no app more than 10 points
/// behind), in points of that app's own gap: (ratio − 1) × its `warmstart` normalised time
/// / (1 − its warm's). An app whose cold-warm gap is under 5% of its cold time has no
/// points (a few ms of noise would be tens of them).
fn daemon_by_app_markdown(r: &Results, s: &mut String) {
    use super::run::{paired_by_app, PAIRED_BASE};
    const SCENARIO: &str = "daemon";
    if !r.scenarios.iter().any(|x| x == SCENARIO) {
        return;
    }
    let rows = paired_by_app(&r.apps, SCENARIO, PAIRED_BASE);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## `{SCENARIO}` against `{PAIRED_BASE}`, app by app\n\nAs above, one app's rounds at a \
         time (its rounds redrawn for the 90% interval), and in points of that app's own gap: \
         positive is behind. With a few rounds per app the interval is wide: an app is behind \
         only where all of its interval is.\n"
    );
    let _ = writeln!(
        s,
        "| app | time over `{PAIRED_BASE}` | 90% interval | slower in | points behind (interval) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for (app, p) in rows {
        let norm = |sc: &str| {
            app.summary
                .get(sc)
                .filter(|x| x.n > 0)
                .map(|x| x.normalized)
        };
        paired_row(
            s,
            &app.name,
            &p,
            gap_points(norm(PAIRED_BASE), norm("warm"), 0.95),
        );
    }
}

/// The launch tables: times, means, overheads, accuracy, adaptation, apps together.
fn apps_markdown(r: &Results, s: &mut String) {
    let _ = writeln!(
        s,
        "## Launch time (median ms; in brackets: normalised to cold, and gap closed)\n"
    );
    let _ = write!(s, "| app |");
    for sc in &r.scenarios {
        let _ = write!(s, " {sc} |");
    }
    let _ = writeln!(s, " t_bound |");
    let _ = writeln!(s, "|---|{}---:|", "---:|".repeat(r.scenarios.len()));
    for a in &r.apps {
        let _ = write!(s, "| {} |", a.name);
        if let Some(e) = &a.error {
            if a.summary.is_empty() {
                let _ = writeln!(s, " error: {} |", e.replace('|', "/"));
                continue;
            }
        }
        for sc in &r.scenarios {
            match a.summary.get(sc) {
                Some(x) if x.n > 0 => {
                    let extra = if sc == "cold" || sc == "warm" {
                        String::new()
                    } else {
                        format!(" ({:.2}, {})", x.normalized, pct(x.gap_closed))
                    };
                    let fail = if x.failed > 0 {
                        format!(" ⚠{}", x.failed)
                    } else {
                        String::new()
                    };
                    let _ = write!(s, " {:.0}{extra}{fail} |", x.median_ms);
                }
                _ => {
                    let _ = write!(s, " – |");
                }
            }
        }
        let _ = writeln!(
            s,
            " {} |",
            a.t_bound_ms.map_or("–".into(), |t| format!("{t:.0}"))
        );
    }
    let _ = writeln!(
        s,
        "\n## Across apps (geometric means; gap closed from the mean normalised times)\n"
    );
    let _ = writeln!(s, "| scenario | normalised time | gap closed |");
    let _ = writeln!(s, "|---|---:|---:|");
    for sc in &r.scenarios {
        if let Some(g) = r.geomean.get(sc) {
            let _ = writeln!(
                s,
                "| {sc} | {} | {} |",
                g.normalized.map_or("–".into(), |v| format!("{v:.3}")),
                pct(g.gap_closed)
            );
        }
    }
    paired_markdown(r, s);
    daemon_by_app_markdown(r, s);
    let _ = writeln!(s, "\n## Overheads\n");
    let _ = writeln!(
        s,
        "Warm overhead: a warm launch through warmstart against a plain warm one, the median of \
         the rounds' differences (both run seconds apart in each round). Front: the same launch's \
         time from the kernel's exec of `warmstart` to its exec of the app (median of the rounds), \
         free of the launch's own spread.\n"
    );
    let _ = writeln!(s, "| app | learning slowdown | plan build ms | plan bytes | plan data | warm overhead ms | front ms | prefetcher peak RSS | resolved |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for a in &r.apps {
        let o = &a.overhead;
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {:.1} MiB | {} | {} | {} | {:.2}% |",
            a.name,
            o.learning_slowdown
                .map_or("–".into(), |v| format!("{v:.2}×")),
            o.plan_build_ms,
            o.plan_bytes,
            a.plan_data_bytes as f64 / 1048576.0,
            o.warm_overhead_ms
                .map_or("–".into(), |v| format!("{v:+.1}")),
            o.front_exec_ms.map_or("–".into(), |v| format!("{v:.2}")),
            o.prefetcher_peak_rss_kb
                .map_or("–".into(), |v| format!("{:.1} MiB", v as f64 / 1024.0)),
            a.resolved_fraction * 100.0
        );
    }
    if r.apps.iter().any(|a| {
        a.accuracy.floor.is_some()
            || !a.accuracy.floor_rounds.is_empty()
            || a.accuracy.miss_ratio.is_some()
    }) {
        let _ = writeln!(
            s,
            "\n## Prefetch speed and plan accuracy\n\n\
             Floor: what the device needs at best for the plan (its data read with O_DIRECT at \
             the best queue depth, its metadata blocks at that depth's 4 KiB rate, its longest \
             chain of dependent metadata reads at depth-1 latency; `warmstart plan floor`), \
             measured again after each round's prefetch-only launch: the columns give the \
             medians over rounds of the floor and of each round's prefetch over its own \
             floor. Miss ratio, waste, inversions and waits: one traced prefetched launch after the \
             rounds (`warmstart explain --no-cold`).\n"
        );
        let _ = writeln!(
            s,
            "| app | prefetch-only ms | floor ms | × floor | miss ratio | waste | inversions | off-CPU ms (traced) | largest waits (ms) |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---|");
        let mut within = (0, 0);
        for a in &r.apps {
            let acc = &a.accuracy;
            let po = a
                .summary
                .get("prefetch-only")
                .filter(|p| p.n > 0)
                .map(|p| p.median_ms);
            // Each round's prefetch over that round's floor where the run measured one per
            // round; older results have the one floor measured after learning.
            let per_round: Vec<f64> = acc.floor_rounds.iter().map(|r| r.1).collect();
            let fl = Spread::of(&per_round)
                .map(|s| s.median)
                .or(acc.floor.as_ref().map(|f| f.floor_ms));
            let ratio = acc.floor_ratio.or(match (po, fl) {
                (Some(p), Some(f)) if f > 0.0 => Some(p / f),
                _ => None,
            });
            if let Some(x) = ratio {
                within.1 += 1;
                if x <= 1.5 {
                    within.0 += 1;
                }
            }
            let f1 = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
            let waits: Vec<String> = acc
                .top_waits
                .iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                a.name,
                f1(po),
                f1(fl),
                ratio.map_or("–".into(), |x| format!("{x:.2}")),
                acc.miss_ratio
                    .map_or("–".into(), |v| format!("{:.1}%", v * 100.0)),
                acc.waste
                    .map_or("–".into(), |v| format!("{:.1}%", v * 100.0)),
                match (acc.inversions, acc.needed_entries) {
                    (Some(i), Some(n)) => format!("{i} of {n}"),
                    _ => "–".into(),
                },
                f1(acc.off_cpu_ms),
                if waits.is_empty() {
                    acc.error.clone().unwrap_or_else(|| "–".into())
                } else {
                    waits.join("; ")
                }
            );
        }
        if within.1 > 0 {
            let _ = writeln!(
                s,
                "\nPrefetch-only within 1.5× of the floor: {} of {} apps.",
                within.0, within.1
            );
        }
    }
    if r.apps.iter().any(|a| !a.last_io_ms.is_empty()) {
        let _ = writeln!(s, "\n## Last disk activity before ready (round 1, ms; the papers' launch end, at 10 ms sampling)\n");
        let _ = writeln!(s, "| app | cold | warmstart |");
        let _ = writeln!(s, "|---|---:|---:|");
        for a in &r.apps {
            let g = |k: &str| {
                a.last_io_ms
                    .get(k)
                    .map_or("–".into(), |v| format!("{v:.0}"))
            };
            let _ = writeln!(s, "| {} | {} | {} |", a.name, g("cold"), g("warmstart"));
        }
    }
    if r.apps.iter().any(|a| a.adapt.auto_strategy.is_some()) {
        let _ = writeln!(
            s,
            "\n## Adaptation after the run (Paralfetch dynamic scheduling; auto's choice)\n"
        );
        let _ = writeln!(
            s,
            "Emulated order: the strategies as `warmstart emulate` ranked them after learning \
             (auto times only the first two). Auto's launches: its cold launches in this run, \
             and in brackets those on a strategy whose median here is more than 5% slower than \
             the best strategy's.\n"
        );
        let _ = writeln!(
            s,
            "| app | paralfetch raises | shift KiB | I/O distance | emulated order | auto's launches (worse) | auto uses | why |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---|---:|---|---|");
        for a in &r.apps {
            let d = &a.adapt;
            let o = |v: Option<u64>| v.map_or("–".into(), |v| v.to_string());
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                a.name,
                d.paralfetch_raises,
                o(d.shift_kib),
                o(d.distance),
                if d.emulated.is_empty() {
                    "–".to_string()
                } else {
                    d.emulated.join(" < ")
                },
                d.auto_on_worse(&a.summary)
                    .map_or("–".into(), |(n, w)| format!("{n} ({w})")),
                d.auto_strategy.as_deref().unwrap_or("–"),
                d.auto_reason.as_deref().unwrap_or("").replace('|', "/")
            );
        }
    }
    if !r.together.is_empty() {
        let _ = writeln!(
            s,
            "\n## K applications launched together (FAST fig. 8; median ms until all are ready)\n"
        );
        let _ = writeln!(s, "| K | apps | cold | warmstart | speedup |");
        let _ = writeln!(s, "|---:|---|---:|---:|---:|");
        for t in &r.together {
            let c = super::stats::Spread::of(&t.cold_ms).map(|x| x.median);
            let w = super::stats::Spread::of(&t.warmstart_ms).map(|x| x.median);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                t.k,
                t.apps.join(", "),
                c.map_or("–".into(), |v| format!("{v:.0}")),
                w.map_or("–".into(), |v| format!("{v:.0}")),
                match (c, w) {
                    (Some(c), Some(w)) if w > 0.0 => format!("{:.2}×", c / w),
                    _ => "–".into(),
                }
            );
        }
    }
}

fn loadings_markdown(r: &Results, s: &mut String) {
    if r.loadings.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n## Loadings of running applications (ClusterFetch; median ms, in brackets: normalised to cold, and loading gap closed)\n"
    );
    let _ = writeln!(
        s,
        "A running application is told to load (a line on its stdin); timed to the line that says it is done. \
         cold: the page cache dropped after it started; warm: a new process loading right after; \
         bursts: cold, with the daemon (bursts only) holding what it mined from {} earlier cold loadings.\n",
        crate::bench::loading::LEARN_LOADINGS
    );
    let _ = writeln!(s, "| loading | cold | warm | bursts | bursts learned (trigger: size) | after the rounds (hits, last check) |");
    let _ = writeln!(s, "|---|---:|---:|---:|---|---|");
    let cell = |l: &crate::bench::loading::LoadingResult, sc: &str| match l.summary.get(sc) {
        Some(x) if x.n > 0 => match x.gap_closed {
            Some(g) if sc == "bursts" => {
                format!(
                    "{:.0} ({:.2}, {:.0}%)",
                    x.median_ms,
                    x.normalized,
                    g * 100.0
                )
            }
            _ => format!("{:.0}", x.median_ms),
        },
        _ => "–".into(),
    };
    let name_of = |p: &std::path::Path| {
        p.file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    for l in &r.loadings {
        let learned: Vec<String> = l
            .learned
            .iter()
            .map(|b| {
                format!(
                    "{}: {:.1} MiB",
                    name_of(&b.trigger),
                    b.bytes as f64 / 1048576.0
                )
            })
            .collect();
        let after: Vec<String> = l
            .after
            .iter()
            .filter(|b| b.hits > 0)
            .map(|b| {
                format!(
                    "{} {} hits, {}{}",
                    name_of(&b.trigger),
                    b.hits,
                    b.last_check.as_deref().unwrap_or("unchecked"),
                    if b.active { "" } else { " (inactive)" }
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            l.name,
            cell(l, "cold"),
            cell(l, "warm"),
            cell(l, "bursts"),
            if learned.is_empty() {
                "none".into()
            } else {
                learned.join("; ")
            },
            if after.is_empty() {
                "none used".into()
            } else {
                after.join("; ")
            },
        );
    }
}

fn plot_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(80, 80, 80),
    RGBColor(44, 160, 44),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// Grouped bars: per app, each scenario's median normalised to cold.
pub fn normalized_svg(r: &Results, path: &Path) -> std::io::Result<()> {
    let scen: Vec<&str> = r
        .scenarios
        .iter()
        .map(String::as_str)
        .filter(|s| *s != "warm+warmstart")
        .collect();
    let apps: Vec<(&str, &BTreeMap<String, ScenarioSummary>)> = r
        .apps
        .iter()
        .filter(|a| !a.summary.is_empty())
        .map(|a| (a.name.as_str(), &a.summary))
        .collect();
    bars_svg(
        "Launch time normalised to cold (lower is better)",
        &apps,
        &scen,
        path,
    )
}

/// Grouped bars: per loading, cold, warm and bursts normalised to cold.
pub fn loadings_svg(r: &Results, path: &Path) -> std::io::Result<()> {
    let groups: Vec<(&str, &BTreeMap<String, ScenarioSummary>)> = r
        .loadings
        .iter()
        .filter(|l| !l.summary.is_empty())
        .map(|l| (l.name.as_str(), &l.summary))
        .collect();
    bars_svg(
        "Loading time of a running application normalised to cold (lower is better)",
        &groups,
        &crate::bench::loading::SCENARIOS,
        path,
    )
}

fn bars_svg(
    caption: &str,
    apps: &[(&str, &BTreeMap<String, ScenarioSummary>)],
    scen: &[&str],
    path: &Path,
) -> std::io::Result<()> {
    let w = (160 + apps.len() * (scen.len() * 14 + 30)).max(640) as u32;
    let root = SVGBackend::new(path, (w, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let ymax = apps
        .iter()
        .flat_map(|(_, summary)| {
            scen.iter()
                .filter_map(|s| summary.get(*s).map(|x| x.normalized))
        })
        .fold(1.2f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(50)
        // Headroom above the bars for the legend.
        .build_cartesian_2d(0f64..apps.len().max(1) as f64, -ymax * 0.08..ymax * 1.45)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("time / cold")
        .draw()
        .map_err(plot_err)?;
    // Category labels centred under each app's group of bars.
    chart
        .draw_series(apps.iter().enumerate().map(|(i, (name, _))| {
            Text::new(
                name.to_string(),
                (i as f64 + 0.5, -ymax * 0.03),
                ("sans-serif", 13).into_font().color(&BLACK).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Top,
                    ),
                ),
            )
        }))
        .map_err(plot_err)?;
    let bw = 0.8 / scen.len().max(1) as f64;
    for (si, sc) in scen.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let bars = apps.iter().enumerate().filter_map(|(ai, (_, summary))| {
            let v = summary.get(*sc)?.normalized;
            let x0 = ai as f64 + 0.1 + si as f64 * bw;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + bw * 0.9, v)],
                color.filled(),
            ))
        });
        chart
            .draw_series(bars)
            .map_err(plot_err)?
            .label(*sc)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, 1.0), (apps.len() as f64, 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(plot_err)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// Centred moving average over `w` samples (the CPU counters tick every 10 ms).
fn smooth(pts: &[Point], w: usize) -> Vec<Point> {
    let h = w / 2;
    (0..pts.len())
        .map(|i| {
            let win = &pts[i.saturating_sub(h)..(i + h + 1).min(pts.len())];
            let n = win.len() as f64;
            Point {
                t_ms: pts[i].t_ms,
                cpu_busy: win.iter().map(|p| p.cpu_busy).sum::<f64>() / n,
                disk_busy: win.iter().map(|p| p.disk_busy).sum::<f64>() / n,
            }
        })
        .collect()
}

/// CPU busy (in CPUs) and disk busy (0..1) over a cold and a warmstart launch of one app.
pub fn timeline_svg(
    app: &str,
    series: &[(&str, &[Point])],
    cpus: usize,
    path: &Path,
) -> std::io::Result<()> {
    let root =
        SVGBackend::new(path, (900, 200 * series.len().max(1) as u32 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let (title, body) = root.split_vertically(30);
    title
        .draw_text(
            &format!("{app}: CPU busy (blue, in CPUs) and disk busy (red, full height = 100%) over the launch"),
            &("sans-serif", 16).into_text_style(&title),
            (10, 8),
        )
        .map_err(plot_err)?;
    let tmax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.t_ms))
        .fold(1.0f64, f64::max);
    for ((name, pts), area) in series
        .iter()
        .zip(body.split_evenly((series.len().max(1), 1)))
    {
        let mut chart = ChartBuilder::on(&area)
            .caption(*name, ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..tmax, 0f64..cpus.max(1) as f64 * 1.05)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("ms since launch")
            .draw()
            .map_err(plot_err)?;
        let pts = smooth(pts, 3);
        chart
            .draw_series(
                AreaSeries::new(
                    pts.iter().map(|p| (p.t_ms, p.disk_busy * cpus as f64)),
                    0.0,
                    RED.mix(0.25),
                )
                .border_style(RED),
            )
            .map_err(plot_err)?;
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.t_ms, p.cpu_busy)),
                BLUE.stroke_width(2),
            ))
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)
}

/// The prefetcher's timeline against the launch's needs, by plan position: when each data
/// entry was issued and read, and when the launch first needed it (from `explain`).
pub fn plan_timeline_svg(
    app: &str,
    timeline: &[(Option<f64>, Option<f64>, Option<f64>)],
    path: &Path,
) -> std::io::Result<()> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let tmax = timeline
        .iter()
        .flat_map(|(a, b, c)| [*a, *b, *c])
        .flatten()
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{app}: plan entries issued (blue), read (green), first needed by the launch (red)"
            ),
            ("sans-serif", 15),
        )
        .margin(10)
        .x_label_area_size(32)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..timeline.len().max(1) as f64, 0f64..tmax * 1.05)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("plan data entry (plan order)")
        .y_desc("ms since launch")
        .draw()
        .map_err(plot_err)?;
    for (k, color) in [(0usize, BLUE), (1, GREEN), (2, RED)] {
        chart
            .draw_series(timeline.iter().enumerate().filter_map(|(i, t)| {
                let v = [t.0, t.1, t.2][k]?;
                Some(Circle::new((i as f64, v), 2, color.filled()))
            }))
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)
}

/// Write results.json, results.md and the SVG plots into `dir`.
pub fn write_all(r: &Results, dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let j = dir.join("results.json");
    std::fs::write(&j, serde_json::to_string_pretty(r).map_err(plot_err)?)?;
    written.push(j);
    let m = dir.join("results.md");
    std::fs::write(&m, markdown(r))?;
    written.push(m);
    if !r.apps.is_empty() {
        let n = dir.join("normalized.svg");
        normalized_svg(r, &n)?;
        written.push(n);
    }
    if r.loadings.iter().any(|l| !l.summary.is_empty()) {
        let l = dir.join("loadings.svg");
        loadings_svg(r, &l)?;
        written.push(l);
    }
    for a in &r.apps {
        let series: Vec<(&str, &[Point])> = ["cold", "warmstart"]
            .iter()
            .filter_map(|k| a.timeline.get(*k).map(|p| (*k, p.as_slice())))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        if !series.is_empty() {
            let p = dir.join(format!("timeline-{}.svg", a.name));
            timeline_svg(&a.name, &series, r.machine.cpus, &p)?;
            written.push(p);
        }
        if !a.accuracy.timeline.is_empty() {
            let p = dir.join(format!("plan-{}.svg", a.name));
            plan_timeline_svg(&a.name, &a.accuracy.timeline, &p)?;
            written.push(p);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::run::{
        AppResult, GeoRow, Machine, Measurement, ScenarioSummary, TogetherResult,
    };
    use std::collections::BTreeMap;

    fn sample() -> Results {
        let mut a = AppResult {
            name: "app1".into(),
            command: vec!["x".into()],
            ..AppResult::default()
        };
        for (sc, ms) in [
            ("cold", 1000.0),
            ("warm", 500.0),
            ("warmstart", 600.0),
            ("daemon", 660.0),
        ] {
            a.samples.push(Measurement {
                scenario: sc.into(),
                round: 1,
                ms,
                ready: true,
            });
            a.summary.insert(
                sc.into(),
                ScenarioSummary {
                    median_ms: ms,
                    min_ms: ms,
                    max_ms: ms,
                    n: 1,
                    failed: 0,
                    normalized: ms / 1000.0,
                    gap_closed: Some((1000.0 - ms) / 500.0),
                },
            );
        }
        a.timeline.insert(
            "cold".into(),
            (0..50)
                .map(|i| Point {
                    t_ms: i as f64 * 5.0,
                    cpu_busy: 0.5,
                    disk_busy: (i % 2) as f64,
                })
                .collect(),
        );
        a.timeline.insert(
            "warmstart".into(),
            (0..30)
                .map(|i| Point {
                    t_ms: i as f64 * 5.0,
                    cpu_busy: 1.0,
                    disk_busy: 0.2,
                })
                .collect(),
        );
        // Floors of 100 and 300 ms in two rounds: the median of each round's ratio, not
        // prefetch-only's median over the floors' median (150 / 200).
        a.summary.insert(
            "prefetch-only".into(),
            ScenarioSummary {
                median_ms: 150.0,
                min_ms: 120.0,
                max_ms: 180.0,
                n: 2,
                failed: 0,
                normalized: 0.15,
                gap_closed: None,
            },
        );
        a.accuracy.floor_rounds = vec![(1, 100.0), (2, 300.0)];
        a.accuracy.floor_ratio = Some(1.2);
        let mut geo = BTreeMap::new();
        geo.insert(
            "warmstart".into(),
            GeoRow {
                normalized: Some(0.6),
                gap_closed: Some(0.8),
            },
        );
        geo.insert(
            "warm".into(),
            GeoRow {
                normalized: Some(0.5),
                gap_closed: Some(1.0),
            },
        );
        let scenarios: Vec<String> = ["cold", "warm", "warmstart", "daemon"]
            .map(String::from)
            .to_vec();
        let paired = crate::bench::run::paired_against(
            std::slice::from_ref(&a),
            &scenarios,
            crate::bench::run::PAIRED_BASE,
        );
        Results {
            machine: Machine {
                kernel: "6.18".into(),
                cpu: "test cpu".into(),
                cpus: 2,
                memory_mb: 1024,
                disk: "vda".into(),
                disk_rotational: Some(true),
                scheduler: "mq-deadline".into(),
                launcher_static: Some(true),
            },
            rounds: 1,
            scenarios,
            apps: vec![
                a,
                AppResult {
                    name: "broken".into(),
                    error: Some("not installed".into()),
                    ..AppResult::default()
                },
            ],
            geomean: geo,
            paired,
            together: vec![TogetherResult {
                k: 2,
                apps: vec!["app1".into(), "x".into()],
                cold_ms: vec![2000.0],
                warmstart_ms: vec![1000.0],
            }],
            loadings: vec![loading()],
        }
    }

    fn loading() -> crate::bench::loading::LoadingResult {
        use crate::bench::loading::{LoadingBurst, LoadingResult};
        let mut l = LoadingResult {
            name: "load1".into(),
            command: vec!["py".into()],
            learned: vec![LoadingBurst {
                trigger: "/srv/p/project.cfg".into(),
                bytes: 64 << 20,
                hits: 0,
                active: true,
                last_check: None,
            }],
            ..LoadingResult::default()
        };
        for (sc, ms) in [("cold", 2000.0), ("warm", 1000.0), ("bursts", 1200.0)] {
            l.samples.push(Measurement {
                scenario: sc.into(),
                round: 1,
                ms,
                ready: true,
            });
        }
        l.after = l.learned.clone();
        l.after[0].hits = 5;
        l.after[0].last_check = Some("99% used".into());
        l.summarize();
        l
    }

    #[test]
    fn markdown_has_the_tables() {
        let md = markdown(&sample());
        assert!(
            md.contains("mq-deadline); launcher linked statically. 1 rounds"),
            "{md}"
        );
        assert!(
            md.contains("| app1 | 1000 | 500 | 600 (0.60, 80%) |"),
            "{md}"
        );
        assert!(md.contains("| warmstart | 0.600 | 80% |"), "{md}");
        // 660 against 600 in the same round: 10% longer, 12 points of a 0.6-to-0.5 gap.
        assert!(
            md.contains("| daemon | 1.100 | 1.100-1.100 | 1 of 1 | +12.0 (+12.0 to +12.0) |"),
            "{md}"
        );
        assert!(md.contains("| cold | 1.667 |"), "{md}");
        // The same pair, app by app, in that app's own gap (here the suite's).
        assert!(
            md.contains("| app1 | 1.100 | 1.100-1.100 | 1 of 1 | +12.0 (+12.0 to +12.0) |"),
            "{md}"
        );
        assert!(md.contains("error: not installed"), "{md}");
        assert!(md.contains("| 2 | app1, x | 2000 | 1000 | 2.00× |"), "{md}");
        assert!(md.contains("## Overheads"));
        assert!(md.contains("| app1 | 150 | 200 | 1.20 |"), "{md}");
        assert!(md.contains("within 1.5× of the floor: 1 of 1 apps"), "{md}");
        assert!(
            md.contains("| load1 | 2000 | 1000 | 1200 (0.60, 80%) | project.cfg: 64.0 MiB | project.cfg 5 hits, 99% used |"),
            "{md}"
        );
    }

    #[test]
    fn writes_json_md_and_svgs() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_all(&sample(), dir.path()).unwrap();
        assert_eq!(files.len(), 5);
        let j: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("results.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(j["apps"][0]["samples"].as_array().unwrap().len(), 4);
        assert_eq!(j["paired"]["daemon"]["pairs"], 1);
        assert_eq!(j["machine"]["cpus"], 2);
        for f in ["normalized.svg", "timeline-app1.svg", "loadings.svg"] {
            let svg = std::fs::read_to_string(dir.path().join(f)).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{f}");
            assert!(
                svg.contains("<rect") || svg.contains("<polyline") || svg.contains("<path"),
                "{f} draws nothing"
            );
        }
    }
}
