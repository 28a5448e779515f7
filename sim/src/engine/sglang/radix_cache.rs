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

use std::collections::{BTreeSet, HashMap};

use crate::rng::mix64;

pub type NodeId = u32;
pub const ROOT: NodeId = 0;

#[derive(Clone, Debug)]
struct Node {
    key: Vec<u64>,
    parent: NodeId,
    num_children: u32,
    lock_ref: u32,
    last_access: u64,
    live: bool,
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
        let root = Node { key: Vec::new(), parent: ROOT, num_children: 0, lock_ref: 1, last_access: 0, live: true };
        RadixCache {
            nodes: vec![root],
            free_ids: Vec::new(),
            children: HashMap::new(),
            leaves: BTreeSet::new(),
            evictable: 0,
            protected: 0,
            page_size,
            clock: 0,
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

    fn child_key(&self, key: &[u64]) -> u64 {
        if self.page_size == 1 {
            key[0]
        } else {
            key[..self.page_size as usize].iter().fold(0x9e37_79b9, |acc, &t| mix64(acc ^ t))
        }
    }

    fn floor_page(&self, n: usize) -> usize {
        n / self.page_size as usize * self.page_size as usize
    }

    fn is_leaf(&self, id: NodeId) -> bool {
        id != ROOT && self.nodes[id as usize].num_children == 0
    }

    fn touch(&mut self, id: NodeId, now: u64) {
        let evictable_leaf = self.is_leaf(id) && self.nodes[id as usize].lock_ref == 0;
        let old = self.nodes[id as usize].last_access;
        if evictable_leaf {
            self.leaves.remove(&(old, id));
            self.leaves.insert((now, id));
        }
        self.nodes[id as usize].last_access = now;
    }

    fn common_prefix(&self, a: &[u64], b: &[u64]) -> usize {
        let n = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        self.floor_page(n)
    }

    /// Splits `child` after `at` tokens; returns the new upper node.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let (parent, lock_ref, last_access) = {
            let c = &self.nodes[child as usize];
            (c.parent, c.lock_ref, c.last_access)
        };
        let upper_key: Vec<u64> = self.nodes[child as usize].key[..at].to_vec();
        let lower_key: Vec<u64> = self.nodes[child as usize].key[at..].to_vec();
        let ck_upper = self.child_key(&upper_key);
        let ck_lower = self.child_key(&lower_key);
        let mid = self.alloc_node(Node { key: upper_key, parent, num_children: 1, lock_ref, last_access, live: true });
        self.children.insert((parent, ck_upper), mid);
        self.children.insert((mid, ck_lower), child);
        let c = &mut self.nodes[child as usize];
        c.key = lower_key;
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
        self.clock += 1;
        let now = self.clock;
        let key = &key[..self.floor_page(key.len())];
        let mut node = ROOT;
        let mut i = 0usize;
        let page = self.page_size as usize;
        while i + page <= key.len() {
            let ck = self.child_key(&key[i..]);
            let Some(&child) = self.children.get(&(node, ck)) else { break };
            self.touch(child, now);
            let common = self.common_prefix(&self.nodes[child as usize].key, &key[i..]);
            let clen = self.nodes[child as usize].key.len();
            if common < clen {
                if common > 0 {
                    node = self.split(child, common);
                    i += common;
                }
                break;
            }
            node = child;
            i += clen;
        }
        Match { len: i as u32, last_node: node }
    }

    /// The length [`RadixCache::match_prefix`] would return for `key`, read only: no access
    /// time refreshed, no node split, the clock untouched (what a router reading the cache
    /// through KV events sees).
    pub fn cached_prefix_len(&self, key: &[u64]) -> u32 {
        let key = &key[..self.floor_page(key.len())];
        let page = self.page_size as usize;
        let mut node = ROOT;
        let mut i = 0usize;
        while i + page <= key.len() {
            let Some(&child) = self.children.get(&(node, self.child_key(&key[i..]))) else { break };
            let common = self.common_prefix(&self.nodes[child as usize].key, &key[i..]);
            i += common;
            if common < self.nodes[child as usize].key.len() {
                break;
            }
            node = child;
        }
        i as u32
    }

    /// `insert`: adds `key` (page-floored) to the tree. Returns how many of
    /// its leading tokens were already cached (the caller frees its duplicate
    /// KV for those) and the node where the key ends.
    pub fn insert(&mut self, key: &[u64]) -> (u32, NodeId) {
        self.clock += 1;
        let now = self.clock;
        self.insert_at(ROOT, 0, key, now)
    }

    /// [`RadixCache::insert`] of `key` when its first `depth` tokens are the path from the
    /// root to `node` (a request's locked `last_node`, whose depth is its prefix length):
    /// the walk from the root would pass through `node` without splitting anything above
    /// it, touching every node on the way, so this touches them (by parent pointers, no
    /// lookups) and carries on from `node`. Exactly `insert(key)`, without re-walking the
    /// prefix. A locked node stays the deeper node of any split (`split` gives the new
    /// node the upper half), so `node` still ends at `depth`.
    pub fn insert_from(&mut self, node: NodeId, depth: u32, key: &[u64]) -> (u32, NodeId) {
        debug_assert!(depth as usize <= key.len() && (depth as usize).is_multiple_of(self.page_size as usize));
        debug_assert_eq!(self.depth(node), depth, "the node ends at the given depth");
        self.clock += 1;
        let now = self.clock;
        let mut n = node;
        while n != ROOT {
            self.touch(n, now);
            n = self.nodes[n as usize].parent;
        }
        self.insert_at(node, depth as usize, key, now)
    }

    /// Tokens from the root to the end of `node` (debug checks).
    fn depth(&self, mut node: NodeId) -> u32 {
        let mut d = 0;
        while node != ROOT {
            d += self.nodes[node as usize].key.len() as u32;
            node = self.nodes[node as usize].parent;
        }
        d
    }

    fn insert_at(&mut self, start: NodeId, start_i: usize, key: &[u64], now: u64) -> (u32, NodeId) {
        let key = &key[..self.floor_page(key.len())];
        let mut node = start;
        let mut i = start_i;
        let page = self.page_size as usize;
        while i + page <= key.len() {
            let ck = self.child_key(&key[i..]);
            match self.children.get(&(node, ck)).copied() {
                Some(child) => {
                    self.touch(child, now);
                    let common = self.common_prefix(&self.nodes[child as usize].key, &key[i..]);
                    let clen = self.nodes[child as usize].key.len();
                    if common < clen {
                        node = self.split(child, common);
                        i += common;
                    } else {
                        node = child;
                        i += clen;
                    }
                }
                None => {
                    let rest = key[i..].to_vec();
                    let added = rest.len() as u64;
                    // The parent stops being a leaf.
                    if self.is_leaf(node) && self.nodes[node as usize].lock_ref == 0 {
                        let la = self.nodes[node as usize].last_access;
                        self.leaves.remove(&(la, node));
                    }
                    let leaf = self.alloc_node(Node {
                        key: rest,
                        parent: node,
                        num_children: 0,
                        lock_ref: 0,
                        last_access: now,
                        live: true,
                    });
                    self.children.insert((node, ck), leaf);
                    self.nodes[node as usize].num_children += 1;
                    self.leaves.insert((now, leaf));
                    self.evictable += added;
                    return (i as u32, leaf);
                }
            }
        }
        (i as u32, node)
    }

    /// `inc_lock_ref`: protects the path from `node` to the root.
    pub fn inc_lock_ref(&mut self, mut node: NodeId) {
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            if n.lock_ref == 0 {
                let len = n.key.len() as u64;
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
                let len = n.key.len() as u64;
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
                let len = n.key.len() as u64;
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
            let Some((_, id)) = self.leaves.pop_first() else { break };
            let (parent, len, ck) = {
                let n = &self.nodes[id as usize];
                (n.parent, n.key.len() as u64, self.child_key(&n.key))
            };
            self.children.remove(&(parent, ck));
            self.nodes[id as usize].live = false;
            self.nodes[id as usize].key = Vec::new();
            self.free_ids.push(id);
            self.evictable -= len;
            freed += len;
            let p = &mut self.nodes[parent as usize];
            p.num_children -= 1;
            if parent != ROOT && p.num_children == 0 && p.lock_ref == 0 {
                let la = p.last_access;
                self.leaves.insert((la, parent));
            }
        }
        freed
    }

    /// Checks sizes, locks and the leaf set against the nodes.
    pub fn check(&self) -> Result<(), String> {
        let (mut ev, mut pr) = (0u64, 0u64);
        let mut kids = vec![0u32; self.nodes.len()];
        for (id, n) in self.nodes.iter().enumerate().skip(1) {
            if !n.live {
                continue;
            }
            if n.key.is_empty() || n.key.len() % self.page_size as usize != 0 {
                return Err(format!("node {id} has a key of {} tokens", n.key.len()));
            }
            kids[n.parent as usize] += 1;
            if n.lock_ref == 0 {
                ev += n.key.len() as u64;
            } else {
                pr += n.key.len() as u64;
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
