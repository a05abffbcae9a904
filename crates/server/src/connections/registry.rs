//! Which connections are open, which of them have a request in flight, and who gives way
//! when a new client arrives at the cap.
//!
//! Clients' connection pools keep connections open after their requests finish; a few busy
//! clients can fill any cap with idle keep-alives, and a cap that refused new connections
//! would then lock out new clients and the load balancer's health checks until the idle
//! timeout. So at the cap the longest-idle connection without a request in flight is
//! closed to make room (nginx drains idle keep-alives the same way); only connections with
//! requests in flight fill the cap. Past that, a small reserve of connections is still
//! taken, to answer probes (`/health`, `/ready`, `/metrics`) and to tell everyone else
//! plainly that the server is busy, rather than reset them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// One open connection, as its task and the registry both see it.
#[derive(Debug)]
pub struct Connection {
    /// The registry's clock: every connection's activity is read against the same origin,
    /// so "silent longest" compares stored times, never times read at different moments.
    epoch: Instant,
    /// Nanoseconds from `epoch` to the connection's start or the last byte moved either way.
    last_ns: AtomicU64,
    in_flight: AtomicUsize,
    /// Asks the connection to close once its current response (if any) is sent.
    close: Notify,
}

impl Connection {
    fn new(epoch: Instant) -> Self {
        let connection =
            Self { epoch, last_ns: AtomicU64::new(0), in_flight: AtomicUsize::new(0), close: Notify::new() };
        connection.touch();
        connection
    }

    /// A byte moved.
    pub fn touch(&self) {
        self.last_ns.store(nanos_since(self.epoch), Ordering::Relaxed);
    }

    pub fn idle_for(&self) -> Duration {
        Duration::from_nanos(nanos_since(self.epoch).saturating_sub(self.last_active()))
    }

    fn last_active(&self) -> u64 {
        self.last_ns.load(Ordering::Relaxed)
    }

    /// Resolves when the registry wants this connection closed.
    pub async fn close_requested(&self) {
        self.close.notified().await
    }

    /// Counts a request in flight until the returned guard drops (with its response body).
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub struct InFlight(Arc<Connection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How a new connection was let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Below the cap.
    Open,
    /// At the cap: the longest-idle connection was asked to close to make room.
    Evicted,
    /// Every place holds a request in flight: a reserve place, for one request; only
    /// probes are served on it.
    Reserve,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    /// Entries in regular places, not asked to close.
    regular: usize,
    reserve: usize,
}

#[derive(Debug)]
struct Entry {
    connection: Arc<Connection>,
    reserve: bool,
    closing: bool,
}

#[derive(Debug)]
pub struct Registry {
    epoch: Instant,
    cap: usize,
    reserve: usize,
    table: Mutex<Table>,
}

/// A connection's place; dropping it (when its task ends) frees the place.
#[derive(Debug)]
pub struct Place {
    registry: Arc<Registry>,
    id: u64,
    pub connection: Arc<Connection>,
    pub admission: Admission,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut table = self.registry.lock();
        if let Some(entry) = table.entries.remove(&self.id) {
            match (entry.reserve, entry.closing) {
                (true, _) => table.reserve -= 1,
                (false, false) => table.regular -= 1,
                (false, true) => {}
            }
        }
    }
}

impl Registry {
    /// `cap` regular places and `reserve` more for when all of them are busy.
    pub fn new(cap: usize, reserve: usize) -> Arc<Self> {
        Arc::new(Self { epoch: Instant::now(), cap, reserve, table: Mutex::new(Table::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table's counts stay consistent at every unlock; a panic elsewhere cannot tear them.
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A place for a new connection, or `None` when even the reserve is full.
    pub fn admit(self: &Arc<Self>) -> Option<Place> {
        let mut table = self.lock();
        let admission = if table.regular < self.cap {
            Admission::Open
        } else if let Some(id) = longest_idle(&table) {
            let entry = table.entries.get_mut(&id)?;
            entry.closing = true;
            entry.connection.close.notify_one();
            table.regular -= 1;
            Admission::Evicted
        } else if table.reserve < self.reserve {
            Admission::Reserve
        } else {
            return None;
        };
        let reserve = admission == Admission::Reserve;
        if reserve {
            table.reserve += 1;
        } else {
            table.regular += 1;
        }
        let id = table.next_id;
        table.next_id += 1;
        let connection = Arc::new(Connection::new(self.epoch));
        table.entries.insert(id, Entry { connection: Arc::clone(&connection), reserve, closing: false });
        Some(Place { registry: Arc::clone(self), id, connection, admission })
    }
}

/// The regular connection without a request in flight that has been silent longest; of
/// two silent since the same instant, the older one (the table is a `HashMap`, so without
/// the tie-break its iteration order would choose).
fn longest_idle(table: &Table) -> Option<u64> {
    table
        .entries
        .iter()
        .filter(|(_, e)| !e.reserve && !e.closing && !e.connection.busy())
        .min_by_key(|(id, e)| (e.connection.last_active(), **id))
        .map(|(id, _)| *id)
}

fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_longest_idle_connection_gives_way_and_busy_ones_never_do() {
        let registry = Registry::new(2, 1);
        let oldest = registry.admit().expect("a place");
        std::thread::sleep(Duration::from_millis(20));
        let newer = registry.admit().expect("a place");
        newer.connection.touch();
        assert_eq!((oldest.admission, newer.admission), (Admission::Open, Admission::Open));

        let third = registry.admit().expect("room is made");
        assert_eq!(third.admission, Admission::Evicted);
        // The oldest was asked to close; its place is already counted as free.
        let asked = ready_now(oldest.connection.close_requested());
        assert!(asked, "the longest-idle connection was asked to close");
        assert!(!ready_now(newer.connection.close_requested()), "the other one was not");

        // Both regular places busy: the reserve, then nothing.
        let _a = newer.connection.request_started();
        let _b = third.connection.request_started();
        let reserve = registry.admit().expect("the reserve");
        assert_eq!(reserve.admission, Admission::Reserve);
        assert!(registry.admit().is_none(), "the reserve is full");
        drop(reserve);
        assert_eq!(registry.admit().map(|p| p.admission), Some(Admission::Reserve), "a freed reserve place is reused");
        drop(_a);
        assert_eq!(
            registry.admit().map(|p| p.admission),
            Some(Admission::Evicted),
            "a finished request frees its place"
        );
    }

    #[test]
    fn connections_admitted_back_to_back_give_way_oldest_first() {
        // No pause between admissions: their times may coincide, and the order must not
        // then depend on the table's iteration order.
        let registry = Registry::new(3, 0);
        let mut places: Vec<Place> = (0..3).map(|_| registry.admit().expect("a place")).collect();
        for _ in 0..20 {
            let next = registry.admit().expect("room is made");
            assert_eq!(next.admission, Admission::Evicted);
            let oldest = places.remove(0);
            assert!(ready_now(oldest.connection.close_requested()), "the oldest idle connection gives way");
            assert!(places.iter().all(|p| !ready_now(p.connection.close_requested())), "and only it");
            places.push(next);
        }
    }

    /// Whether `future` is ready at once.
    fn ready_now(future: impl std::future::Future<Output = ()>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut future = std::pin::pin!(future);
        future.as_mut().poll(&mut cx).is_ready()
    }
}
