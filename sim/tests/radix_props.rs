//! The radix cache against a reference model: the set of cached token
//! sequences, matched by brute force.

use proptest::prelude::*;
use sim::engine::sglang::radix_cache::{Key, RadixCache, Run};

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

/// A key of runs for the run-keyed tree: segments drawn from a few keys at a few offsets (so
/// keys share prefixes, whole runs and parts of runs), some tokens given as literals of the
/// same value (a name that differs where the token does not: the token-by-token path).
fn run_key() -> impl Strategy<Value = Vec<(u64, u32, u32, bool)>> {
    prop::collection::vec((0u64..3, 0u32..4, 1u32..6, prop::bool::weighted(0.2)), 1..5)
}

fn runs_of(parts: &[(u64, u32, u32, bool)]) -> Vec<Run> {
    let mut runs = Vec::new();
    for &(key, off, len, literal) in parts {
        let derived = Run::derived(key, off, len);
        if literal {
            // The same tokens, each given by value.
            let tokens = Key::new(std::slice::from_ref(&derived), len as usize).tokens();
            runs.extend(tokens.into_iter().map(Run::literal));
        } else {
            runs.push(derived);
        }
    }
    runs
}

#[derive(Clone, Debug)]
enum RunOp {
    Insert(Vec<(u64, u32, u32, bool)>),
    Match(Vec<(u64, u32, u32, bool)>),
    LockMatch(Vec<(u64, u32, u32, bool)>),
    Peek(Vec<(u64, u32, u32, bool)>),
    Unlock(usize),
    Evict(u64),
}

fn run_op() -> impl Strategy<Value = RunOp> {
    prop_oneof![
        3 => run_key().prop_map(RunOp::Insert),
        2 => run_key().prop_map(RunOp::Match),
        1 => run_key().prop_map(RunOp::LockMatch),
        1 => run_key().prop_map(RunOp::Peek),
        1 => (0usize..8).prop_map(RunOp::Unlock),
        1 => (1u64..10).prop_map(RunOp::Evict),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Keys given as runs (the scheduler's) and the same keys given token by token make the
    /// same tree: every match, insert, lock, eviction and size agrees, node for node, at pages
    /// of 1 and 2.
    #[test]
    fn keys_as_runs_make_the_token_tree(ops in prop::collection::vec(run_op(), 1..60), page in 1u32..3) {
        let mut by_runs = RadixCache::new(page);
        let mut by_tokens = RadixCache::new(page);
        let mut locks: Vec<sim::engine::sglang::radix_cache::NodeId> = Vec::new();
        for op in ops {
            match op {
                RunOp::Insert(p) => {
                    let runs = runs_of(&p);
                    let key = Key::new(&runs, runs.iter().map(|r| r.len as usize).sum());
                    let tokens = key.tokens();
                    prop_assert_eq!(by_runs.insert_runs(key), by_tokens.insert(&tokens));
                }
                RunOp::Match(p) => {
                    let runs = runs_of(&p);
                    let key = Key::new(&runs, runs.iter().map(|r| r.len as usize).sum());
                    let tokens = key.tokens();
                    prop_assert_eq!(by_runs.match_prefix_runs(key), by_tokens.match_prefix(&tokens));
                }
                RunOp::LockMatch(p) => {
                    let runs = runs_of(&p);
                    let key = Key::new(&runs, runs.iter().map(|r| r.len as usize).sum());
                    let tokens = key.tokens();
                    let m = by_runs.match_prefix_runs(key);
                    prop_assert_eq!(m, by_tokens.match_prefix(&tokens));
                    if m.len > 0 {
                        by_runs.inc_lock_ref(m.last_node);
                        by_tokens.inc_lock_ref(m.last_node);
                        locks.push(m.last_node);
                    }
                }
                RunOp::Peek(p) => {
                    let runs = runs_of(&p);
                    let key = Key::new(&runs, runs.iter().map(|r| r.len as usize).sum());
                    let tokens = key.tokens();
                    prop_assert_eq!(by_runs.cached_prefix_len_runs(key), by_tokens.cached_prefix_len(&tokens));
                }
                RunOp::Unlock(k) => {
                    if !locks.is_empty() {
                        let node = locks.remove(k % locks.len());
                        by_runs.dec_lock_ref(node);
                        by_tokens.dec_lock_ref(node);
                    }
                }
                RunOp::Evict(n) => prop_assert_eq!(by_runs.evict(n), by_tokens.evict(n)),
            }
            prop_assert!(by_runs.check().is_ok(), "{:?}", by_runs.check());
            prop_assert_eq!(by_runs.evictable_size(), by_tokens.evictable_size());
            prop_assert_eq!(by_runs.protected_size(), by_tokens.protected_size());
        }
    }
}
