//! Named random streams.
//!
//! Every random component (arrival process, length sampler, prompt contents,
//! shuffles, EOS sampler, the random schedule policy) owns its own generator,
//! derived from the scenario seed and the component's *name*. Owning the
//! stream means that adding a random draw in one component never shifts the
//! values another component sees: same seed, same name, same sequence.
//!
//! The generator is ChaCha12 (portable and value-stable across platforms and
//! releases of `rand_chacha`, which is pinned exactly in the workspace). The
//! name selects the ChaCha *stream* (a 64-bit nonce), the seed the key.

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;

/// The generator type used everywhere in the simulator.
pub type Rng = ChaCha12Rng;

/// A generator for the component `name` under scenario seed `seed`.
pub fn stream(seed: u64, name: &str) -> Rng {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    rng.set_stream(fnv1a(name.as_bytes()));
    rng
}

/// FNV-1a, 64 bit: a fixed, documented hash for stream names.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 finaliser: a cheap, well-mixed bijection on `u64`, used to turn
/// (segment key, offset) pairs into token contents and to chain block hashes.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngCore;

    const STREAM_0_ARRIVALS_FIRST: u64 = 0x3170_6fbd_5f8e_8aa9;

    #[test]
    fn streams_are_independent_of_each_other_and_reproducible() {
        let a1: Vec<u64> = (0..4)
            .map({
                let mut r = stream(7, "arrivals");
                move |_| r.next_u64()
            })
            .collect();
        let a2: Vec<u64> = (0..4)
            .map({
                let mut r = stream(7, "arrivals");
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = stream(7, "lengths");
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a1, a2);
        assert_ne!(a1, b);
    }

    /// Value stability: if this changes, every published seed changes meaning.
    #[test]
    fn stream_values_are_stable_across_releases() {
        // Recorded from this implementation on 2026-11-30; a change here means
        // every recorded seed in the wild now produces different workloads.
        let mut r = stream(0, "arrivals");
        assert_eq!(r.next_u64(), STREAM_0_ARRIVALS_FIRST);
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
