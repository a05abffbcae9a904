//! Load from many machines: `--shard I/N` makes this process send a disjoint share of the
//! run's seeded schedule (arrival i belongs to shard i mod N), so the union of the shards
//! is exactly the unsharded run; `--start-at` makes the shards begin together; `bench
//! merge` recomputes the run from their per-request records.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One shard of N: `index` in 0..count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// Whether arrival `i` of the full schedule is this shard's to send.
    pub fn owns(&self, i: usize) -> bool {
        i % self.count == self.index
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N`, 0-based: `0/4` .. `3/4` (Kubernetes' JOB_COMPLETION_INDEX counts from 0).
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s.split_once('/').ok_or_else(|| format!("--shard wants I/N, e.g. 0/4; got {s:?}"))?;
        let index: usize = i.trim().parse().map_err(|_| format!("--shard: {i:?} is not a number"))?;
        let count: usize = n.trim().parse().map_err(|_| format!("--shard: {n:?} is not a number"))?;
        if count == 0 || index >= count {
            return Err(format!("--shard {s}: the index counts from 0 and must be below the count"));
        }
        Ok(Self { index, count })
    }
}

pub fn unix_ms_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Sleeps until `unix_ms` by this machine's clock; returns how late it woke (0 if the
/// time had not come), in ms.
pub async fn wait_until(unix_ms: u64) -> u64 {
    let now = unix_ms_now();
    if unix_ms > now {
        tokio::time::sleep(Duration::from_millis(unix_ms - now)).await;
    }
    unix_ms_now().saturating_sub(unix_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_split_a_schedule_into_disjoint_shares() {
        let shards: Vec<Shard> = (0..4).map(|i| format!("{i}/4").parse().unwrap()).collect();
        for i in 0..100 {
            assert_eq!(shards.iter().filter(|s| s.owns(i)).count(), 1, "arrival {i}");
        }
        assert!("4/4".parse::<Shard>().is_err());
        assert!("1/0".parse::<Shard>().is_err());
        assert!("x/4".parse::<Shard>().unwrap_err().contains("not a number"));
        assert!("3".parse::<Shard>().unwrap_err().contains("I/N"));
    }
}
