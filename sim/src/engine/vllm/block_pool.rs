//! vLLM V1's KV block pool (`v1/core/block_pool.py`, `kv_cache_utils.py`).
//!
//! * Block 0 is the `null_block`: `num_gpu_blocks - 1` blocks are usable.
//! * Free blocks sit in a doubly linked free queue
//!   (`FreeKVCacheBlockQueue`). Allocation pops from the front; freeing
//!   appends at the back. A *cached* block (one with a hash) whose ref count
//!   drops to 0 stays in the queue and counts as free: it is evicted lazily,
//!   when allocation pops it (`_maybe_evict_cached_block`). The front of the
//!   queue is therefore the least recently freed block: LRU eviction.
//! * A prefix hit on a block with ref 0 `touch`es it: removed from the free
//!   queue, ref count 1.
//! * `cached_block_hash_to_block` maps a full block's hash to the blocks
//!   holding it. Two requests that miss on the same content at the same time
//!   both compute it, so a hash may map to several blocks; a lookup takes the
//!   first. The map is only ever looked up, never iterated, so its order
//!   cannot leak into decisions.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Block hashes are already well mixed: hash them by identity.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type BlockHashMap<V> = HashMap<u64, V, BuildHasherDefault<IdentityHasher>>;

const NIL: u32 = u32::MAX;

/// 32 bytes: the hash and its flag apart, so that the watch position fits.
#[derive(Clone, Debug)]
struct Block {
    /// Hash of the full block this block holds, once registered (`has_hash`).
    hash: u64,
    ref_cnt: u32,
    prev: u32,
    next: u32,
    /// Position in the watched hit ([`BlockPool::watch`]), or `NIL`.
    watch_pos: u32,
    has_hash: bool,
    in_free_queue: bool,
}

impl Block {
    fn hash(&self) -> Option<u64> {
        self.has_hash.then_some(self.hash)
    }
}

/// The pool of KV blocks.
#[derive(Clone, Debug)]
pub struct BlockPool {
    blocks: Vec<Block>,
    head: u32,
    tail: u32,
    num_free: u32,
    /// Hash → the first block holding it (what a lookup returns).
    cached: BlockHashMap<u32>,
    /// Hash → further blocks holding it, in the order they were cached
    /// (rare: two requests computed the same block at the same time).
    duplicates: BlockHashMap<Vec<u32>>,
    enable_caching: bool,
    /// Watched blocks in the free queue (ref 0).
    watched_free: u32,
    /// The lowest watch position of a watched block evicted since
    /// [`BlockPool::reset_watched_cut`], or `NIL`.
    watched_cut: u32,
}

impl BlockPool {
    /// A pool of `num_gpu_blocks` blocks, block 0 reserved as the null block.
    pub fn new(num_gpu_blocks: u32, enable_caching: bool) -> BlockPool {
        assert!(num_gpu_blocks >= 2, "a pool needs the null block and at least one usable block");
        let n = num_gpu_blocks as usize;
        let mut blocks = Vec::with_capacity(n);
        blocks.resize(
            n,
            Block { hash: 0, ref_cnt: 0, prev: NIL, next: NIL, watch_pos: NIL, has_hash: false, in_free_queue: false },
        );
        let mut pool = BlockPool {
            blocks,
            head: NIL,
            tail: NIL,
            num_free: 0,
            // Sized for the pool (each block holds at most one hash), up to 2^18 blocks, so
            // that filling it does not rehash it a dozen times per run.
            cached: BlockHashMap::with_capacity_and_hasher(n.min(1 << 18), Default::default()),
            duplicates: BlockHashMap::default(),
            enable_caching,
            watched_free: 0,
            watched_cut: NIL,
        };
        // The null block is popped at construction and never freed.
        pool.blocks[0].ref_cnt = 1;
        for id in 1..num_gpu_blocks {
            pool.push_back(id);
        }
        pool
    }

    /// Usable blocks (`num_gpu_blocks - 1`).
    pub fn num_usable(&self) -> u32 {
        self.blocks.len() as u32 - 1
    }

    /// Blocks in the free queue, cached ones included.
    pub fn num_free(&self) -> u32 {
        self.num_free
    }

    /// `BlockPool.get_usage()`: `1 - free / (num_gpu_blocks - 1)`.
    pub fn usage(&self) -> f64 {
        1.0 - f64::from(self.num_free) / f64::from(self.num_usable())
    }

    pub fn ref_cnt(&self, id: u32) -> u32 {
        self.blocks[id as usize].ref_cnt
    }

    /// `get_cached_block`: the first block holding `hash`, if any.
    pub fn get_cached_block(&self, hash: u64) -> Option<u32> {
        if !self.enable_caching {
            return None;
        }
        self.cached.get(&hash).copied()
    }

    /// `touch`: takes a reference on hit blocks, pulling those with ref 0 out
    /// of the free queue.
    pub fn touch(&mut self, ids: &[u32]) {
        for &id in ids {
            if self.blocks[id as usize].ref_cnt == 0 {
                self.unlink(id);
            }
            self.blocks[id as usize].ref_cnt += 1;
        }
    }

    /// Watches `ids`, the blocks of a prefix hit from position `first_pos` on (distinct
    /// blocks that hold hashes and are not watched yet): from now on the pool counts how
    /// many watched blocks have ref 0 ([`BlockPool::watched_free`]) and notes the lowest
    /// position of a watched block that allocation evicts ([`BlockPool::watched_cut`]).
    /// Returns false, watching none of `ids`, if one of them is watched already. What the
    /// scheduler memoises a blocked head of queue's prefix hit with: the blocks a lookup
    /// finds change only where one is evicted, or where the hash after them gets cached.
    pub fn watch(&mut self, ids: &[u32], first_pos: u32) -> bool {
        for (k, &id) in ids.iter().enumerate() {
            let b = &mut self.blocks[id as usize];
            if b.watch_pos != NIL {
                self.unwatch(&ids[..k]);
                return false;
            }
            debug_assert!(b.has_hash);
            b.watch_pos = first_pos + k as u32;
            self.watched_free += u32::from(b.in_free_queue);
        }
        true
    }

    /// Stops watching `ids` (watched blocks).
    pub fn unwatch(&mut self, ids: &[u32]) {
        for &id in ids {
            let b = &mut self.blocks[id as usize];
            debug_assert!(b.watch_pos != NIL);
            b.watch_pos = NIL;
            self.watched_free -= u32::from(b.in_free_queue);
        }
    }

    /// How many watched blocks have ref 0 (a hit on them takes them out of the free queue).
    pub fn watched_free(&self) -> u32 {
        self.watched_free
    }

    /// The lowest watch position of a block evicted since the last reset, `u32::MAX` if none.
    pub fn watched_cut(&self) -> u32 {
        self.watched_cut
    }

    pub fn reset_watched_cut(&mut self) {
        self.watched_cut = NIL;
    }

    /// `get_new_blocks`: pops `n` blocks from the front of the free queue,
    /// evicting their cached hashes. The caller has checked `n <= num_free`.
    pub fn get_new_blocks(&mut self, n: u32, out: &mut Vec<u32>) {
        assert!(n <= self.num_free, "allocation of {n} blocks with {} free", self.num_free);
        for _ in 0..n {
            let id = self.head;
            self.unlink(id);
            self.maybe_evict_cached_block(id);
            self.blocks[id as usize].ref_cnt = 1;
            out.push(id);
        }
    }

    /// `cache_full_blocks`: registers `hash` as held by block `id`.
    pub fn cache_block(&mut self, id: u32, hash: u64) {
        if !self.enable_caching {
            return;
        }
        let b = &mut self.blocks[id as usize];
        if b.has_hash {
            return;
        }
        b.hash = hash;
        b.has_hash = true;
        match self.cached.entry(hash) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(id);
            }
            std::collections::hash_map::Entry::Occupied(_) => self.duplicates.entry(hash).or_default().push(id),
        }
    }

    /// `free_blocks`: drops one reference on each block, in the order given
    /// (the caller passes a request's blocks tail first); blocks reaching 0
    /// are appended to the back of the free queue.
    pub fn free_blocks(&mut self, ids: impl Iterator<Item = u32>) {
        for id in ids {
            let b = &mut self.blocks[id as usize];
            assert!(b.ref_cnt > 0, "block {id} freed with ref 0");
            b.ref_cnt -= 1;
            if b.ref_cnt == 0 {
                // A full block keeps its hash: it stays a prefix-cache hit
                // until allocation evicts it.
                self.push_back(id);
            }
        }
    }

    fn maybe_evict_cached_block(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        if !b.has_hash {
            return;
        }
        b.has_hash = false;
        let h = b.hash;
        self.watched_cut = self.watched_cut.min(b.watch_pos);
        // One probe of `cached` (this runs for most blocks a prompt allocates once the pool
        // has wrapped), and none of `duplicates` while it is empty (nearly always).
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.cached.entry(h) {
            if *e.get() == id {
                // The next duplicate, if any, becomes the one lookups find.
                let dups = if self.duplicates.is_empty() { None } else { self.duplicates.get_mut(&h) };
                match dups {
                    Some(d) => {
                        let next = d.remove(0);
                        if d.is_empty() {
                            self.duplicates.remove(&h);
                        }
                        e.insert(next);
                    }
                    None => {
                        e.remove();
                    }
                }
                return;
            }
        }
        if self.duplicates.is_empty() {
            return;
        }
        if let Some(d) = self.duplicates.get_mut(&h) {
            d.retain(|&b| b != id);
            if d.is_empty() {
                self.duplicates.remove(&h);
            }
        }
    }

    fn push_back(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        debug_assert!(!b.in_free_queue);
        b.in_free_queue = true;
        self.watched_free += u32::from(b.watch_pos != NIL);
        b.prev = self.tail;
        b.next = NIL;
        if self.tail == NIL {
            self.head = id;
        } else {
            self.blocks[self.tail as usize].next = id;
        }
        self.tail = id;
        self.num_free += 1;
    }

    fn unlink(&mut self, id: u32) {
        let (prev, next) = {
            let b = &mut self.blocks[id as usize];
            assert!(b.in_free_queue, "block {id} is not in the free queue");
            b.in_free_queue = false;
            self.watched_free -= u32::from(b.watch_pos != NIL);
            (b.prev, b.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        self.num_free -= 1;
    }

    /// The free queue front to back (for tests and invariant checks).
    pub fn free_queue(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.num_free as usize);
        let mut id = self.head;
        while id != NIL {
            v.push(id);
            id = self.blocks[id as usize].next;
        }
        v
    }

    /// Checks the pool's own invariants: the free queue holds exactly the
    /// usable blocks with ref 0, links are consistent, and every cached hash
    /// points at blocks that hold it.
    pub fn check(&self) -> Result<(), String> {
        let q = self.free_queue();
        if q.len() as u32 != self.num_free {
            return Err(format!("free queue has {} blocks, counter says {}", q.len(), self.num_free));
        }
        for (id, b) in self.blocks.iter().enumerate().skip(1) {
            if (b.ref_cnt == 0) != b.in_free_queue {
                return Err(format!("block {id}: ref {} but in_free_queue={}", b.ref_cnt, b.in_free_queue));
            }
        }
        let watched_free = self.blocks.iter().filter(|b| b.watch_pos != NIL && b.in_free_queue).count();
        if watched_free != self.watched_free as usize {
            return Err(format!("{watched_free} watched blocks are free, counter says {}", self.watched_free));
        }
        if self.blocks[0].in_free_queue {
            return Err("the null block is in the free queue".into());
        }
        let held = self.cached.iter().map(|(h, &id)| (h, id));
        let dups = self.duplicates.iter().flat_map(|(h, ids)| ids.iter().map(move |&id| (h, id)));
        let mut n = 0usize;
        for (h, id) in held.chain(dups) {
            n += 1;
            if self.blocks[id as usize].hash() != Some(*h) {
                return Err(format!("hash map points at block {id} which does not hold that hash"));
            }
        }
        let hashed = self.blocks.iter().filter(|b| b.has_hash).count();
        if n != hashed {
            return Err(format!("{hashed} blocks hold a hash but the maps list {n}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_block_is_reserved_and_usage_counts_usable_blocks() {
        let p = BlockPool::new(11, true);
        assert_eq!(p.num_usable(), 10);
        assert_eq!(p.num_free(), 10);
        assert_eq!(p.usage(), 0.0);
        assert!(!p.free_queue().contains(&0));
    }

    #[test]
    fn freed_blocks_go_to_the_back_tail_first_and_are_evicted_lru() {
        let mut p = BlockPool::new(5, true); // usable 1..=4
        let mut a = vec![];
        p.get_new_blocks(2, &mut a); // 1, 2
        assert_eq!(a, vec![1, 2]);
        p.cache_block(1, 100);
        p.cache_block(2, 200);
        p.free_blocks(a.iter().rev().copied());
        // queue: 3, 4, 2, 1 (request's tail block first)
        assert_eq!(p.free_queue(), vec![3, 4, 2, 1]);
        assert_eq!(p.get_cached_block(100), Some(1));
        let mut b = vec![];
        p.get_new_blocks(3, &mut b); // 3, 4, then 2 evicted
        assert_eq!(b, vec![3, 4, 2]);
        assert_eq!(p.get_cached_block(200), None);
        assert_eq!(p.get_cached_block(100), Some(1));
        p.touch(&[1]);
        assert_eq!(p.num_free(), 0);
        assert_eq!(p.ref_cnt(1), 1);
        p.check().unwrap();
    }
}
