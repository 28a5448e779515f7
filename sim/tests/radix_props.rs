//! The radix cache against a reference model: the set of cached token
//! sequences, matched by brute force.

use proptest::prelude::*;
use sim::engine::sglang::radix_cache::RadixCache;

fn lcp(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u64>),
    Match(Vec<u64>),
    LockMatch(Vec<u64>),
    Unlock(usize),
    Evict(u64),
}

fn seq() -> impl Strategy<Value = Vec<u64>> {
    // A small alphabet so sequences share prefixes often.
    prop::collection::vec(0u64..3, 1..12)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => seq().prop_map(Op::Insert),
        2 => seq().prop_map(Op::Match),
        1 => seq().prop_map(Op::LockMatch),
        1 => (0usize..8).prop_map(Op::Unlock),
        1 => (1u64..10).prop_map(Op::Evict),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Without eviction, a match is the longest common prefix with any
    /// inserted sequence, and insert reports what was already cached.
    #[test]
    fn a_match_is_the_longest_common_prefix_of_the_inserted_sequences(ops in prop::collection::vec((seq(), any::<bool>()), 1..40)) {
        let mut t = RadixCache::new(1);
        let mut stored: Vec<Vec<u64>> = Vec::new();
        for (s, insert) in ops {
            let want = stored.iter().map(|x| lcp(x, &s)).max().unwrap_or(0);
            if insert {
                let (already, _) = t.insert(&s);
                prop_assert_eq!(already as usize, want.min(s.len()));
                stored.push(s);
            } else {
                prop_assert_eq!(t.match_prefix(&s).len as usize, want);
            }
            prop_assert!(t.check().is_ok(), "{:?}", t.check());
        }
        // Sizes conserved: the tree holds exactly the distinct prefixes of what was inserted.
        let mut prefixes = std::collections::BTreeSet::new();
        for s in &stored {
            for i in 1..=s.len() {
                prefixes.insert(s[..i].to_vec());
            }
        }
        prop_assert_eq!(t.total_size(), prefixes.len() as u64);
        prop_assert_eq!(t.evictable_size(), prefixes.len() as u64);
    }

    /// With locks and eviction: locked paths are never evicted, evict frees
    /// what it says, sizes add up, and a match never claims more than what
    /// was inserted.
    #[test]
    fn locked_nodes_are_never_evicted_and_sizes_are_conserved(ops in prop::collection::vec(op(), 1..60)) {
        let mut t = RadixCache::new(1);
        let mut stored: Vec<Vec<u64>> = Vec::new();
        let mut locks: Vec<(Vec<u64>, u32, sim::engine::sglang::radix_cache::NodeId)> = Vec::new();
        for op in ops {
            match op {
                Op::Insert(s) => { t.insert(&s); stored.push(s); }
                Op::Match(s) => {
                    let m = t.match_prefix(&s);
                    let bound = stored.iter().map(|x| lcp(x, &s)).max().unwrap_or(0);
                    prop_assert!(m.len as usize <= bound);
                }
                Op::LockMatch(s) => {
                    let m = t.match_prefix(&s);
                    if m.len > 0 {
                        t.inc_lock_ref(m.last_node);
                        locks.push((s[..m.len as usize].to_vec(), m.len, m.last_node));
                    }
                }
                Op::Unlock(k) => {
                    if !locks.is_empty() {
                        let (_, _, node) = locks.remove(k % locks.len());
                        t.dec_lock_ref(node);
                    }
                }
                Op::Evict(n) => {
                    let before = t.total_size();
                    let freed = t.evict(n);
                    prop_assert_eq!(t.total_size(), before - freed);
                    prop_assert!(freed >= n.min(before - t.protected_size()) || t.evictable_size() == 0);
                }
            }
            prop_assert!(t.check().is_ok(), "{:?}", t.check());
            for (key, len, _) in &locks {
                prop_assert!(t.match_prefix(key).len >= *len, "a locked prefix was evicted");
            }
        }
        // Releasing every lock makes everything evictable.
        for (_, _, node) in locks.drain(..) {
            t.dec_lock_ref(node);
        }
        prop_assert_eq!(t.protected_size(), 0);
        t.evict(u64::MAX);
        prop_assert_eq!(t.total_size(), 0);
    }
}
