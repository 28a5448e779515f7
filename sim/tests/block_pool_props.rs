//! The vLLM block pool against a simple reference model: a plain list as the
//! free queue, searched linearly.

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;
use sim::engine::vllm::block_pool::BlockPool;

/// The reference: obviously correct, slow.
struct Reference {
    ref_cnt: Vec<u32>,
    hash: Vec<Option<u64>>,
    free: VecDeque<u32>,
    cached: BTreeMap<u64, Vec<u32>>,
}

impl Reference {
    fn new(n: u32) -> Reference {
        let mut r = Reference {
            ref_cnt: vec![0; n as usize],
            hash: vec![None; n as usize],
            free: (1..n).collect(),
            cached: BTreeMap::new(),
        };
        r.ref_cnt[0] = 1;
        r
    }
    fn get_new_blocks(&mut self, n: u32) -> Vec<u32> {
        (0..n)
            .map(|_| {
                let b = self.free.pop_front().unwrap();
                if let Some(h) = self.hash[b as usize].take() {
                    let v = self.cached.get_mut(&h).unwrap();
                    v.retain(|&x| x != b);
                    if v.is_empty() {
                        self.cached.remove(&h);
                    }
                }
                self.ref_cnt[b as usize] = 1;
                b
            })
            .collect()
    }
    fn touch(&mut self, b: u32) {
        if self.ref_cnt[b as usize] == 0 {
            let pos = self.free.iter().position(|&x| x == b).unwrap();
            self.free.remove(pos);
        }
        self.ref_cnt[b as usize] += 1;
    }
    fn cache(&mut self, b: u32, h: u64) {
        if self.hash[b as usize].is_none() {
            self.hash[b as usize] = Some(h);
            self.cached.entry(h).or_default().push(b);
        }
    }
    fn free_blocks(&mut self, ids: &[u32]) {
        for &b in ids {
            self.ref_cnt[b as usize] -= 1;
            if self.ref_cnt[b as usize] == 0 {
                self.free.push_back(b);
            }
        }
    }
    fn lookup(&self, h: u64) -> Option<u32> {
        self.cached.get(&h).and_then(|v| v.first().copied())
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A new holder takes `n` fresh blocks and caches some of them under hashes from a small space.
    Alloc { n: u32, hashes: Vec<u8> },
    /// A new holder takes a reference on the cached block of hash `h`, if any.
    Hit { h: u8 },
    /// Holder `k` (mod the number of holders) frees its blocks, tail first.
    Free { k: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u32..6, prop::collection::vec(0u8..12, 0..6)).prop_map(|(n, hashes)| Op::Alloc { n, hashes }),
        (0u8..12).prop_map(|h| Op::Hit { h }),
        (0usize..16).prop_map(|k| Op::Free { k }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Free queue order (LRU eviction, tail-first freeing), ref counts and
    /// cache lookups always agree with the reference model, and the pool's
    /// own invariants hold.
    #[test]
    fn block_pool_agrees_with_the_reference_model(n in 3u32..24, ops in prop::collection::vec(op(), 1..80)) {
        let mut pool = BlockPool::new(n, true);
        let mut reference = Reference::new(n);
        let mut holders: Vec<Vec<u32>> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { n: k, hashes } => {
                    if k > pool.num_free() { continue; }
                    let mut got = Vec::new();
                    pool.get_new_blocks(k, &mut got);
                    let want = reference.get_new_blocks(k);
                    prop_assert_eq!(&got, &want);
                    for (b, h) in got.iter().zip(hashes) {
                        pool.cache_block(*b, u64::from(h));
                        reference.cache(*b, u64::from(h));
                    }
                    holders.push(got);
                }
                Op::Hit { h } => {
                    let got = pool.get_cached_block(u64::from(h));
                    prop_assert_eq!(got, reference.lookup(u64::from(h)));
                    if let Some(b) = got {
                        pool.touch(&[b]);
                        reference.touch(b);
                        holders.push(vec![b]);
                    }
                }
                Op::Free { k } => {
                    if holders.is_empty() { continue; }
                    let blocks = holders.remove(k % holders.len());
                    let rev: Vec<u32> = blocks.iter().rev().copied().collect();
                    pool.free_blocks(rev.iter().copied());
                    reference.free_blocks(&rev);
                }
            }
            prop_assert_eq!(pool.free_queue(), reference.free.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(pool.num_free() as usize, reference.free.len());
            for b in 1..n {
                prop_assert_eq!(pool.ref_cnt(b), reference.ref_cnt[b as usize]);
            }
            for h in 0..12u64 {
                prop_assert_eq!(pool.get_cached_block(h), reference.lookup(h));
            }
            prop_assert!(pool.check().is_ok(), "{:?}", pool.check());
        }
    }
}
