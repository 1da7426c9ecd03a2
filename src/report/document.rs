//! The report as a document: sections of paragraphs, tables and charts built once from the store,
//! then rendered to a markdown file (charts as SVG files beside it) and to a self-contained HTML
//! page (charts inline).

use std::path::{Path, PathBuf};

use super::charts;
use super::data::ReportData;
use super::grid::Grid;
use crate::error::{Error, Result};
use crate::store::{kiln_commit, utc_now, Store};
use crate::tools::ledger::{Experiment, Ledger};
use crate::tools::ledger_text;

pub enum Block {
    Para(String),
    Grid(Grid),
    /// `name` is the chart's file stem; `svg` its text.
    Chart {
        name: String,
        title: String,
        svg: String,
    },
}

pub struct Section {
    pub title: String,
    pub blocks: Vec<Block>,
}

pub struct Document {
    pub title: String,
    pub meta: String,
    pub sections: Vec<Section>,
}

fn section(title: &str, blocks: Vec<Block>) -> Section {
    Section {
        title: title.into(),
        blocks,
    }
}

/// Builds the report; `order` lists versions slowest rung first (others follow, sorted).
pub fn build(data: &ReportData, exps: &[Experiment], order: &[String], meta: String) -> Document {
    let problems = data.problems();
    let latest = data.latest();
    let mut versions: Vec<String> = order
        .iter()
        .filter(|v| data.points.iter().any(|p| &p.version == *v))
        .cloned()
        .collect();
    let mut extra: Vec<String> = data
        .points
        .iter()
        .map(|p| p.version.clone())
        .filter(|v| !order.contains(v))
        .collect();
    extra.sort();
    extra.dedup();
    versions.extend(extra);

    let mut ladder = Grid::new(
        &std::iter::once("version".to_string())
            .chain(problems.iter().cloned())
            .collect::<Vec<_>>(),
    );
    for v in &versions {
        let mut cells = vec![v.clone()];
        for p in &problems {
            cells.push(match latest.get(&(p.clone(), v.clone())) {
                Some(b) => format!(
                    "{:.1} TFLOPS ({})",
                    b.tflops,
                    b.ratio_to_vendor
                        .map(|r| format!("{r:.2}x vendor"))
                        .unwrap_or_else(|| "no vendor".into())
                ),
                None => "-".into(),
            });
        }
        ladder.row(&cells);
    }
    let mut sections = Vec::new();
    if data.points.is_empty() {
        let none =
            "No GEMM timings in the store yet: run `kiln bench --all` or `kiln suite` on a GPU.";
        sections.push(section("GEMM ladder", vec![Block::Para(none.into())]));
    } else {
        sections.push(section("GEMM ladder", vec![Block::Para("The newest timing of each version on each problem: TFLOPS, and the ratio to the vendor timed in the same run (vendor ms / version ms).".into()), Block::Grid(ladder)]));
        let ratio = charts::ratio_chart(&problems, &versions, |s, v| {
            latest
                .get(&(problems[s].clone(), versions[v].clone()))
                .and_then(|b| b.ratio_to_vendor)
        });
        sections.push(section(
            "Ratio to the vendor per shape",
            vec![Block::Chart {
                name: "ratio".into(),
                title: "ratio to the vendor per shape".into(),
                svg: ratio,
            }],
        ));
        sections.push(roofline(data, &versions, &problems));
        sections.push(trends(data, &versions, &problems));
    }
    let log = ledger_text::iteration_log(exps);
    sections.push(section(
        "Experiment log",
        vec![if log.is_empty() {
            Block::Para("No experiments yet (`kiln exp new`).".into())
        } else {
            Block::Grid(log)
        }],
    ));
    let dead = ledger_text::eliminated(exps);
    sections.push(section(
        "Eliminated ideas",
        vec![if dead.is_empty() {
            Block::Para("None so far.".into())
        } else {
            Block::Grid(dead)
        }],
    ));
    Document {
        title: "kiln report".into(),
        meta,
        sections,
    }
}

fn roofline(data: &ReportData, versions: &[String], problems: &[String]) -> Section {
    let latest = data.latest();
    let mut g = Grid::new(&[
        "version",
        "problem",
        "FLOP/byte",
        "TFLOPS",
        "roof TFLOPS",
        "of roof",
        "bound by",
    ]);
    let mut pts = Vec::new();
    for v in versions {
        for p in problems {
            let Some(b) = latest.get(&(p.clone(), v.clone())) else {
                continue;
            };
            let ai = b.intensity();
            let roof = data.roof.attainable(ai);
            let bound = if ai * data.roof.tbps < data.roof.tflops {
                "memory"
            } else {
                "compute"
            };
            g.row(&[
                v.clone(),
                p.clone(),
                format!("{ai:.0}"),
                format!("{:.1}", b.tflops),
                format!("{roof:.0}"),
                format!("{:.1}%", 100.0 * b.tflops / roof),
                bound.to_string(),
            ]);
            pts.push((v.clone(), ai, b.tflops));
        }
    }
    let svg = charts::roofline_chart(&data.roof, &pts);
    section(
        "Roofline",
        vec![
            Block::Para(format!("Ceilings: {}.", data.roof.source)),
            Block::Grid(g),
            Block::Chart {
                name: "roofline".into(),
                title: "roofline".into(),
                svg,
            },
        ],
    )
}

fn trends(data: &ReportData, versions: &[String], problems: &[String]) -> Section {
    let regs = data.regressions();
    let mut blocks = vec![Block::Para(format!("Commits, oldest first: {}. A version/problem whose median time rose more than {}% from one commit to the next is flagged.", data.commits.join(", "), super::data::REGRESSION_PCT))];
    if regs.is_empty() {
        blocks.push(Block::Para("No regressions.".into()));
    } else {
        let mut g = Grid::new(&[
            "flag",
            "version",
            "problem",
            "from",
            "to",
            "median ms",
            "rise",
        ]);
        for r in &regs {
            g.row(&[
                "REGRESSION".to_string(),
                r.version.clone(),
                r.problem.clone(),
                r.from_commit.clone(),
                r.to_commit.clone(),
                format!("{:.4} -> {:.4}", r.from_ms, r.to_ms),
                format!("+{:.1}%", r.rise_pct),
            ]);
        }
        blocks.push(Block::Grid(g));
    }
    let all = data.trends();
    let mut g = Grid::new(&["version", "problem", "median ms per commit"]);
    for ((v, p), series) in &all {
        g.row(&[
            v.clone(),
            p.clone(),
            series
                .iter()
                .map(|(c, ms)| format!("{c}: {ms:.4}"))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    blocks.push(Block::Grid(g));
    for (i, p) in problems.iter().take(4).enumerate() {
        let series: Vec<(String, Vec<(usize, f64)>)> = versions
            .iter()
            .filter_map(|v| {
                all.get(&(v.clone(), p.clone())).map(|s| {
                    (
                        v.clone(),
                        s.iter()
                            .map(|(c, ms)| {
                                (data.commits.iter().position(|x| x == c).unwrap_or(0), *ms)
                            })
                            .collect(),
                    )
                })
            })
            .collect();
        blocks.push(Block::Chart {
            name: format!("trend{i}"),
            title: format!("median time relative to the first commit: {p}"),
            svg: charts::trend_chart(p, &data.commits, &series),
        });
    }
    section("Trends across commits", blocks)
}

/// The files `write` made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Written {
    pub html: PathBuf,
    pub markdown: PathBuf,
    pub charts: Vec<PathBuf>,
}

/// Reads the store and writes `report.html`, `report.md` and `charts/*.svg` into `out`.
pub fn write(store: &Store, order: &[String], out: &Path) -> Result<Written> {
    let data = ReportData::gather(store)?;
    let exps = Ledger::open(store)?.list()?;
    let meta = format!(
        "Generated {} by kiln {} from {} ({} GEMM timings, {} experiments).",
        utc_now(),
        kiln_commit(),
        store.path().display(),
        data.points.len(),
        exps.len()
    );
    let doc = build(&data, &exps, order, meta);
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { what, path, source }
    };
    let chart_dir = out.join("charts");
    std::fs::create_dir_all(&chart_dir).map_err(io("creating the report folder", &chart_dir))?;
    let mut charts = Vec::new();
    for s in &doc.sections {
        for b in &s.blocks {
            if let Block::Chart { name, svg, .. } = b {
                let p = chart_dir.join(format!("{name}.svg"));
                std::fs::write(&p, svg).map_err(io("writing a chart", &p))?;
                charts.push(p);
            }
        }
    }
    let (html, markdown) = (out.join("report.html"), out.join("report.md"));
    std::fs::write(&html, super::html::render(&doc))
        .map_err(io("writing the HTML report", &html))?;
    std::fs::write(&markdown, super::markdown::render(&doc))
        .map_err(io("writing the markdown report", &markdown))?;
    Ok(Written {
        html,
        markdown,
        charts,
    })
}
