//! Reading a Prometheus exposition (`GET /metrics`).

use std::net::SocketAddr;

use crate::http;

/// The sum of every sample of metric `name` (dots read as underscores; a `_total` suffix the
/// exporter adds is accepted) whose labels include every `labels` pair; `None` when no sample
/// matches.
pub fn sum(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let prom = name.replace('.', "_");
    let total = format!("{prom}_total");
    let samples: Vec<f64> = exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let series = l.split(' ').next().unwrap_or("");
            let base = series.split('{').next().unwrap_or("");
            (base == prom || base == total)
                && labels
                    .iter()
                    .all(|(k, v)| series.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!samples.is_empty()).then(|| samples.iter().sum())
}

/// `GET /metrics` from `addr`, then [`sum`]; `None` when the server does not answer 200 or no
/// sample matches.
pub fn scrape(addr: SocketAddr, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let answer = http::exchange(addr, "GET", "/metrics", &[], b"").ok()?;
    (answer.status == 200).then(|| sum(&answer.text(), name, labels))?
}

#[cfg(test)]
mod tests {
    use super::sum;

    const TEXT: &str = "# TYPE ourios_recovery_frames counter\n\
        ourios_recovery_frames{mode=\"normal\"} 3\n\
        ourios_recovery_frames{mode=\"regenerate\"} 4\n\
        ourios_recovery_frames_other 100\n\
        ourios_wal_torn_tail_bytes_total 7\n";

    #[test]
    fn sums_a_name_or_a_labelled_series_and_nothing_else() {
        assert_eq!(sum(TEXT, "ourios_recovery_frames", &[]), Some(7.0));
        assert_eq!(
            sum(TEXT, "ourios.recovery.frames", &[("mode", "normal")]),
            Some(3.0)
        );
        assert_eq!(sum(TEXT, "ourios_wal_torn_tail_bytes", &[]), Some(7.0));
        assert_eq!(sum(TEXT, "ourios_wal", &[]), None);
        assert_eq!(sum(TEXT, "ourios_recovery_frames", &[("mode", "x")]), None);
    }
}
