//! Prometheus metrics: counters and histograms kept in memory, and the text exposition
//! format (version 0.0.4) that `/metrics` answers in, checked by `promtool check
//! metrics` in the tests.
//!
//! Counts live in the process (one `Metrics` in the server's `AppState`, one in the sync
//! worker), never in a global, so every test's server counts its own. Gauges that
//! describe stored state (the signed index's expiry, the mirror, the worker's sources)
//! are not kept here: `/metrics` reads them from the store when it is scraped, so every
//! replica reports the same figures.
//!
//! Layering: a leaf; knows nothing of HTTP or the store.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the HTTP latency histogram's buckets: from a cached
/// `/tuf/` file (well under a millisecond) to a publish of many definitions.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The label values of one series, in the family's label order.
type Labels = Vec<String>;

/// A counter per label set.
#[derive(Debug, Default)]
pub struct CounterVec {
    series: Mutex<BTreeMap<Labels, u64>>,
}

impl CounterVec {
    pub fn inc(&self, labels: &[&str]) {
        let key = labels.iter().map(|l| (*l).to_owned()).collect();
        *lock(&self.series).entry(key).or_default() += 1;
    }

    /// Every series with its count.
    pub fn snapshot(&self) -> Vec<(Labels, u64)> {
        lock(&self.series)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// Observations of one series of a histogram.
#[derive(Debug, Clone, Default)]
struct Buckets {
    /// Non-cumulative counts per bucket of [`LATENCY_BUCKETS`].
    counts: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// A latency histogram per label set, with [`LATENCY_BUCKETS`].
#[derive(Debug, Default)]
pub struct HistogramVec {
    series: Mutex<BTreeMap<Labels, Buckets>>,
}

impl HistogramVec {
    pub fn observe(&self, labels: &[&str], took: Duration) {
        let secs = took.as_secs_f64();
        let mut series = lock(&self.series);
        // Looked up by borrowed values first: a known series allocates nothing.
        let entry = match series
            .iter_mut()
            .find(|(k, _)| k.iter().map(String::as_str).eq(labels.iter().copied()))
        {
            Some((_, b)) => b,
            None => series
                .entry(labels.iter().map(|l| (*l).to_owned()).collect())
                .or_default(),
        };
        if let Some(i) = LATENCY_BUCKETS.iter().position(|le| secs <= *le) {
            entry.counts[i] += 1;
        }
        entry.count += 1;
        entry.sum += secs;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while a lock is held; a poisoned one still holds whole numbers.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kind of a metric family, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A text exposition being written: one family after another, each with its `# HELP`
/// and `# TYPE` lines and then its samples.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a family. `help` is one line of text.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self
    }

    /// One sample of the current family (`name` may carry a suffix such as `_total`).
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
        self
    }

    /// A counter family from `counters`, whose series carry `label_names`.
    pub fn counters(
        &mut self,
        name: &str,
        help: &str,
        label_names: &[&str],
        counters: &CounterVec,
    ) -> &mut Self {
        self.family(name, Kind::Counter, help);
        for (values, n) in counters.snapshot() {
            let labels = zip(label_names, &values);
            self.sample(name, &labels, n as f64);
        }
        self
    }

    /// A histogram family from `histograms`, whose series carry `label_names`.
    pub fn histograms(
        &mut self,
        name: &str,
        help: &str,
        label_names: &[&str],
        histograms: &HistogramVec,
    ) -> &mut Self {
        self.family(name, Kind::Histogram, help);
        let series: Vec<(Labels, Buckets)> = lock(&histograms.series)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let (bucket, sum, count) = (
            format!("{name}_bucket"),
            format!("{name}_sum"),
            format!("{name}_count"),
        );
        for (values, b) in series {
            let labels = zip(label_names, &values);
            let mut cumulative = 0;
            for (le, n) in LATENCY_BUCKETS.iter().zip(b.counts) {
                cumulative += n;
                let le = number(*le);
                let mut with_le = labels.clone();
                with_le.push(("le", &le));
                self.sample(&bucket, &with_le, cumulative as f64);
            }
            let mut with_le = labels.clone();
            with_le.push(("le", "+Inf"));
            self.sample(&bucket, &with_le, b.count as f64);
            self.sample(&sum, &labels, b.sum);
            self.sample(&count, &labels, b.count as f64);
        }
        self
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn zip<'a>(names: &[&'a str], values: &'a [String]) -> Vec<(&'a str, &'a str)> {
    names
        .iter()
        .copied()
        .zip(values.iter().map(String::as_str))
        .collect()
}

/// A label value as the format quotes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value: integers without a fraction, `+Inf`/`-Inf`/`NaN` as the format
/// spells them.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The HTTP status class a status code falls in (`2xx` ... `5xx`): the label of the
/// request metrics, bounded whatever a handler answers.
pub fn status_class(status: u16) -> &'static str {
    match status / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        _ => "5xx",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_sum_and_count() {
        let h = HistogramVec::default();
        h.observe(&["tuf", "2xx"], Duration::from_micros(300));
        h.observe(&["tuf", "2xx"], Duration::from_millis(30));
        h.observe(&["tuf", "2xx"], Duration::from_secs(60));
        let mut e = Exposition::new();
        e.histograms("x_seconds", "Latency.", &["surface", "status"], &h);
        let text = e.finish();
        assert!(text.contains("# TYPE x_seconds histogram\n"));
        assert!(
            text.contains("x_seconds_bucket{surface=\"tuf\",status=\"2xx\",le=\"0.0005\"} 1\n")
        );
        assert!(text.contains("x_seconds_bucket{surface=\"tuf\",status=\"2xx\",le=\"0.025\"} 1\n"));
        assert!(text.contains("x_seconds_bucket{surface=\"tuf\",status=\"2xx\",le=\"0.05\"} 2\n"));
        assert!(text.contains("x_seconds_bucket{surface=\"tuf\",status=\"2xx\",le=\"10\"} 2\n"));
        assert!(text.contains("x_seconds_bucket{surface=\"tuf\",status=\"2xx\",le=\"+Inf\"} 3\n"));
        assert!(text.contains("x_seconds_count{surface=\"tuf\",status=\"2xx\"} 3\n"));
        assert!(text.contains("x_seconds_sum{surface=\"tuf\",status=\"2xx\"} 60.0303"));
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let c = CounterVec::default();
        c.inc(&["a\"b\\c\nd"]);
        c.inc(&["a\"b\\c\nd"]);
        let mut e = Exposition::new();
        e.counters("y_total", "Two\nlines \\ here.", &["reason"], &c);
        assert_eq!(
            e.finish(),
            "# HELP y_total Two\\nlines \\\\ here.\n# TYPE y_total counter\ny_total{reason=\"a\\\"b\\\\c\\nd\"} 2\n"
        );
    }

    #[test]
    fn values_are_spelled_as_the_format_wants() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(-86_400.0), "-86400");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(status_class(204), "2xx");
        assert_eq!(status_class(599), "5xx");
    }
}
