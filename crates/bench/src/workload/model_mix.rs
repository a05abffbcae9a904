//! `--model-mix a:0.7,b:0.3`: which model each request names, for a server that serves
//! several. The choice is a pure function of a key (the request's index, or the session's),
//! so a run is repeatable and every turn of a conversation stays on its model.

use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
pub struct ModelMix {
    /// Models with their cumulative share, the last at 1.
    models: Vec<(Arc<str>, f64)>,
}

impl ModelMix {
    /// The model for a conversation, by its id: every turn of it names the same model.
    pub fn pick_for(&self, id: &str) -> Arc<str> {
        // FNV-1a: stable across runs and builds, as std's hasher is not promised to be.
        let key = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        self.pick(key)
    }

    /// The model for `key`, drawn by the shares.
    pub fn pick(&self, key: u64) -> Arc<str> {
        let draw = unit(key);
        let chosen = self.models.iter().find(|(_, upto)| draw < *upto).or(self.models.last());
        chosen.map_or_else(|| Arc::from(""), |(model, _)| Arc::clone(model))
    }
}

impl std::str::FromStr for ModelMix {
    type Err = String;

    /// `NAME:SHARE,...` (shares normalised to their sum), or `NAME,...` for equal shares.
    fn from_str(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, share) = match item.rsplit_once(':') {
                Some((name, share)) => {
                    let share: f64 = share.parse().map_err(|_| format!("`{share}` in `{item}` is not a number"))?;
                    (name, share)
                }
                None => (item, 1.0),
            };
            if name.is_empty() || !(share.is_finite() && share > 0.0) {
                return Err(format!("`{item}`: give NAME:SHARE with a positive share"));
            }
            parts.push((name, share));
        }
        let total: f64 = parts.iter().map(|(_, s)| s).sum();
        if parts.is_empty() {
            return Err("name at least one model".into());
        }
        let mut upto = 0.0;
        let models = parts
            .into_iter()
            .map(|(name, share)| {
                upto += share / total;
                (Arc::from(name), upto)
            })
            .collect();
        Ok(Self { models })
    }
}

/// A uniform number in [0, 1) from `key` (splitmix64).
fn unit(key: u64) -> f64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_kept_over_many_requests() {
        let mix: ModelMix = "a:0.7,b:0.3".parse().expect("valid");
        let a = (0..10_000).filter(|&k| &*mix.pick(k) == "a").count();
        assert!((6_800..7_200).contains(&a), "{a} of 10000 to a");
        assert_eq!(mix.pick(42), mix.pick(42), "the same key, the same model");
    }

    #[test]
    fn names_alone_share_equally_and_bad_shares_are_refused() {
        let mix: ModelMix = "x,y".parse().expect("valid");
        let x = (0..10_000).filter(|&k| &*mix.pick(k) == "x").count();
        assert!((4_800..5_200).contains(&x), "{x}");
        assert!("a:0".parse::<ModelMix>().is_err());
        assert!("a:-1,b:1".parse::<ModelMix>().is_err());
        assert!(":0.5".parse::<ModelMix>().is_err());
        assert!("".parse::<ModelMix>().is_err());
    }
}
