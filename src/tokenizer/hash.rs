//! A small, fast hasher for the vocabulary maps: the FxHash word step rustc uses (rotate, xor,
//! multiply by a constant per 8-byte word), started from a per-process random seed and
//! finished with a 64-bit avalanche mix.
//!
//! Lookups of short token texts dominate tokenization, and SipHash (std's default) costs several
//! times more on them. But the keys come from the model file, and the page loads any URL, so a
//! hostile vocabulary must not be able to pile its tokens into one bucket (a full collision
//! makes building the map quadratic: minutes for 262,144 tokens). Plain FxHash allows that
//! without any secret: the low bits of its last product depend only on the low bits of the last
//! word, and the map picks buckets by the low bits. Here the seed is unknown to the file's
//! author and the finish mixes every bit into the low ones (`tests::crafted_keys_spread`).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

#[derive(Clone, Copy)]
pub(crate) struct FxHasher(u64);

const MULTIPLIER: u64 = 0x517c_c1b7_2722_0a95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(MULTIPLIER);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // MurmurHash3's fmix64: every input bit reaches every output bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// This process's seed, from the OS (natively) or `crypto.getRandomValues` (the browser).
/// Should neither be available, the address of a heap allocation and the clock stand in:
/// weaker, but still not known to whoever wrote the file.
fn process_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let mut bytes = [0u8; 8];
        if getrandom::getrandom(&mut bytes).is_ok() {
            return u64::from_le_bytes(bytes);
        }
        let local = Box::new(0u8);
        let address = &*local as *const u8 as u64;
        #[cfg(not(target_arch = "wasm32"))]
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        #[cfg(target_arch = "wasm32")]
        let clock = 0;
        address.rotate_left(32) ^ clock
    })
}

/// Builds [`FxHasher`]s that start from the process seed.
#[derive(Clone, Copy)]
pub(crate) struct SeededState(u64);

impl Default for SeededState {
    fn default() -> Self {
        SeededState(process_seed())
    }
}

impl BuildHasher for SeededState {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(self.0)
    }
}

pub(crate) type FxHashMap<K, V> = HashMap<K, V, SeededState>;

pub(crate) fn map_with_capacity<K, V>(n: usize) -> FxHashMap<K, V> {
    HashMap::with_capacity_and_hasher(n, SeededState::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 65,536 8-byte token texts that agree in their low 16 bits: under plain FxHash (state 0,
    /// no finish) every one lands in the same bucket of a map with ≤ 65,536 buckets. Here their
    /// bucket bits must spread like random ones.
    #[test]
    fn crafted_keys_spread() {
        let keys: Vec<[u8; 8]> = (0..65_536u64)
            .map(|i| ((i << 16) | 0x4141).to_le_bytes())
            .collect();
        let low16 = |hash: u64| hash & 0xffff;
        let plain = |k: &[u8; 8]| {
            let mut h = FxHasher(0);
            h.write(k);
            h.0
        };
        let plain_buckets: std::collections::HashSet<u64> =
            keys.iter().map(|k| low16(plain(k))).collect();
        assert_eq!(
            plain_buckets.len(),
            1,
            "the crafted keys collide under plain FxHash"
        );
        let state = SeededState::default();
        let seeded: std::collections::HashSet<u64> = keys
            .iter()
            .map(|k| {
                let mut h = state.build_hasher();
                h.write(k);
                low16(h.finish())
            })
            .collect();
        // 65,536 random draws of 65,536 values hit ~41,427 distinct ones (1 − 1/e).
        assert!(
            seeded.len() > 40_000,
            "only {} distinct buckets",
            seeded.len()
        );
    }

    #[test]
    fn the_seed_is_not_a_constant() {
        // Two processes can't be compared here; the seed at least isn't the old fixed 0, and
        // the same state hashes the same key the same way.
        let state = SeededState::default();
        assert_ne!(state.0, 0);
        let hash = |s: &SeededState| {
            let mut h = s.build_hasher();
            h.write(b"token");
            h.finish()
        };
        assert_eq!(hash(&state), hash(&state));
    }
}
