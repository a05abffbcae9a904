//! The HTML around the charts: one self-contained page (inline CSS, no scripts, no fetches),
//! readable at 1280 px and on paper.

use std::fmt::Write;

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const STYLE: &str = r#"
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2430;
       max-width: 1240px; margin: 24px auto; padding: 0 20px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 10px; padding-top: 10px; border-top: 2px solid #e3e7ee; }
h3 { font-size: 16px; margin: 18px 0 8px; }
.sub { color: #5b6575; margin: 0 0 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; margin: 10px 0; }
.card { border: 1px solid #dde2ea; border-radius: 8px; padding: 8px 12px; background: #f8fafc; }
.card .v { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .k { font-size: 12px; color: #5b6575; text-transform: uppercase; letter-spacing: .03em; }
.card.bad { border-color: #e8a0a0; background: #fdf3f3; }
table { border-collapse: collapse; margin: 8px 0 14px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e6e9ef; text-align: left; }
td.num, th.num { text-align: right; }
thead th { background: #f1f4f8; font-weight: 600; }
td.better { color: #0a7a3e; font-weight: 600; }
td.worse { color: #b42318; font-weight: 600; }
tr.knee td { background: #fff7e0; }
.warning { border-left: 4px solid #d98b00; background: #fff8e6; padding: 8px 14px; margin: 10px 0; }
.warning p { margin: 4px 0; }
details { margin: 10px 0; }
summary { cursor: pointer; color: #33518a; }
pre { background: #f4f6f9; padding: 10px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 14px; }
figure.chart { margin: 0; border: 1px solid #e3e7ee; border-radius: 8px; padding: 8px; break-inside: avoid; }
figure.chart figcaption { font-weight: 600; margin: 0 0 4px 4px; }
figure.chart svg { width: 100%; height: auto; display: block; }
ul.legend { list-style: none; margin: 4px 0 0; padding: 0 4px; display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 13px; }
ul.legend span { display: inline-block; width: 18px; height: 4px; margin-right: 6px; vertical-align: middle; }
ul.legend span.dot { width: 9px; height: 9px; border-radius: 50%; }
ul.legend span.dash { height: 0; border-top: 3px dashed; }
p.empty { color: #8a93a3; padding: 40px; text-align: center; }
@media print {
  body { max-width: none; margin: 0; font-size: 11pt; }
  h2 { break-before: auto; break-after: avoid; }
  .charts { grid-template-columns: 1fr 1fr; }
  figure.chart, table, .cards, .warning { break-inside: avoid; }
  details > *:not(summary) { display: block; }
  summary { color: inherit; }
}
"#;

/// A whole page. `body` is already HTML.
pub fn page(title: &str, subtitle: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head>\n<body><h1>{t}</h1><p class=\"sub\">{s}</p>\n{body}</body></html>\n",
        t = escape(title),
        s = escape(subtitle)
    )
}

/// A figure with a label; `bad` draws it in red (failures, rejections).
pub fn card(out: &mut String, label: &str, value: &str, bad: bool) {
    let class = if bad { "card bad" } else { "card" };
    let _ = write!(
        out,
        "<div class=\"{class}\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
        escape(value),
        escape(label)
    );
}

/// One table cell; `class` colours it (`better`, `worse`) or marks nothing (empty).
pub struct Cell {
    pub text: String,
    pub class: &'static str,
}

impl Cell {
    pub fn plain(text: impl Into<String>) -> Self {
        Self { text: text.into(), class: "" }
    }

    /// A number, a ratio (`1.5x`) or a placeholder for one.
    fn is_figure(&self) -> bool {
        self.text.parse::<f64>().is_ok() || self.text.strip_suffix('x').is_some_and(|t| t.parse::<f64>().is_ok())
    }
}

/// A table with a header row; a row's class (e.g. `knee`) comes with it.
pub fn table(out: &mut String, header: &[&str], rows: &[(&str, Vec<Cell>)]) {
    out.push_str("<table><thead><tr>");
    // A column of figures is right-aligned, its header too; text stays left.
    let numeric: Vec<bool> =
        (0..header.len()).map(|i| rows.iter().any(|(_, cells)| cells.get(i).is_some_and(|c| c.is_figure()))).collect();
    for (h, &num) in header.iter().zip(&numeric) {
        let class = if num { " class=\"num\"" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>");
    for (class, cells) in rows {
        if class.is_empty() {
            out.push_str("<tr>");
        } else {
            let _ = write!(out, "<tr class=\"{class}\">");
        }
        for (c, &num) in cells.iter().zip(numeric.iter().chain(std::iter::repeat(&false))) {
            let class = format!("{}{}", if num { "num " } else { "" }, c.class);
            let _ = write!(out, "<td class=\"{}\">{}</td>", class.trim_end(), escape(&c.text));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

/// The run's caveats, as a box nobody scrolls past. Sentences stay whole, one per line.
pub fn warning(out: &mut String, title: &str, text: &str) {
    let _ = write!(out, "<div class=\"warning\"><b>{}</b>", escape(title));
    for sentence in text.split(". ").filter(|s| !s.trim().is_empty()) {
        let end = if sentence.ends_with('.') { "" } else { "." };
        let _ = write!(out, "<p>{}{end}</p>", escape(sentence.trim()));
    }
    out.push_str("</div>");
}

/// A collapsed block of pretty-printed JSON (run context, workload).
pub fn json_details(out: &mut String, summary: &str, value: &serde_json::Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let _ = write!(out, "<details><summary>{}</summary><pre>{}</pre></details>", escape(summary), escape(&text));
}

/// `v` with `digits` decimals, or "n/a".
pub fn num(v: Option<f64>, digits: usize) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "n/a".into(), |v| format!("{v:.digits$}"))
}
