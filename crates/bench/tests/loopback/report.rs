//! The report and `bench compare` as a person meets them: result files from real runs
//! against the mock over loopback, compared; both pages opened in headless Chromium.

use std::path::{Path, PathBuf};
use std::process::Command;

use rillm_bench::report::compare;
use rillm_bench::results::compare::{CompareArgs, CompareFormat};
use serde_json::Value;

use crate::support::{bench, Mock};

/// A test's files go in its own directory, removed when the test ends (`tempfile::TempDir`).
fn temp(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// A two-level sweep against a mock with this TTFT, written to `name`.json and .html.
async fn sweep(dir: &tempfile::TempDir, ttft_ms: u64, rates: &str, name: &str) -> (PathBuf, PathBuf) {
    let mock = Mock::start(ttft_ms, 5, 12, 10_000);
    let url = format!("{}/v1/completions", mock.base);
    let (json, html) = (temp(dir, &format!("{name}.json")), temp(dir, &format!("{name}.html")));
    let args = ["--url", &url, "--rate", rates, "--requests", "12", "--ttft-slo-ms", "100", "--output"];
    let mut args: Vec<&str> = args.to_vec();
    args.extend([json.to_str().unwrap(), "--report", html.to_str().unwrap()]);
    bench(&args).await;
    (json, html)
}

fn compare_args(files: &[&Path], report: Option<&Path>) -> CompareArgs {
    CompareArgs {
        files: files.iter().map(|p| p.to_path_buf()).collect(),
        labels: vec![],
        report: report.map(Path::to_path_buf),
        force: false,
        format: CompareFormat::Text,
    }
}

/// The row of a metric in the terminal table of the first level: its cells after the name.
fn row<'a>(text: &'a str, metric: &str) -> Vec<&'a str> {
    let line = text.lines().find(|l| l.trim_start().starts_with(metric)).unwrap_or_else(|| panic!("{metric}: {text}"));
    line.trim_start()[metric.len()..].split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_puts_runs_side_by_side_and_refuses_different_workloads() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (fast, _) = sweep(&dir, 10, "20,40", "fast").await;
    let (slow, _) = sweep(&dir, 150, "20,40", "slow").await;
    let page = temp(&dir, "compare.html");
    let text = compare::run(&compare_args(&[&fast, &slow], Some(&page))).expect("same workload compares");
    assert_eq!(text.matches("== ").count(), 3, "the sweep, then one block per level: {text}");
    // Both levels of the fast mock meet the 100 ms TTFT SLO; the slow mock's none.
    assert_eq!(row(&text, "sustainable req/s"), ["higher", "40.000", "n/a", "n/a"], "{text}");
    // TTFT p50: lower is better, the slow mock is 140 ms slower (this test may share the
    // cores with Chromium: margins, not exact ratios), and it says so.
    let ttft = row(&text, "TTFT p50 ms");
    assert_eq!(ttft[0], "lower");
    let (a, b): (f64, f64) = (ttft[1].parse().unwrap(), ttft[2].parse().unwrap());
    assert!(b - a > 70.0, "{text}");
    assert_eq!(ttft[4], "worse", "{text}");
    // The ratio of the unrounded figures: within the rounding of the ones shown.
    let shown: f64 = ttft[3].trim_end_matches('x').parse().unwrap();
    assert!((shown / (b / a) - 1.0).abs() < 0.02, "{text}");
    assert_eq!(row(&text, "offered")[..2], ["12", "12"]);
    // The same figures as Markdown (for docs) and JSON (for scripts).
    let mut args = compare_args(&[&fast, &slow], None);
    args.labels = vec!["fast".into(), "slow".into()];
    args.format = CompareFormat::Markdown;
    let markdown = compare::run(&args).unwrap();
    assert!(markdown.contains("| sustainable req/s | higher | 40.000 | n/a | n/a |"), "{markdown}");
    assert!(markdown.contains("| metric | better | fast | slow | slow / fast |"), "{markdown}");
    args.format = CompareFormat::Json;
    let json: Value = serde_json::from_str(&compare::run(&args).unwrap()).expect("JSON");
    assert_eq!(json["sustainable_rate_rps"]["values"]["fast"], 40.0, "{json}");
    assert!(json["sustainable_rate_rps"]["values"]["slow"].is_null(), "{json}");
    let metrics = json["levels"][0]["metrics"].as_array().expect("metrics");
    let ttft_json = metrics.iter().find(|m| m["metric"] == "TTFT p50 ms").expect("TTFT p50");
    let ratio = ttft_json["ratios"]["slow/fast"].as_f64().expect("a ratio");
    assert!((ratio / (b / a) - 1.0).abs() < 0.02, "{ttft_json}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("fast (A, baseline)") && html.contains("<td class=\"num worse\">"), "ratio cells marked");
    assert_eq!(html.matches("<svg").count(), 2 + 2 * 2, "sweep charts and two CDFs per level");

    // Another rate list is another workload: refused with what differs, unless forced.
    let (other, _) = sweep(&dir, 10, "20,30", "other").await;
    let refused = compare::run(&compare_args(&[&fast, &other], None)).expect_err("refused").to_string();
    assert!(refused.contains("different workloads") && refused.contains("level 2 load"), "{refused}");
    assert!(refused.contains("--force"), "{refused}");
    let mut forced = compare_args(&[&fast, &other], None);
    forced.force = true;
    assert!(compare::run(&forced).unwrap().contains("WORKLOADS DIFFER"));

    // A file that is not a result is named in the error.
    let junk = temp(&dir, "junk.json");
    std::fs::write(&junk, r#"{"hello": 1}"#).unwrap();
    let err = compare::run(&compare_args(&[&fast, &junk], None)).expect_err("refused").to_string();
    assert!(err.contains("junk.json") && err.contains("not a rillm bench result"), "{err}");
    for p in [fast, slow, other, junk, page] {
        let _ = std::fs::remove_file(p);
    }
}

/// Chromium, if installed. `RILLM_REQUIRE_CHROMIUM=1` (set by CI) turns its absence into a
/// failure rather than a skip.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"].iter().find_map(|name| {
        let ok = Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success());
        ok.then(|| PathBuf::from(name))
    });
    if found.is_none() {
        assert!(
            std::env::var("RILLM_REQUIRE_CHROMIUM").is_err(),
            "RILLM_REQUIRE_CHROMIUM is set but no chromium is installed"
        );
        eprintln!("skipped: no chromium installed (apt-get install chromium); the page checks did not run");
    }
    found
}

/// Listens before the page's own content parses: errors (script, resource) and
/// console.error; at load, each SVG's rendered size and the page's width.
const PROBE: &str = r#"<script>
window.__errors = [];
addEventListener('error', e => __errors.push(String(e.message || (e.target && (e.target.src || e.target.href)) || 'error')), true);
const __consoleError = console.error;
console.error = (...a) => { __errors.push(a.join(' ')); __consoleError(...a); };
addEventListener('load', () => {
  const svgs = [...document.querySelectorAll('svg')].map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; });
  const probe = document.createElement('pre');
  probe.id = 'probe';
  probe.textContent = JSON.stringify({ errors: __errors, svgs, width: document.documentElement.scrollWidth });
  document.body.appendChild(probe);
});
</script>"#;

/// Opens `page` at 1280 px in headless Chromium and returns what the probe saw.
fn open_in_chromium(chromium: &Path, page: &Path) -> Value {
    let html = std::fs::read_to_string(page).unwrap();
    let probed = page.with_extension("probe.html");
    std::fs::write(&probed, html.replacen("<head>", &format!("<head>{PROBE}"), 1)).unwrap();
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900", "--dump-dom"])
        .arg(format!("file://{}", probed.display()))
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_file(&probed);
    let dom = String::from_utf8_lossy(&out.stdout);
    let start = dom.find("<pre id=\"probe\">").unwrap_or_else(|| panic!("probe did not run: {dom:.2000}"));
    let json = &dom[start + "<pre id=\"probe\">".len()..];
    let json = &json[..json.find("</pre>").unwrap()];
    serde_json::from_str(&json.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")).unwrap()
}

fn assert_page_renders(seen: &Value, what: &str, min_svgs: usize) {
    assert_eq!(seen["errors"], serde_json::json!([]), "{what}: errors in the console");
    let svgs = seen["svgs"].as_array().unwrap();
    assert!(svgs.len() >= min_svgs, "{what}: {} charts", svgs.len());
    for size in svgs {
        let (w, h) = (size[0].as_f64().unwrap(), size[1].as_f64().unwrap());
        assert!(w > 200.0 && h > 100.0, "{what}: an SVG rendered at {w}x{h}");
    }
    assert!(seen["width"].as_f64().unwrap() <= 1280.0, "{what}: wider than the window: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_and_compare_pages_load_in_headless_chromium() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let Some(chromium) = chromium() else { return };
    let (a, report) = sweep(&dir, 10, "20,40", "browser-a").await;
    let (b, _) = sweep(&dir, 30, "20,40", "browser-b").await;
    let page = temp(&dir, "browser-compare.html");
    compare::run(&compare_args(&[&a, &b], Some(&page))).unwrap();
    // Sweep: 3 overview charts, then 4 per level.
    assert_page_renders(&open_in_chromium(&chromium, &report), "report", 3 + 2 * 4);
    assert_page_renders(&open_in_chromium(&chromium, &page), "compare", 2 + 2 * 2);
    for p in [a, b, page, report] {
        let _ = std::fs::remove_file(p);
    }
}
