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

/// SGLang's radix cache written out as `srt/mem_cache/radix_cache.py` (0.5.23) does it,
/// token by token: every walk writes its time into every node it passes
/// (`_match_prefix_helper`, `_insert_helper`), a split's upper node takes the lower's time
/// (`_split_node`), locks walk to the root, and `evict` takes the unlocked leaf of the
/// least (time, id), found by scanning every node. Node ids are handed out as the cache
/// does (a split's upper node, then a new leaf; freed ids reused last-freed first), so the
/// two trees can be compared id by id.
mod reference {
    use sim::engine::sglang::radix_cache::{NodeId, NodeView, ROOT};

    #[derive(Clone, Debug)]
    struct Node {
        tokens: Vec<u64>,
        parent: NodeId,
        children: Vec<NodeId>,
        lock_ref: u32,
        last_access: u64,
        live: bool,
    }

    pub struct Tree {
        nodes: Vec<Node>,
        free_ids: Vec<NodeId>,
        page: usize,
        clock: u64,
    }

    impl Tree {
        pub fn new(page: u32) -> Tree {
            let root = Node { tokens: vec![], parent: ROOT, children: vec![], lock_ref: 1, last_access: 0, live: true };
            Tree { nodes: vec![root], free_ids: vec![], page: page as usize, clock: 0 }
        }

        fn floor(&self, n: usize) -> usize {
            n / self.page * self.page
        }

        fn child(&self, node: NodeId, key: &[u64]) -> Option<NodeId> {
            let first = &key[..self.page];
            self.nodes[node as usize]
                .children
                .iter()
                .copied()
                .find(|&c| self.nodes[c as usize].tokens[..self.page] == *first)
        }

        fn alloc(&mut self, n: Node) -> NodeId {
            match self.free_ids.pop() {
                Some(id) => {
                    self.nodes[id as usize] = n;
                    id
                }
                None => {
                    self.nodes.push(n);
                    (self.nodes.len() - 1) as NodeId
                }
            }
        }

        fn split(&mut self, child: NodeId, at: usize) -> NodeId {
            let c = self.nodes[child as usize].clone();
            let mid = self.alloc(Node {
                tokens: c.tokens[..at].to_vec(),
                parent: c.parent,
                children: vec![child],
                lock_ref: c.lock_ref,
                last_access: c.last_access,
                live: true,
            });
            for k in &mut self.nodes[c.parent as usize].children {
                if *k == child {
                    *k = mid;
                }
            }
            let c = &mut self.nodes[child as usize];
            c.tokens.drain(..at);
            c.parent = mid;
            mid
        }

        fn common(&self, node: NodeId, key: &[u64]) -> usize {
            let t = &self.nodes[node as usize].tokens;
            self.floor(t.iter().zip(key).take_while(|(a, b)| a == b).count())
        }

        pub fn match_prefix(&mut self, key: &[u64]) -> (u32, NodeId) {
            self.clock += 1;
            let now = self.clock;
            let key = &key[..self.floor(key.len())];
            let (mut node, mut i) = (ROOT, 0);
            while key.len() - i >= self.page {
                let Some(child) = self.child(node, &key[i..]) else { break };
                self.nodes[child as usize].last_access = now;
                let common = self.common(child, &key[i..]);
                if common < self.nodes[child as usize].tokens.len() {
                    if common > 0 {
                        node = self.split(child, common);
                        i += common;
                    }
                    break;
                }
                node = child;
                i += common;
            }
            (i as u32, node)
        }

        pub fn cached_prefix_len(&self, key: &[u64]) -> u32 {
            let key = &key[..self.floor(key.len())];
            let (mut node, mut i) = (ROOT, 0);
            while key.len() - i >= self.page {
                let Some(child) = self.child(node, &key[i..]) else { break };
                let common = self.common(child, &key[i..]);
                i += common;
                if common < self.nodes[child as usize].tokens.len() {
                    break;
                }
                node = child;
            }
            i as u32
        }

        pub fn insert(&mut self, key: &[u64]) -> (u32, NodeId) {
            self.clock += 1;
            let now = self.clock;
            self.insert_at(ROOT, 0, key, now)
        }

        pub fn insert_from(&mut self, node: NodeId, depth: u32, key: &[u64]) -> (u32, NodeId) {
            self.clock += 1;
            let now = self.clock;
            let mut n = node;
            while n != ROOT {
                self.nodes[n as usize].last_access = now;
                n = self.nodes[n as usize].parent;
            }
            self.insert_at(node, depth as usize, key, now)
        }

        fn insert_at(&mut self, start: NodeId, start_i: usize, key: &[u64], now: u64) -> (u32, NodeId) {
            let key = &key[..self.floor(key.len())];
            let (mut node, mut i) = (start, start_i);
            while key.len() - i >= self.page {
                match self.child(node, &key[i..]) {
                    Some(child) => {
                        self.nodes[child as usize].last_access = now;
                        let common = self.common(child, &key[i..]);
                        node = if common < self.nodes[child as usize].tokens.len() {
                            self.split(child, common)
                        } else {
                            child
                        };
                        i += common;
                    }
                    None => {
                        let leaf = self.alloc(Node {
                            tokens: key[i..].to_vec(),
                            parent: node,
                            children: vec![],
                            lock_ref: 0,
                            last_access: now,
                            live: true,
                        });
                        self.nodes[node as usize].children.push(leaf);
                        return (i as u32, leaf);
                    }
                }
            }
            (i as u32, node)
        }

        pub fn inc_lock_ref(&mut self, mut node: NodeId) {
            while node != ROOT {
                self.nodes[node as usize].lock_ref += 1;
                node = self.nodes[node as usize].parent;
            }
        }

        pub fn dec_lock_ref(&mut self, mut node: NodeId) {
            while node != ROOT {
                self.nodes[node as usize].lock_ref -= 1;
                node = self.nodes[node as usize].parent;
            }
        }

        pub fn evict(&mut self, num_tokens: u64) -> u64 {
            let mut freed = 0;
            while freed < num_tokens {
                let lru = (1..self.nodes.len())
                    .filter(|&id| {
                        let n = &self.nodes[id];
                        n.live && n.children.is_empty() && n.lock_ref == 0
                    })
                    .min_by_key(|&id| (self.nodes[id].last_access, id));
                let Some(id) = lru else { break };
                let n = &mut self.nodes[id];
                n.live = false;
                freed += n.tokens.len() as u64;
                let parent = n.parent as usize;
                self.nodes[parent].children.retain(|&c| c != id as NodeId);
                self.free_ids.push(id as NodeId);
            }
            freed
        }

        /// (evictable, protected) tokens.
        pub fn sizes(&self) -> (u64, u64) {
            let live = self.nodes.iter().skip(1).filter(|n| n.live);
            live.fold((0, 0), |(e, p), n| {
                let len = n.tokens.len() as u64;
                if n.lock_ref == 0 {
                    (e + len, p)
                } else {
                    (e, p + len)
                }
            })
        }

        pub fn snapshot(&self) -> Vec<Option<NodeView>> {
            self.nodes
                .iter()
                .map(|n| {
                    n.live.then(|| NodeView {
                        parent: n.parent,
                        tokens: n.tokens.clone(),
                        lock_ref: n.lock_ref,
                        last_access: n.last_access,
                    })
                })
                .collect()
        }
    }
}

/// A prompt as the workload names it: a few segments, mostly long enough to be prefilled in
/// many tiny chunks, from few keys at few offsets (so prompts share prefixes and parts of
/// runs), now and then a segment given token by token as literals of the same values.
fn chained_key() -> impl Strategy<Value = Vec<(u64, u32, u32, bool)>> {
    prop::collection::vec((0u64..3, (0u32..3).prop_map(|o| o * 7), 1u32..40, prop::bool::weighted(0.1)), 1..4)
}

#[derive(Clone, Debug)]
enum ChainOp {
    /// The scheduler's chunked prefill: match the key but its last token, lock the match,
    /// then insert chunk after chunk from the locked node (`insert_from`), moving the lock
    /// down each time (`cache_unfinished_req`); the lock is kept.
    Prefill(Vec<(u64, u32, u32, bool)>, u32),
    Insert(Vec<(u64, u32, u32, bool)>),
    Match(Vec<(u64, u32, u32, bool)>),
    Peek(Vec<(u64, u32, u32, bool)>),
    Unlock(usize),
    Evict(u64),
}

fn chain_op() -> impl Strategy<Value = ChainOp> {
    prop_oneof![
        3 => (chained_key(), 1u32..6).prop_map(|(k, c)| ChainOp::Prefill(k, c)),
        1 => chained_key().prop_map(ChainOp::Insert),
        3 => chained_key().prop_map(ChainOp::Match),
        1 => chained_key().prop_map(ChainOp::Peek),
        2 => (0usize..8).prop_map(ChainOp::Unlock),
        2 => (1u64..25).prop_map(ChainOp::Evict),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, .. ProptestConfig::default() })]

    /// The cache (access times kept where walks end, chains of tiny nodes skipped) against
    /// SGLang's tree written out token by token with every access time written on every
    /// path: after each operation the same nodes under the same ids, with the same tokens,
    /// parents, lock counts and access times; the same results from every verb; the same
    /// leaves evicted in the same order; at pages of 1 and 2.
    #[test]
    fn the_cache_is_sglangs_tree_node_for_node(ops in prop::collection::vec(chain_op(), 1..40), page in 1u32..3) {
        let mut t = RadixCache::new(page);
        let mut r = reference::Tree::new(page);
        let mut locks: Vec<sim::engine::sglang::radix_cache::NodeId> = Vec::new();
        let floor = |n: usize| n / page as usize * page as usize;
        for op in ops {
            match op {
                ChainOp::Prefill(p, chunk) => {
                    let runs = runs_of(&p);
                    let len: usize = runs.iter().map(|x| x.len as usize).sum();
                    let tokens = Key::new(&runs, len).tokens();
                    if len < 2 {
                        continue;
                    }
                    let m = t.match_prefix_runs(Key::new(&runs, len - 1));
                    prop_assert_eq!((m.len, m.last_node), r.match_prefix(&tokens[..len - 1]));
                    t.inc_lock_ref(m.last_node);
                    r.inc_lock_ref(m.last_node);
                    let (mut last, mut depth) = (m.last_node, m.len);
                    let mut end = m.len as usize;
                    while end < len {
                        end = (end + (chunk * page) as usize).min(len);
                        let insert_len = floor(end);
                        let got = t.insert_from(last, depth, Key::new(&runs, insert_len));
                        prop_assert_eq!(got, r.insert_from(last, depth, &tokens[..insert_len]));
                        t.move_lock_down(last, got.1);
                        r.inc_lock_ref(got.1);
                        r.dec_lock_ref(last);
                        last = got.1;
                        depth = insert_len as u32;
                        prop_assert!(t.check().is_ok(), "{:?}", t.check());
                    }
                    locks.push(last);
                }
                ChainOp::Insert(p) => {
                    let runs = runs_of(&p);
                    let key = Key::new(&runs, runs.iter().map(|x| x.len as usize).sum());
                    let tokens = key.tokens();
                    prop_assert_eq!(t.insert_runs(key), r.insert(&tokens));
                }
                ChainOp::Match(p) => {
                    let runs = runs_of(&p);
                    let key = Key::new(&runs, runs.iter().map(|x| x.len as usize).sum());
                    let tokens = key.tokens();
                    let m = t.match_prefix_runs(key);
                    prop_assert_eq!((m.len, m.last_node), r.match_prefix(&tokens));
                }
                ChainOp::Peek(p) => {
                    let runs = runs_of(&p);
                    let key = Key::new(&runs, runs.iter().map(|x| x.len as usize).sum());
                    let tokens = key.tokens();
                    prop_assert_eq!(t.cached_prefix_len_runs(key), r.cached_prefix_len(&tokens));
                }
                ChainOp::Unlock(k) => {
                    if !locks.is_empty() {
                        let node = locks.remove(k % locks.len());
                        t.dec_lock_ref(node);
                        r.dec_lock_ref(node);
                    }
                }
                ChainOp::Evict(n) => prop_assert_eq!(t.evict(n), r.evict(n)),
            }
            prop_assert!(t.check().is_ok(), "{:?}", t.check());
            prop_assert_eq!((t.evictable_size(), t.protected_size()), r.sizes());
            prop_assert_eq!(t.snapshot(), r.snapshot());
        }
        // Everything unlocked and evicted, leaf by leaf, in the same order.
        for node in locks.drain(..) {
            t.dec_lock_ref(node);
            r.dec_lock_ref(node);
        }
        while t.total_size() > 0 {
            prop_assert_eq!(t.evict(1), r.evict(1));
            prop_assert_eq!(t.snapshot(), r.snapshot());
        }
    }
}
