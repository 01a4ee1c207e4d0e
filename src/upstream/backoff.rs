//! Exponential backoff with full jitter for restarting upstreams.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            attempt: 0,
        }
    }

    /// The next delay: uniformly random in [cap/2, cap], cap doubling up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let cap = self
            .base
            .saturating_mul(1u32 << self.attempt.min(16))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let half = cap / 2;
        let jitter = random_u64() % (half.as_millis() as u64 + 1);
        half + Duration::from_millis(jitter)
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

fn random_u64() -> u64 {
    // RandomState is seeded per instance from the OS: enough randomness for jitter.
    RandomState::new().build_hasher().finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let d: Vec<_> = (0..8).map(|_| b.next_delay()).collect();
        assert!(d[0] >= Duration::from_millis(50) && d[0] <= Duration::from_millis(100));
        assert!(d[7] >= Duration::from_secs(1) && d[7] <= Duration::from_secs(2));
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
