//! SGLang's radix cache (`srt/mem_cache/radix_cache.py`), with its verbs:
//! `match_prefix`, `insert`, `inc_lock_ref`, `dec_lock_ref`, `evict`,
//! `evictable_size`, `protected_size`.
//!
//! * Nodes hold runs of tokens; children are found by their first token (or
//!   first page when `page_size > 1`). A match that ends inside a node
//!   **splits** it. Keys are page-floored.
//! * `lock_ref` counts the running requests whose prefix passes through a
//!   node; locking walks to the root. A node whose lock goes 0→1 moves its
//!   tokens from evictable to protected.
//! * Eviction takes unlocked **leaves**, least recently used first (a
//!   logical access clock; ties by node id), and pushes a parent that became
//!   an unlocked leaf. Whole nodes are evicted, so it can free more than asked.
//!
//! Nodes live in an arena indexed by `NodeId`; the leaves that can be
//! evicted are kept in a `BTreeSet<(last_access, NodeId)>`, so eviction order
//! is deterministic. The child map is only looked up, never iterated.
//!
//! **Access times, kept at the ends of paths.** SGLang's `_match_prefix_helper`
//! and `_insert_helper` (`srt/mem_cache/radix_cache.py`, 0.5.23) give every node
//! on the walked path the walk's `access_time`, and `evict` pops leaves by
//! `last_access_time`. Here one match or insert is one tick of the logical clock
//! (`now`), and every walk starts at the root, so a node's access time is never
//! older than a descendant's: it is the **maximum over its subtree**. The tree
//! therefore stores `now` only where a walk ends (the matched node, the new
//! leaf, and the node that a split cut in two, which the walk touched below its
//! end), and when a leaf is evicted its time is carried up to its parent. A
//! leaf's stored time is then exactly the time SGLang's walk would have written
//! (its subtree is itself), and only leaves are ever ordered; a split's upper
//! half takes the lower half's stored time, as `_split_node`'s new node sits
//! above the same subtree. Touching a path costs O(1) instead of O(depth).
//!
//! **Chains.** A prompt prefilled in chunks of `c` tokens is inserted chunk by
//! chunk (`cache_unfinished_req`), a chain of `P / c` nodes. A node whose key is
//! one run of a segment, `(key, off, len)`, whose child continues the same run
//! at `off + len`, is linked to it in a *chain*: `chains` maps (chain, end
//! offset) to the node. A walk standing at the end of a chain member, its key
//! continuing the same run, goes at once to the deepest member the key's run
//! covers (every member in between matches whole, by the names of its tokens,
//! and no walk touches or splits a node it passes through): O(log n) for what
//! took one lookup and one comparison per node. Links are made only where a new
//! leaf continues its parent's run (joining the parent's chain, or starting one
//! with it) or a member is split (both halves stay in the chain); a missed link
//! only costs the plain walk.
//!
//! **Keys as runs.** A key is not stored token by token but as [`Run`]s, the
//! way the workload names a request's tokens: a run of `len` tokens whose
//! `i`-th is `token_of(key, off + i)` (a prompt segment, the output), or a
//! literal token. Every comparison is still of token values, so the tree is
//! exactly the token tree: where two keys are at the same run position
//! (same run key, same offset) their next `min(left in either run)` tokens
//! are equal by construction and are skipped at once; anywhere else the
//! tokens are compared one by one, so even a chance equality of two
//! different runs' tokens matches as it would token by token. A private
//! prompt then costs one comparison and one run, not one per token.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::request::token_of;
use crate::rng::mix64;

/// The `off` of a literal run: one token, whose value is the run's `key`.
pub const LITERAL: u32 = u32::MAX;

/// Tokens `token_of(key, off) .. token_of(key, off + len − 1)`, or (`off ==`
/// [`LITERAL`], `len == 1`) the one token `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub key: u64,
    pub off: u32,
    pub len: u32,
}

impl Run {
    /// A run of a segment's tokens from `off`.
    pub fn derived(key: u64, off: u32, len: u32) -> Run {
        debug_assert!(u64::from(off) + u64::from(len) < u64::from(LITERAL), "offsets stay below LITERAL");
        Run { key, off, len }
    }

    /// One token given by value.
    pub fn literal(token: u64) -> Run {
        Run { key: token, off: LITERAL, len: 1 }
    }
}

/// The first `len` tokens of the concatenation of `runs`.
#[derive(Clone, Copy, Debug)]
pub struct Key<'a> {
    pub runs: &'a [Run],
    pub len: usize,
}

impl<'a> Key<'a> {
    pub fn new(runs: &'a [Run], len: usize) -> Key<'a> {
        debug_assert!(runs.iter().map(|r| r.len as usize).sum::<usize>() >= len, "a key within its runs");
        Key { runs, len }
    }

    /// The key's token values, one by one (tests, debugging).
    pub fn tokens(&self) -> Vec<u64> {
        let mut c = Cursor::new(*self);
        let mut out = Vec::with_capacity(self.len);
        while c.left > 0 {
            out.push(c.token());
            c.advance(1);
        }
        out
    }
}

/// Literal runs of `tokens` (the token-slice verbs and tests).
fn literal_runs(tokens: &[u64]) -> Vec<Run> {
    tokens.iter().map(|&t| Run::literal(t)).collect()
}

/// A position in a key: run `i`, `at` tokens into it, `left` tokens to the key's end.
#[derive(Clone, Copy, Debug)]
struct Cursor<'a> {
    runs: &'a [Run],
    i: usize,
    at: u32,
    left: usize,
}

impl<'a> Cursor<'a> {
    fn new(key: Key<'a>) -> Cursor<'a> {
        let mut c = Cursor { runs: key.runs, i: 0, at: 0, left: key.len };
        c.skip_empty();
        c
    }

    fn of_runs(runs: &'a [Run]) -> Cursor<'a> {
        Cursor::new(Key { runs, len: runs.iter().map(|r| r.len as usize).sum() })
    }

    fn skip_empty(&mut self) {
        while self.left > 0 && self.runs[self.i].len == self.at {
            self.i += 1;
            self.at = 0;
        }
    }

    /// The value of the token here (`left > 0`).
    #[inline]
    fn token(&self) -> u64 {
        let r = self.runs[self.i];
        if r.off == LITERAL {
            r.key
        } else {
            token_of(r.key, r.off + self.at)
        }
    }

    /// What names the token here: equal names, equal tokens for the rest of both runs.
    #[inline]
    fn name(&self) -> (u64, u32) {
        let r = self.runs[self.i];
        (r.key, if r.off == LITERAL { LITERAL } else { r.off + self.at })
    }

    /// Tokens left in the current run (within the key).
    #[inline]
    fn run_left(&self) -> usize {
        ((self.runs[self.i].len - self.at) as usize).min(self.left)
    }

    fn advance(&mut self, mut n: usize) {
        debug_assert!(n <= self.left);
        self.left -= n;
        while n > 0 {
            let in_run = (self.runs[self.i].len - self.at) as usize;
            if n < in_run {
                self.at += n as u32;
                n = 0;
            } else {
                n -= in_run;
                self.i += 1;
                self.at = 0;
            }
        }
        self.skip_empty();
    }

    /// The runs of the tokens from here to the key's end.
    fn rest(&self) -> Vec<Run> {
        let mut out = Vec::new();
        let mut c = *self;
        while c.left > 0 {
            let n = c.run_left();
            let r = c.runs[c.i];
            out.push(if r.off == LITERAL { r } else { Run { key: r.key, off: r.off + c.at, len: n as u32 } });
            c.advance(n);
        }
        out
    }
}

/// How many leading tokens two keys share (not page-floored).
fn common_tokens(mut a: Cursor, mut b: Cursor) -> usize {
    let mut n = 0;
    while a.left > 0 && b.left > 0 {
        if a.name() == b.name() {
            let k = a.run_left().min(b.run_left());
            a.advance(k);
            b.advance(k);
            n += k;
        } else if a.token() == b.token() {
            a.advance(1);
            b.advance(1);
            n += 1;
        } else {
            break;
        }
    }
    n
}

/// `runs` cut after `at` tokens: (the first `at`, the rest).
fn split_runs(runs: &[Run], at: usize) -> (Vec<Run>, Vec<Run>) {
    let c = Cursor::of_runs(runs);
    let upper = Cursor { left: at, ..c }.rest();
    let mut lower = c;
    lower.advance(at);
    (upper, lower.rest())
}

pub type NodeId = u32;
pub const ROOT: NodeId = 0;

#[derive(Clone, Debug)]
struct Node {
    /// The node's tokens, as runs ([`Run`]).
    key: Vec<Run>,
    /// Tokens in `key`.
    len: u32,
    parent: NodeId,
    num_children: u32,
    lock_ref: u32,
    /// The last walk that ended here (or, carried up, at an evicted child); the node's
    /// access time is the maximum over its subtree, equal to this on a leaf.
    last_access: u64,
    live: bool,
    /// The node's chain (0: none): its key is one run of a segment, continued by the
    /// next member.
    chain: u64,
}

/// The radix tree.
#[derive(Clone, Debug)]
pub struct RadixCache {
    nodes: Vec<Node>,
    free_ids: Vec<NodeId>,
    children: HashMap<(NodeId, u64), NodeId>,
    leaves: BTreeSet<(u64, NodeId)>,
    evictable: u64,
    protected: u64,
    page_size: u32,
    clock: u64,
    /// Chain members by (chain, end offset of the member's run).
    chains: BTreeMap<(u64, u32), NodeId>,
    /// The last chain id handed out.
    chains_made: u64,
}

/// One node as SGLang would hold it ([`RadixCache::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub parent: NodeId,
    pub tokens: Vec<u64>,
    pub lock_ref: u32,
    /// The time the last walk through the node wrote (the root: 0).
    pub last_access: u64,
}

/// A prefix match: how many tokens, ending at which node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    pub len: u32,
    pub last_node: NodeId,
}

impl RadixCache {
    pub fn new(page_size: u32) -> RadixCache {
        assert!(page_size >= 1);
        let root = Node {
            key: Vec::new(),
            len: 0,
            parent: ROOT,
            num_children: 0,
            lock_ref: 1,
            last_access: 0,
            live: true,
            chain: 0,
        };
        RadixCache {
            nodes: vec![root],
            free_ids: Vec::new(),
            children: HashMap::new(),
            leaves: BTreeSet::new(),
            evictable: 0,
            protected: 0,
            page_size,
            clock: 0,
            chains: BTreeMap::new(),
            chains_made: 0,
        }
    }

    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// Tokens in unlocked nodes.
    pub fn evictable_size(&self) -> u64 {
        self.evictable
    }

    /// Tokens in locked nodes.
    pub fn protected_size(&self) -> u64 {
        self.protected
    }

    pub fn total_size(&self) -> u64 {
        self.evictable + self.protected
    }

    /// The child-map key of the tokens from `c`: the first token, or a hash of the first page.
    fn child_key(&self, c: Cursor) -> u64 {
        if self.page_size == 1 {
            c.token()
        } else {
            let mut c = c;
            let mut acc = 0x9e37_79b9;
            for _ in 0..self.page_size {
                acc = mix64(acc ^ c.token());
                c.advance(1);
            }
            acc
        }
    }

    fn floor_page(&self, n: usize) -> usize {
        n / self.page_size as usize * self.page_size as usize
    }

    fn is_leaf(&self, id: NodeId) -> bool {
        id != ROOT && self.nodes[id as usize].num_children == 0
    }

    /// Stores `now` as `id`'s access time (and moves it in the leaf set if it is an
    /// evictable leaf). The walks call it on the node where they end and on a node they
    /// cut; the ancestors' times follow as maxima over their subtrees.
    fn touch(&mut self, id: NodeId, now: u64) {
        let evictable_leaf = self.is_leaf(id) && self.nodes[id as usize].lock_ref == 0;
        let old = self.nodes[id as usize].last_access;
        if evictable_leaf {
            self.leaves.remove(&(old, id));
            self.leaves.insert((now, id));
        }
        self.nodes[id as usize].last_access = now;
    }

    /// Tokens `node`'s key shares with the key from `c`, page-floored.
    fn common_prefix(&self, node: NodeId, c: Cursor) -> usize {
        self.floor_page(common_tokens(Cursor::of_runs(&self.nodes[node as usize].key), c))
    }

    /// Splits `child` after `at` tokens; returns the new upper node.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let (parent, lock_ref, last_access, chain) = {
            let c = &self.nodes[child as usize];
            (c.parent, c.lock_ref, c.last_access, c.chain)
        };
        let len = self.nodes[child as usize].len;
        let (upper_key, lower_key) = split_runs(&self.nodes[child as usize].key, at);
        let ck_upper = self.child_key(Cursor::of_runs(&upper_key));
        let ck_lower = self.child_key(Cursor::of_runs(&lower_key));
        let mid = self.alloc_node(Node {
            key: upper_key,
            len: at as u32,
            parent,
            num_children: 1,
            lock_ref,
            last_access,
            live: true,
            chain,
        });
        if chain != 0 {
            // Both halves of a member stay in its chain: the lower keeps its end offset,
            // the upper ends where the lower now starts.
            let r = self.nodes[mid as usize].key[0];
            self.chains.insert((chain, r.off + r.len), mid);
        }
        self.children.insert((parent, ck_upper), mid);
        self.children.insert((mid, ck_lower), child);
        let c = &mut self.nodes[child as usize];
        c.key = lower_key;
        c.len = len - at as u32;
        c.parent = mid;
        mid
    }

    fn alloc_node(&mut self, n: Node) -> NodeId {
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

    /// `match_prefix`: the longest cached prefix of `key` (the caller passes
    /// `fill_ids[:len-1]`), page-floored. Updates access times along the
    /// path and splits the node where the match ends inside it.
    pub fn match_prefix(&mut self, key: &[u64]) -> Match {
        let runs = literal_runs(key);
        self.match_prefix_runs(Key::new(&runs, key.len()))
    }

    /// [`RadixCache::match_prefix`] of a key given as runs.
    pub fn match_prefix_runs(&mut self, key: Key) -> Match {
        self.clock += 1;
        let now = self.clock;
        let mut cur = Cursor::new(Key { len: self.floor_page(key.len), ..key });
        let mut node = ROOT;
        let mut i = 0usize;
        let page = self.page_size as usize;
        while page <= cur.left {
            let ck = self.child_key(cur);
            let Some(&child) = self.children.get(&(node, ck)) else { break };
            let common = self.common_prefix(child, cur);
            let clen = self.nodes[child as usize].len as usize;
            if common < clen {
                // The walk touched `child` below where it ends (its time carries over to
                // the upper half of a split).
                self.touch(child, now);
                if common > 0 {
                    node = self.split(child, common);
                    i += common;
                }
                break;
            }
            node = child;
            i += clen;
            cur.advance(clen);
            if let Some((z, d)) = self.chain_jump(node, &cur) {
                node = z;
                i += d;
                cur.advance(d);
            }
        }
        if node != ROOT {
            self.touch(node, now);
        }
        Match { len: i as u32, last_node: node }
    }

    /// From `node`, matched whole, with the key at `cur`: when `node` is a chain member and
    /// the key continues its run, the deepest later member of the chain that the key's
    /// current run covers entirely, and how many tokens past `node` it ends. The plain walk
    /// would reach it node by node, each found by its first token (or page) and matched
    /// whole by the names of its tokens; the key is page-floored and every node holds
    /// whole pages, so each such step stays within `cur.left`.
    #[inline]
    fn chain_jump(&self, node: NodeId, cur: &Cursor) -> Option<(NodeId, usize)> {
        let n = &self.nodes[node as usize];
        if n.chain == 0 || cur.left == 0 {
            return None;
        }
        let run = n.key[0];
        let end = run.off + run.len;
        // A literal's offset is LITERAL, never a member's end.
        if cur.name() != (run.key, end) {
            return None;
        }
        let r = cur.run_left() as u32;
        let (&(_, z_end), &z) = self.chains.range((n.chain, end + 1)..=(n.chain, end + r)).next_back()?;
        Some((z, (z_end - end) as usize))
    }

    /// The length [`RadixCache::match_prefix`] would return for `key`, read only: no access
    /// time refreshed, no node split, the clock untouched (what a router reading the cache
    /// through KV events sees).
    pub fn cached_prefix_len(&self, key: &[u64]) -> u32 {
        let runs = literal_runs(key);
        self.cached_prefix_len_runs(Key::new(&runs, key.len()))
    }

    /// [`RadixCache::cached_prefix_len`] of a key given as runs.
    pub fn cached_prefix_len_runs(&self, key: Key) -> u32 {
        let mut cur = Cursor::new(Key { len: self.floor_page(key.len), ..key });
        let page = self.page_size as usize;
        let mut node = ROOT;
        let mut i = 0usize;
        while page <= cur.left {
            let Some(&child) = self.children.get(&(node, self.child_key(cur))) else { break };
            let common = self.common_prefix(child, cur);
            i += common;
            if common < self.nodes[child as usize].len as usize {
                break;
            }
            cur.advance(common);
            node = child;
            if let Some((z, d)) = self.chain_jump(node, &cur) {
                node = z;
                i += d;
                cur.advance(d);
            }
        }
        i as u32
    }

    /// `insert`: adds `key` (page-floored) to the tree. Returns how many of
    /// its leading tokens were already cached (the caller frees its duplicate
    /// KV for those) and the node where the key ends.
    pub fn insert(&mut self, key: &[u64]) -> (u32, NodeId) {
        let runs = literal_runs(key);
        self.insert_runs(Key::new(&runs, key.len()))
    }

    /// [`RadixCache::insert`] of a key given as runs.
    pub fn insert_runs(&mut self, key: Key) -> (u32, NodeId) {
        self.clock += 1;
        let now = self.clock;
        self.insert_at(ROOT, 0, key, now)
    }

    /// [`RadixCache::insert`] of `key` when its first `depth` tokens are the path from the
    /// root to `node` (a request's locked `last_node`, whose depth is its prefix length):
    /// the walk from the root would pass through `node` without splitting anything above
    /// it, touching every node on the way, which the time stored where the insert ends
    /// stands for (the module docs), so this carries on from `node`. Exactly
    /// `insert(key)`, without re-walking the prefix. A locked node stays the deeper node
    /// of any split (`split` gives the new node the upper half), so `node` still ends at
    /// `depth`.
    pub fn insert_from(&mut self, node: NodeId, depth: u32, key: Key) -> (u32, NodeId) {
        debug_assert!(depth as usize <= key.len && (depth as usize).is_multiple_of(self.page_size as usize));
        debug_assert_eq!(self.depth(node), depth, "the node ends at the given depth");
        self.clock += 1;
        let now = self.clock;
        self.insert_at(node, depth as usize, key, now)
    }

    /// Tokens from the root to the end of `node` (debug checks).
    fn depth(&self, mut node: NodeId) -> u32 {
        let mut d = 0;
        while node != ROOT {
            d += self.nodes[node as usize].len;
            node = self.nodes[node as usize].parent;
        }
        d
    }

    fn insert_at(&mut self, start: NodeId, start_i: usize, key: Key, now: u64) -> (u32, NodeId) {
        let mut cur = Cursor::new(Key { len: self.floor_page(key.len), ..key });
        let mut node = start;
        let mut i = start_i;
        cur.advance(start_i);
        let page = self.page_size as usize;
        while page <= cur.left {
            let ck = self.child_key(cur);
            match self.children.get(&(node, ck)).copied() {
                Some(child) => {
                    let common = self.common_prefix(child, cur);
                    let clen = self.nodes[child as usize].len as usize;
                    if common < clen {
                        // Touched below where the insert goes on (the upper half inherits).
                        self.touch(child, now);
                        node = self.split(child, common);
                        i += common;
                        cur.advance(common);
                    } else {
                        node = child;
                        i += clen;
                        cur.advance(clen);
                        if let Some((z, d)) = self.chain_jump(node, &cur) {
                            node = z;
                            i += d;
                            cur.advance(d);
                        }
                    }
                }
                None => {
                    let rest = cur.rest();
                    let added = cur.left as u64;
                    // The parent stops being a leaf.
                    if self.is_leaf(node) && self.nodes[node as usize].lock_ref == 0 {
                        let la = self.nodes[node as usize].last_access;
                        self.leaves.remove(&(la, node));
                    }
                    let chain = self.chain_for_new_leaf(node, &rest);
                    let leaf = self.alloc_node(Node {
                        key: rest,
                        len: added as u32,
                        parent: node,
                        num_children: 0,
                        lock_ref: 0,
                        last_access: now,
                        live: true,
                        chain,
                    });
                    if chain != 0 {
                        let r = self.nodes[leaf as usize].key[0];
                        self.chains.insert((chain, r.off + r.len), leaf);
                    }
                    self.children.insert((node, ck), leaf);
                    self.nodes[node as usize].num_children += 1;
                    self.leaves.insert((now, leaf));
                    self.evictable += added;
                    return (i as u32, leaf);
                }
            }
        }
        if node != ROOT {
            self.touch(node, now);
        }
        (i as u32, node)
    }

    /// The chain of a new leaf of key `rest` under `parent`: none unless the key is one run
    /// of a segment that continues the parent's run (the parent's key being one run of the
    /// same segment). Then the parent's chain, the parent being its last member (a later
    /// member would be a child starting with the same tokens, which the insert would have
    /// walked into); or, if the parent is in none, a new chain of the two, so that a node
    /// alone costs no chain entry.
    fn chain_for_new_leaf(&mut self, parent: NodeId, rest: &[Run]) -> u64 {
        let [r] = rest else { return 0 };
        if r.off == LITERAL || parent == ROOT {
            return 0;
        }
        let p = &self.nodes[parent as usize];
        let [pr] = p.key[..] else { return 0 };
        if pr.off == LITERAL || pr.key != r.key || pr.off + pr.len != r.off {
            return 0;
        }
        if p.chain != 0 {
            debug_assert!(
                self.chains.range((p.chain, r.off + 1)..(p.chain + 1, 0)).next().is_none(),
                "the parent ends its chain"
            );
            return p.chain;
        }
        self.chains_made += 1;
        let chain = self.chains_made;
        self.nodes[parent as usize].chain = chain;
        self.chains.insert((chain, r.off), parent);
        chain
    }

    /// `inc_lock_ref`: protects the path from `node` to the root.
    pub fn inc_lock_ref(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            if n.lock_ref == 0 {
                let len = u64::from(n.len);
                self.evictable -= len;
                self.protected += len;
                if n.num_children == 0 {
                    let la = n.last_access;
                    self.leaves.remove(&(la, node));
                }
            }
            let n = &mut self.nodes[node as usize];
            n.lock_ref += 1;
            node = n.parent;
        }
    }

    /// `inc_lock_ref(node)` followed by `dec_lock_ref(ancestor)`, for an `ancestor` of
    /// `node` (or `node` itself) that is locked: the path above `ancestor` goes up and down
    /// again with no 0↔1 transition, so only the nodes below it change.
    pub fn move_lock_down(&mut self, ancestor: NodeId, mut node: NodeId) {
        debug_assert!(ancestor == ROOT || self.nodes[ancestor as usize].lock_ref > 0);
        while node != ancestor {
            debug_assert!(node != ROOT, "not an ancestor");
            let n = &mut self.nodes[node as usize];
            if n.lock_ref == 0 {
                let len = u64::from(n.len);
                self.evictable -= len;
                self.protected += len;
                if n.num_children == 0 {
                    let la = n.last_access;
                    self.leaves.remove(&(la, node));
                }
            }
            let n = &mut self.nodes[node as usize];
            n.lock_ref += 1;
            node = n.parent;
        }
    }

    /// `dec_lock_ref`: releases the path from `node` to the root.
    pub fn dec_lock_ref(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            assert!(n.lock_ref > 0, "dec_lock_ref on an unlocked node");
            n.lock_ref -= 1;
            if n.lock_ref == 0 {
                let len = u64::from(n.len);
                self.evictable += len;
                self.protected -= len;
                if n.num_children == 0 {
                    let la = n.last_access;
                    self.leaves.insert((la, node));
                }
            }
            node = self.nodes[node as usize].parent;
        }
    }

    /// `evict`: removes unlocked leaves, least recently used first, until
    /// at least `num_tokens` are freed or nothing is evictable. Returns the
    /// tokens freed.
    pub fn evict(&mut self, num_tokens: u64) -> u64 {
        let mut freed = 0;
        while freed < num_tokens {
            let Some((la, id)) = self.leaves.pop_first() else { break };
            let (parent, len, ck) = {
                let n = &self.nodes[id as usize];
                (n.parent, u64::from(n.len), self.child_key(Cursor::of_runs(&n.key)))
            };
            self.children.remove(&(parent, ck));
            let n = &mut self.nodes[id as usize];
            if n.chain != 0 {
                // A leaf is its chain's last member.
                let r = n.key[0];
                self.chains.remove(&(n.chain, r.off + r.len));
            }
            n.live = false;
            n.key = Vec::new();
            n.len = 0;
            n.chain = 0;
            self.free_ids.push(id);
            self.evictable -= len;
            freed += len;
            let p = &mut self.nodes[parent as usize];
            p.num_children -= 1;
            // The parent's access time is the maximum over its subtree: it keeps the leaf's.
            p.last_access = p.last_access.max(la);
            if parent != ROOT && p.num_children == 0 && p.lock_ref == 0 {
                let la = p.last_access;
                self.leaves.insert((la, parent));
            }
        }
        freed
    }

    /// Every node slot, `None` where free: its parent, tokens, lock count and the access time
    /// SGLang's walks would have written, i.e. the maximum of the stored times over its
    /// subtree (module docs). O(nodes × depth), for tests against a reference tree.
    pub fn snapshot(&self) -> Vec<Option<NodeView>> {
        let mut access = vec![0u64; self.nodes.len()];
        for (id, n) in self.nodes.iter().enumerate().skip(1) {
            if !n.live {
                continue;
            }
            let mut a = id as NodeId;
            while a != ROOT {
                access[a as usize] = access[a as usize].max(n.last_access);
                a = self.nodes[a as usize].parent;
            }
        }
        self.nodes
            .iter()
            .zip(access)
            .map(|(n, last_access)| {
                n.live.then(|| NodeView {
                    parent: n.parent,
                    tokens: Key::new(&n.key, n.len as usize).tokens(),
                    lock_ref: n.lock_ref,
                    last_access,
                })
            })
            .collect()
    }

    /// Checks sizes, locks and the leaf set against the nodes.
    pub fn check(&self) -> Result<(), String> {
        let (mut ev, mut pr) = (0u64, 0u64);
        let mut kids = vec![0u32; self.nodes.len()];
        for (id, n) in self.nodes.iter().enumerate().skip(1) {
            if !n.live {
                continue;
            }
            let runs_len: u64 = n.key.iter().map(|r| u64::from(r.len)).sum();
            if runs_len != u64::from(n.len) || n.key.iter().any(|r| r.len == 0 || (r.off == LITERAL && r.len != 1)) {
                return Err(format!("node {id}: runs of {runs_len} tokens for a key of {}: {:?}", n.len, n.key));
            }
            if n.len == 0 || !n.len.is_multiple_of(self.page_size) {
                return Err(format!("node {id} has a key of {} tokens", n.len));
            }
            kids[n.parent as usize] += 1;
            if n.lock_ref == 0 {
                ev += u64::from(n.len);
            } else {
                pr += u64::from(n.len);
            }
            if n.parent != ROOT && self.nodes[n.parent as usize].lock_ref < n.lock_ref {
                return Err(format!(
                    "node {id} is locked {} times, its parent {}",
                    n.lock_ref, self.nodes[n.parent as usize].lock_ref
                ));
            }
            let leaf_evictable = n.num_children == 0 && n.lock_ref == 0;
            if leaf_evictable != self.leaves.contains(&(n.last_access, id as NodeId)) {
                return Err(format!("node {id}: evictable leaf {leaf_evictable} but leaf set disagrees"));
            }
        }
        for (id, n) in self.nodes.iter().enumerate() {
            if n.live && n.num_children != kids[id] {
                return Err(format!("node {id} counts {} children, has {}", n.num_children, kids[id]));
            }
        }
        if ev != self.evictable || pr != self.protected {
            return Err(format!("sizes: evictable {} / {ev}, protected {} / {pr}", self.evictable, self.protected));
        }
        self.check_chains()
    }

    /// Every chain member is a live node of one run of a segment, filed under its chain and
    /// end offset, and each member is the child of the one before, continuing its run.
    fn check_chains(&self) -> Result<(), String> {
        let mut members = 0usize;
        for (id, n) in self.nodes.iter().enumerate() {
            if n.chain == 0 {
                continue;
            }
            members += 1;
            let ok = n.live
                && matches!(n.key[..], [r] if r.off != LITERAL
                    && self.chains.get(&(n.chain, r.off + r.len)) == Some(&(id as NodeId)));
            if !ok {
                return Err(format!("node {id} in chain {} but not filed there: {:?}", n.chain, n.key));
            }
        }
        if members != self.chains.len() {
            return Err(format!("{} chain entries for {members} members", self.chains.len()));
        }
        let mut prev: Option<(u64, u32, NodeId)> = None;
        for (&(chain, end), &id) in &self.chains {
            let n = &self.nodes[id as usize];
            if n.chain != chain || n.key[0].off + n.key[0].len != end {
                return Err(format!("chain entry ({chain}, {end}) names node {id}, which disagrees"));
            }
            if let Some((pc, pend, pid)) = prev {
                if pc == chain
                    && (n.parent != pid || n.key[0].off != pend || n.key[0].key != self.nodes[pid as usize].key[0].key)
                {
                    return Err(format!("chain {chain}: node {id} does not continue node {pid}"));
                }
            }
            prev = Some((chain, end, id));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_splits_nodes_and_insert_reports_the_cached_prefix() {
        let mut t = RadixCache::new(1);
        assert_eq!(t.insert(&[1, 2, 3, 4, 5]).0, 0);
        assert_eq!(t.evictable_size(), 5);
        let m = t.match_prefix(&[1, 2, 3, 9]);
        assert_eq!(m.len, 3);
        assert_eq!(t.insert(&[1, 2, 3, 9, 9]).0, 3);
        assert_eq!(t.evictable_size(), 7);
        t.check().unwrap();
    }

    #[test]
    fn locked_paths_are_never_evicted_and_lru_leaves_go_first() {
        let mut t = RadixCache::new(1);
        t.insert(&[1, 2, 3]);
        t.insert(&[4, 5]);
        t.insert(&[6, 7, 8, 9]);
        let m = t.match_prefix(&[1, 2, 3]);
        t.inc_lock_ref(m.last_node);
        assert_eq!(t.protected_size(), 3);
        // [4,5] is the least recently used unlocked leaf.
        assert_eq!(t.evict(1), 2);
        assert_eq!(t.match_prefix(&[4, 5]).len, 0);
        assert_eq!(t.evict(100), 4);
        assert_eq!(t.match_prefix(&[1, 2, 3]).len, 3);
        t.dec_lock_ref(m.last_node);
        assert_eq!(t.evict(100), 3);
        assert_eq!(t.total_size(), 0);
        t.check().unwrap();
    }

    #[test]
    fn pages_floor_keys_and_matches() {
        let mut t = RadixCache::new(4);
        t.insert(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(t.total_size(), 8);
        assert_eq!(t.match_prefix(&[1, 2, 3, 4, 5, 6, 0, 0]).len, 4);
        t.check().unwrap();
    }
}
