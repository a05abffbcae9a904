//! Several endpoints serving one model (replicas measured directly, without a gateway):
//! which one gets each request. Round-robin spreads requests evenly; least-in-flight sends
//! each to the endpoint with the fewest unanswered requests, as a load balancer would.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    RoundRobin,
    LeastInFlight,
}

pub struct Targets {
    urls: Vec<String>,
    balance: Balance,
    next: AtomicUsize,
    in_flight: Vec<AtomicUsize>,
}

impl Targets {
    pub fn new(urls: Vec<String>, balance: Balance) -> Self {
        let in_flight = urls.iter().map(|_| AtomicUsize::new(0)).collect();
        Self { urls, balance, next: AtomicUsize::new(0), in_flight }
    }

    pub fn url(&self, target: usize) -> &str {
        &self.urls[target]
    }

    /// The endpoint for the next request. Least-in-flight breaks ties in round-robin order,
    /// so idle endpoints share the load too.
    pub fn pick(&self) -> usize {
        let n = self.urls.len();
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % n;
        match self.balance {
            Balance::RoundRobin => turn,
            Balance::LeastInFlight => (0..n)
                .map(|k| (turn + k) % n)
                .min_by_key(|&t| self.in_flight[t].load(Ordering::Relaxed))
                .unwrap_or(turn),
        }
    }

    /// Counts a request in flight at `target` until the guard drops.
    pub fn begin(&self, target: usize) -> InFlight<'_> {
        self.in_flight[target].fetch_add(1, Ordering::Relaxed);
        InFlight { counter: &self.in_flight[target] }
    }
}

pub struct InFlight<'a> {
    counter: &'a AtomicUsize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(balance: Balance) -> Targets {
        Targets::new(vec!["a".into(), "b".into(), "c".into()], balance)
    }

    #[test]
    fn round_robin_cycles_and_least_in_flight_avoids_the_busy() {
        let rr = targets(Balance::RoundRobin);
        assert_eq!((0..6).map(|_| rr.pick()).collect::<Vec<_>>(), [0, 1, 2, 0, 1, 2]);
        let lif = targets(Balance::LeastInFlight);
        let _busy_a = lif.begin(0);
        let _busy_b = (lif.begin(1), lif.begin(1));
        assert_eq!(lif.pick(), 2);
        assert_eq!(lif.pick(), 2, "c still has the fewest");
        let held: Vec<_> = (0..2).map(|_| lif.begin(2)).collect();
        assert_eq!(lif.pick(), 0, "now a has the fewest");
        drop(held);
        assert_eq!(lif.pick(), 2);
    }
}
