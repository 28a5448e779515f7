//! vLLM V1's KV block pool (`v1/core/block_pool.py`, `kv_cache_utils.py`).
//!
//! * Block 0 is the `null_block`: `num_gpu_blocks - 1` blocks are usable.
//! * Free blocks sit in a free queue (`FreeKVCacheBlockQueue`, a doubly linked
//!   list in vLLM). Allocation pops from the front; freeing appends at the back.
//!   Here the queue is a ring buffer of `(block, stamp)` entries: a block taken
//!   from the middle (a prefix hit) leaves its entry behind, stale (the block is
//!   out of the queue, or back in it with a newer stamp), skipped when it reaches
//!   the front and dropped when stale entries outnumber the live ones. The live
//!   entries are the linked list's blocks in its order; popping reads the next
//!   blocks from consecutive memory instead of chasing links.
//! * **Anonymous blocks.** A block with no hash, held by one request that never registers
//!   it, or free, is interchangeable with any other such block: nothing vLLM does depends on
//!   which one it is (a lookup finds only hashed blocks, eviction only removes hashes). Such
//!   blocks carry no id here. A request that will not register its blocks (a private one,
//!   or any with caching off) holds a count of them; freed, they join the free queue as one
//!   entry, a *run* of that many anonymous blocks; allocation takes from a run by counting.
//!   Ids (the `blocks` entries) stand only for blocks whose identity matters: hashed ones,
//!   and those held by requests that register theirs. An id that stands for no block is
//!   *spare*; a spare id is given to an anonymous block when it must become a named one (a
//!   private request registering its blocks when preempted), and an id is made spare when
//!   its block becomes anonymous (popped by an anonymous allocation, its hash evicted).
//!   The queue's order of blocks is vLLM's: a run stands where its blocks would stand.
//!   A *cached* block (one with a hash) whose ref count
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

use std::collections::{HashMap, VecDeque};
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

/// A free-queue entry `(ANON, n)` is a run of `n` anonymous blocks.
const ANON: u32 = u32::MAX;

/// A free-queue entry `(FRESH, first)` stands for the blocks `first..num_gpu_blocks`, in that
/// order, as entries `(id, 0)` of their own would: the whole queue of a new pool in one entry
/// (a block that has never left the queue has stamp 0, and `push_back` never gives stamp 0),
/// its blocks taken from its front. A block taken out from the middle (a hit) is stale there,
/// as its own entry would be.
const FRESH: u32 = u32::MAX - 1;

/// `cached_block_hash_to_block`'s first blocks: hash → the block a lookup finds. Open
/// addressing with linear probing and backward-shift deletion, at most half full (each
/// block holds at most one hash). A slot is `hash's low 32 bits << 32 | block`, 0 when
/// empty (block 0, the null block, never holds a hash): one 8-byte probe finds a block's
/// slot by its id, and a hash's by its low bits, checked against the block's full hash.
/// Only looked up, never iterated in decisions.
#[derive(Clone, Debug)]
struct FirstBlockTable {
    slots: Vec<u64>,
    mask: usize,
}

impl FirstBlockTable {
    fn new(num_blocks: usize) -> FirstBlockTable {
        let n = (2 * num_blocks).next_power_of_two().max(16);
        FirstBlockTable { slots: vec![0; n], mask: n - 1 }
    }

    #[inline]
    fn home(&self, lo: u64) -> usize {
        lo as usize & self.mask
    }

    /// The block registered for `hash`, `blocks` holding the hashes.
    #[inline]
    fn get(&self, hash: u64, blocks: &[Block]) -> Option<u32> {
        let lo = hash & 0xffff_ffff;
        let mut i = self.home(lo);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s >> 32 == lo && blocks[s as u32 as usize].hash == hash {
                return Some(s as u32);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Registers `id` for `hash` unless a block is registered for it already; returns
    /// whether it did.
    #[inline]
    fn insert(&mut self, hash: u64, id: u32, blocks: &[Block]) -> bool {
        let lo = hash & 0xffff_ffff;
        let mut i = self.home(lo);
        loop {
            let s = self.slots[i];
            if s == 0 {
                self.slots[i] = lo << 32 | u64::from(id);
                return true;
            }
            if s >> 32 == lo && blocks[s as u32 as usize].hash == hash {
                return false;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The slot registering `id` for `hash`, if `id` is the block registered for it.
    #[inline]
    fn slot_of(&self, hash: u64, id: u32) -> Option<usize> {
        let lo = hash & 0xffff_ffff;
        let want = lo << 32 | u64::from(id);
        let mut i = self.home(lo);
        loop {
            let s = self.slots[i];
            if s == want {
                return Some(i);
            }
            if s == 0 {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Registers `id` instead in slot `i` (a block holding the same hash).
    fn replace(&mut self, i: usize, id: u32) {
        self.slots[i] = self.slots[i] & !0xffff_ffff | u64::from(id);
    }

    /// Empties slot `i`, shifting back the entries after it that probed past it.
    fn remove(&mut self, i: usize) {
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        loop {
            let s = self.slots[j];
            if s == 0 {
                break;
            }
            let home = self.home(s >> 32);
            // The entry may move to the hole unless its home lies cyclically in (hole, j].
            if j.wrapping_sub(home) & self.mask >= j.wrapping_sub(hole) & self.mask {
                self.slots[hole] = s;
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        self.slots[hole] = 0;
    }

    /// The registered blocks (for the invariant checks).
    fn blocks(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().filter(|&&s| s != 0).map(|&s| s as u32)
    }
}

/// 24 bytes: the hash and its flag apart, so that the watch position fits.
#[derive(Clone, Debug)]
struct Block {
    /// Hash of the full block this block holds, once registered (`has_hash`).
    hash: u64,
    ref_cnt: u32,
    /// Bumped each time the block joins the free queue: its live entry has this stamp.
    stamp: u32,
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
    /// The free queue, front first: `(block, stamp)`, live where the block is in the queue
    /// with that stamp, or `(ANON, n)`, a run of `n` anonymous blocks, or `(FRESH, first)`,
    /// the blocks from `first` on that have never left the queue (both always live).
    queue: VecDeque<(u32, u32)>,
    num_free: u32,
    /// Ids that stand for no block (see the module's doc), taken from the back.
    spare_ids: Vec<u32>,
    /// Hash → the first block holding it (what a lookup returns).
    cached: FirstBlockTable,
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
        assert!(num_gpu_blocks < FRESH, "block ids below the free queue's tags");
        let n = num_gpu_blocks as usize;
        let mut blocks = Vec::with_capacity(n);
        // Every usable block in the free queue, in id order: one `FRESH` entry.
        blocks.resize(n, Block { hash: 0, ref_cnt: 0, stamp: 0, watch_pos: NIL, has_hash: false, in_free_queue: true });
        let mut pool = BlockPool {
            blocks,
            queue: VecDeque::with_capacity(n),
            num_free: 0,
            spare_ids: Vec::new(),
            cached: FirstBlockTable::new(n),
            duplicates: BlockHashMap::default(),
            enable_caching,
            watched_free: 0,
            watched_cut: NIL,
        };
        // The null block is popped at construction and never freed.
        pool.blocks[0].ref_cnt = 1;
        pool.blocks[0].in_free_queue = false;
        pool.queue.push_back((FRESH, 1));
        pool.num_free = num_gpu_blocks - 1;
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

    /// Whether block `id` is in the free queue (a named block with ref 0).
    #[inline]
    pub fn is_free(&self, id: u32) -> bool {
        self.blocks[id as usize].in_free_queue
    }

    pub fn ref_cnt(&self, id: u32) -> u32 {
        self.blocks[id as usize].ref_cnt
    }

    /// `get_cached_block`: the first block holding `hash`, if any.
    pub fn get_cached_block(&self, hash: u64) -> Option<u32> {
        if !self.enable_caching {
            return None;
        }
        self.cached.get(hash, &self.blocks)
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
                self.unwatch(&ids[..k], first_pos);
                return false;
            }
            debug_assert!(b.has_hash);
            b.watch_pos = first_pos + k as u32;
            self.watched_free += u32::from(b.in_free_queue);
        }
        true
    }

    /// Stops watching `ids`, watched from position `first_pos` on. An id no longer watched at
    /// its position is skipped: its block was evicted (which ends the watch with the hash) and
    /// the id may name another block now.
    pub fn unwatch(&mut self, ids: &[u32], first_pos: u32) {
        for (k, &id) in ids.iter().enumerate() {
            let b = &mut self.blocks[id as usize];
            if b.watch_pos != first_pos + k as u32 {
                continue;
            }
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

    /// The lowest watch position among the first `n` blocks of the free queue (`n <=
    /// num_free`), the blocks allocating `n` evicts: what [`BlockPool::watched_cut`] would
    /// become. `u32::MAX` if none is watched.
    pub fn front_watched_cut(&self, n: u32) -> u32 {
        let mut cut = NIL;
        if self.watched_free == 0 {
            return cut;
        }
        for id in self.live().take(n as usize).flatten() {
            cut = cut.min(self.blocks[id as usize].watch_pos);
        }
        cut
    }

    /// Whether some hash is held by more than one block (a lookup of it could move to another
    /// block when the one it finds is evicted).
    pub fn has_duplicates(&self) -> bool {
        !self.duplicates.is_empty()
    }

    /// `get_new_blocks`: pops `n` blocks from the front of the free queue,
    /// evicting their cached hashes. The caller has checked `n <= num_free`.
    pub fn get_new_blocks(&mut self, n: u32, out: &mut Vec<u32>) {
        assert!(n <= self.num_free, "allocation of {n} blocks with {} free", self.num_free);
        out.reserve(n as usize);
        self.num_free -= n;
        let mut left = n;
        while left > 0 {
            if let Some(k) = self.take_from_run(left) {
                // Named blocks from a run: spare ids stand for them.
                self.name_anonymous(k, out);
                left -= k;
            } else if let Some(id) = self.pop_named() {
                self.blocks[id as usize].ref_cnt = 1;
                out.push(id);
                left -= 1;
            }
        }
    }

    /// `get_new_blocks` for a request that holds its blocks anonymously (it never registers
    /// them): pops `n` blocks from the front of the free queue, evicting their cached hashes;
    /// the named ones popped become anonymous (their ids spare). The caller has checked
    /// `n <= num_free`.
    pub fn get_new_anonymous(&mut self, n: u32) {
        assert!(n <= self.num_free, "allocation of {n} blocks with {} free", self.num_free);
        self.num_free -= n;
        let mut left = n;
        while left > 0 {
            if let Some(k) = self.take_from_run(left) {
                left -= k;
            } else if let Some(k) = self.take_fresh(left) {
                left -= k;
            } else if let Some(id) = self.pop_named() {
                // The block is anonymous now: its watch ends (the watcher's lookup is cut
                // before it, `watched_cut`, and its `unwatch` skips it) and its id is spare.
                self.blocks[id as usize].watch_pos = NIL;
                self.spare_ids.push(id);
                left -= 1;
            }
        }
    }

    /// If the free queue's front is a run, takes up to `left` of its blocks and returns how
    /// many (the free count already taken).
    #[inline]
    fn take_from_run(&mut self, left: u32) -> Option<u32> {
        let front = self.queue.front_mut().expect("the free queue holds a block");
        if front.0 != ANON {
            return None;
        }
        let k = front.1.min(left);
        if k < front.1 {
            front.1 -= k;
        } else {
            self.queue.pop_front();
        }
        Some(k)
    }

    /// If the free queue's front is a `FRESH` entry, pops up to `left` of its blocks for an
    /// anonymous allocation (their ids spare, in the order [`BlockPool::pop_named`] would
    /// give them up) and returns how many (the free count already taken).
    #[inline]
    fn take_fresh(&mut self, left: u32) -> Option<u32> {
        let &(tag, first) = self.queue.front().expect("the free queue holds a block");
        if tag != FRESH {
            return None;
        }
        let end = self.blocks.len() as u32;
        let (mut id, mut k) = (first, 0);
        while k < left && id < end {
            let b = &mut self.blocks[id as usize];
            // Live: never out of the queue, so without a hash and unwatched (`pop_named` only
            // takes it out of the queue).
            if b.in_free_queue && b.stamp == 0 {
                b.in_free_queue = false;
                self.spare_ids.push(id);
                k += 1;
            }
            id += 1;
        }
        if id < end {
            self.queue.front_mut().expect("the front").1 = id;
        } else {
            self.queue.pop_front();
        }
        Some(k)
    }

    /// Pops the free queue's front entry, a named block's: `None` if it is stale; else the block,
    /// out of the queue (the free count already taken) with its cached hash evicted (a watched
    /// one noted in `watched_cut`).
    #[inline]
    fn pop_named(&mut self) -> Option<u32> {
        let &(id, stamp) = self.queue.front().expect("the free queue holds a block");
        if id == FRESH {
            // The first of the blocks that had never left the queue: its entry `(first, 0)`.
            let first = stamp;
            if first + 1 < self.blocks.len() as u32 {
                self.queue.front_mut().expect("the front").1 += 1;
            } else {
                self.queue.pop_front();
            }
            let b = &mut self.blocks[first as usize];
            if !(b.in_free_queue && b.stamp == 0) {
                return None; // stale
            }
            // Never out of the queue: no hash, unwatched.
            b.in_free_queue = false;
            return Some(first);
        }
        self.queue.pop_front();
        let b = &mut self.blocks[id as usize];
        if !(b.in_free_queue && b.stamp == stamp) {
            return None; // stale
        }
        // `take_out`, the count already taken.
        b.in_free_queue = false;
        self.watched_free -= u32::from(b.watch_pos != NIL);
        if b.has_hash {
            self.maybe_evict_cached_block(id);
        }
        Some(id)
    }

    /// `free_blocks` of `n` anonymous blocks: one run at the back of the free queue.
    pub fn free_anonymous(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        match self.queue.back_mut() {
            Some(back) if back.0 == ANON => back.1 += n,
            _ => self.queue.push_back((ANON, n)),
        }
        self.num_free += n;
    }

    /// Names `n` anonymous blocks held by one request (ref 1, no hash): appends the ids that
    /// now stand for them to `out`.
    pub fn name_anonymous(&mut self, n: u32, out: &mut Vec<u32>) {
        for _ in 0..n {
            let id = self.spare_ids.pop().expect("a spare id for each anonymous block");
            self.blocks[id as usize].ref_cnt = 1;
            out.push(id);
        }
    }

    /// Blocks held anonymously: the usable ones neither free nor named by a reference.
    pub fn num_anonymous_held(&self) -> u32 {
        let named_held = self.blocks.iter().skip(1).filter(|b| b.ref_cnt > 0).count() as u32;
        self.num_usable().saturating_sub(self.num_free).saturating_sub(named_held)
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
        if !self.cached.insert(hash, id, &self.blocks) {
            self.duplicates.entry(hash).or_default().push(id);
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

    /// `free_blocks` as vLLM frees a request from 0.23 (`BlockPool.free_blocks`): tail first,
    /// the blocks that reach ref 0 without a hash are prepended to the free queue, to be reused
    /// first (`prepend_n`), and the hashed ones appended, to be evicted last (`append_n`).
    /// `named` are the request's named blocks in token order, then `anon` anonymous ones;
    /// its first `num_hashed` are those vLLM has hashed (`cache_blocks`), whether or not
    /// this pool registered them (a private request's are only counted). The unhashed ones are
    /// interchangeable (nothing finds a block without a hash): they join the front as one run
    /// of anonymous blocks, named ones giving up their ids.
    pub fn free_request_unhashed_first(&mut self, named: &[u32], anon: u32, num_hashed: u32) {
        let len = named.len() as u32;
        let anon_hashed = num_hashed.saturating_sub(len).min(anon);
        let mut front = anon - anon_hashed;
        let cut = num_hashed.min(len) as usize;
        // Tail first. The named blocks past `num_hashed` (held by this request alone: hits are
        // hashed blocks) become anonymous, unless registered all the same (then a cached block,
        // at the back: `anon_hashed` is 0 whenever there are such named blocks, so the order of
        // the back holds).
        for &id in named[cut..].iter().rev() {
            let b = &mut self.blocks[id as usize];
            assert!(b.ref_cnt > 0, "block {id} freed with ref 0");
            b.ref_cnt -= 1;
            if b.ref_cnt > 0 {
                continue;
            }
            if b.has_hash {
                self.push_back(id);
            } else {
                debug_assert_eq!(b.watch_pos, NIL, "a watched block has a hash");
                self.spare_ids.push(id);
                front += 1;
            }
        }
        if front > 0 {
            match self.queue.front_mut() {
                Some(f) if f.0 == ANON => f.1 += front,
                _ => self.queue.push_front((ANON, front)),
            }
            self.num_free += front;
        }
        // The hashed ones to the back, tail first: the anonymous (a private request's), then
        // the named.
        self.free_anonymous(anon_hashed);
        self.free_blocks(named[..cut].iter().rev().copied());
    }

    fn maybe_evict_cached_block(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        if !b.has_hash {
            return;
        }
        b.has_hash = false;
        let h = b.hash;
        // The watch ends with the hash (the head's memo is cut here at its next lookup, and its
        // `unwatch` skips the block): a block without a hash is never watched, also while it is
        // held and freed again before that lookup (a fast-forward's steps: it went to the spare
        // ids with its stale watch, which `check` caught).
        self.watched_cut = self.watched_cut.min(b.watch_pos);
        b.watch_pos = NIL;
        // One probe of `cached` (this runs for most blocks a prompt allocates once the pool
        // has wrapped), and none of `duplicates` while it is empty (nearly always).
        if let Some(slot) = self.cached.slot_of(h, id) {
            // The next duplicate, if any, becomes the one lookups find.
            let dups = if self.duplicates.is_empty() { None } else { self.duplicates.get_mut(&h) };
            match dups {
                Some(d) => {
                    let next = d.remove(0);
                    if d.is_empty() {
                        self.duplicates.remove(&h);
                    }
                    self.cached.replace(slot, next);
                }
                None => self.cached.remove(slot),
            }
            return;
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
        // Stamp 0 marks a block in a `FRESH` entry.
        b.stamp = b.stamp.wrapping_add(1).max(1);
        self.watched_free += u32::from(b.watch_pos != NIL);
        self.queue.push_back((id, b.stamp));
        self.num_free += 1;
    }

    /// Whether the queue entry `(id, stamp)` is live.
    #[inline]
    fn is_live(blocks: &[Block], (id, stamp): (u32, u32)) -> bool {
        if id == ANON || id == FRESH {
            return true;
        }
        let b = &blocks[id as usize];
        b.in_free_queue && b.stamp == stamp
    }

    /// Takes block `id` out of the free queue, wherever it is: its entry goes stale.
    fn unlink(&mut self, id: u32) {
        assert!(self.blocks[id as usize].in_free_queue, "block {id} is not in the free queue");
        self.take_out(id);
        // Stale entries are at most as many as live ones (and a few): the queue stays
        // within twice the pool.
        if self.queue.len() > 2 * self.num_free as usize + 64 {
            let blocks = &self.blocks;
            self.queue.retain(|&e| Self::is_live(blocks, e));
        }
    }

    fn take_out(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        b.in_free_queue = false;
        self.watched_free -= u32::from(b.watch_pos != NIL);
        self.num_free -= 1;
    }

    /// The free queue's blocks, front to back: a named block's id, or `None` for each
    /// anonymous block of a run.
    fn live(&self) -> impl Iterator<Item = Option<u32>> + '_ {
        let blocks = &self.blocks;
        let end = blocks.len() as u32;
        self.queue.iter().filter(|&&e| Self::is_live(blocks, e)).flat_map(move |&(id, x)| {
            let n = match id {
                ANON => x,
                FRESH => end - x,
                _ => 1,
            };
            (0..n).filter_map(move |k| match id {
                ANON => Some(None),
                FRESH => Self::is_live(blocks, (x + k, 0)).then_some(Some(x + k)),
                _ => Some(Some(id)),
            })
        })
    }

    /// The free queue front to back, `None` for an anonymous block (for tests and invariant
    /// checks).
    pub fn free_queue_entries(&self) -> Vec<Option<u32>> {
        self.live().collect()
    }

    /// The free queue's named blocks front to back (for tests).
    pub fn free_queue(&self) -> Vec<u32> {
        self.live().flatten().collect()
    }

    /// Checks the pool's own invariants: the free queue holds exactly the
    /// usable blocks with ref 0, links are consistent, and every cached hash
    /// points at blocks that hold it.
    pub fn check(&self) -> Result<(), String> {
        let q = self.free_queue_entries();
        if q.len() as u32 != self.num_free {
            return Err(format!("free queue has {} blocks, counter says {}", q.len(), self.num_free));
        }
        if let Some(&(ANON, 0)) = self.queue.iter().find(|e| e.0 == ANON && e.1 == 0) {
            return Err("an empty run in the free queue".into());
        }
        let mut spare = vec![false; self.blocks.len()];
        for &id in &self.spare_ids {
            if id == 0 || id as usize >= self.blocks.len() || std::mem::replace(&mut spare[id as usize], true) {
                return Err(format!("spare id {id} is out of range or listed twice"));
            }
        }
        for (id, b) in self.blocks.iter().enumerate().skip(1) {
            if spare[id] {
                if b.ref_cnt != 0 || b.in_free_queue || b.has_hash || b.watch_pos != NIL {
                    return Err(format!(
                        "spare id {id} stands for a block (ref {}, free {})",
                        b.ref_cnt, b.in_free_queue
                    ));
                }
            } else if (b.ref_cnt == 0) != b.in_free_queue {
                return Err(format!("block {id}: ref {} but in_free_queue={}", b.ref_cnt, b.in_free_queue));
            }
        }
        // Every block is named by one id or anonymous, and every id names one block or is spare.
        let anonymous = q.iter().filter(|e| e.is_none()).count() as u32 + self.num_anonymous_held();
        if self.spare_ids.len() as u32 != anonymous {
            return Err(format!("{} spare ids for {anonymous} anonymous blocks", self.spare_ids.len()));
        }
        let watched_free = self.blocks.iter().filter(|b| b.watch_pos != NIL && b.in_free_queue).count();
        if watched_free != self.watched_free as usize {
            return Err(format!("{watched_free} watched blocks are free, counter says {}", self.watched_free));
        }
        if self.blocks[0].in_free_queue {
            return Err("the null block is in the free queue".into());
        }
        for id in self.cached.blocks() {
            if self.cached.slot_of(self.blocks[id as usize].hash, id).is_none()
                || self.cached.get(self.blocks[id as usize].hash, &self.blocks) != Some(id)
            {
                return Err(format!("the hash table cannot find block {id}"));
            }
        }
        let held = self.cached.blocks().map(|id| (self.blocks[id as usize].hash, id));
        let dups = self.duplicates.iter().flat_map(|(&h, ids)| ids.iter().map(move |&id| (h, id)));
        let mut n = 0usize;
        for (h, id) in held.chain(dups) {
            n += 1;
            if self.blocks[id as usize].hash() != Some(h) {
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

    /// A xorshift stream from `seed`: each call a number below its argument.
    fn rng(mut x: u64) -> impl FnMut(u64) -> u64 {
        move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        }
    }

    /// The hash table against a `BTreeMap` reference under random allocation, caching and
    /// freeing, with hashes that share their low bits (long probe runs, wrap-around,
    /// backward shifts) or their whole value (duplicates).
    #[test]
    fn first_block_table_agrees_with_a_map_under_colliding_hashes() {
        use std::collections::BTreeMap;
        let mut rnd = rng(0x9e37_79b9_7f4a_7c15);
        for n in [3u32, 9, 17, 40] {
            let mut pool = BlockPool::new(n, true);
            let table_len = pool.cached.slots.len() as u64;
            let mut reference: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
            let mut holders: Vec<Vec<u32>> = Vec::new();
            for _ in 0..4000 {
                match rnd(3) {
                    0 => {
                        let k = 1 + rnd(4) as u32;
                        if k > pool.num_free() {
                            continue;
                        }
                        let mut got = Vec::new();
                        pool.get_new_blocks(k, &mut got);
                        for &b in &got {
                            for ids in reference.values_mut() {
                                ids.retain(|&x| x != b);
                            }
                        }
                        reference.retain(|_, ids| !ids.is_empty());
                        for &b in &got {
                            if rnd(4) == 0 {
                                continue;
                            }
                            // Low bits from a few homes near the table's end, high bits varied.
                            let h = (rnd(3) << 32) | (table_len - 1 - rnd(3)) | (rnd(2) * table_len);
                            pool.cache_block(b, h);
                            reference.entry(h).or_default().push(b);
                        }
                        holders.push(got);
                    }
                    1 => {
                        if holders.is_empty() {
                            continue;
                        }
                        let i = rnd(holders.len() as u64) as usize;
                        let blocks = holders.remove(i);
                        pool.free_blocks(blocks.iter().rev().copied());
                    }
                    _ => {
                        let h = (rnd(3) << 32) | (table_len - 1 - rnd(3)) | (rnd(2) * table_len);
                        if let Some(b) = pool.get_cached_block(h) {
                            pool.touch(&[b]);
                            holders.push(vec![b]);
                        }
                    }
                }
                for (&h, ids) in &reference {
                    assert_eq!(pool.get_cached_block(h), Some(ids[0]));
                }
                for hi in 0..3u64 {
                    for lo in 0..3u64 {
                        for w in 0..2u64 {
                            let h = (hi << 32) | (table_len - 1 - lo) | (w * table_len);
                            assert_eq!(pool.get_cached_block(h), reference.get(&h).map(|v| v[0]));
                        }
                    }
                }
                pool.check().unwrap();
            }
        }
    }

    /// What the pool's state shows of itself: the free queue front to back, each block by its
    /// hash (`None`: unhashed, named or anonymous).
    fn queue_by_hash(p: &BlockPool) -> Vec<Option<u64>> {
        p.free_queue_entries().into_iter().map(|e| e.and_then(|id| p.blocks[id as usize].hash())).collect()
    }

    /// Anonymous blocks change nothing vLLM's pool would show: the same random allocations,
    /// frees, prefix hits, registrations and preemptions (a private holder naming its first
    /// blocks, registering them and freeing all) run on a pool where private holders hold
    /// anonymous blocks and on one where every block is named, and both pools show the same
    /// free queue (block by block, by hash), the same lookups and the same free count; a
    /// blocked head's watched hit (the scheduler's memo, cut where a block was evicted) sees
    /// the same evictions and, after each lookup, the same free blocks.
    #[test]
    fn anonymous_blocks_leave_every_lookup_and_the_queue_order_unchanged() {
        let mut rnd = rng(0x6a09_e667_f3bc_c908);
        for n in [2u32, 6, 33, 200] {
            for caching in [true, false] {
                let (mut a, mut b) = (BlockPool::new(n, caching), BlockPool::new(n, caching));
                // A holder: (anonymous count in `a`, named ids in `a`, ids in `b`).
                let mut held: Vec<(u32, Vec<u32>, Vec<u32>)> = Vec::new();
                let mut next_unique = 1u64 << 40;
                // Watched blocks, as ids in `a` and in `b`.
                let mut watched: Vec<(u32, u32)> = Vec::new();
                for step in 0..3000 {
                    match rnd(7) {
                        // A blocked head of queue looks up its prompt again (the scheduler's
                        // memo): the hit cut before the first block evicted since the last
                        // lookup (or dropped), then extended by a hash, watched.
                        5 | 6 => {
                            assert_eq!(a.watched_cut(), b.watched_cut());
                            let cut = if rnd(4) == 0 { 0 } else { (a.watched_cut() as usize).min(watched.len()) };
                            let (xs, ys): (Vec<u32>, Vec<u32>) = watched.drain(cut..).unzip();
                            a.unwatch(&xs, cut as u32);
                            b.unwatch(&ys, cut as u32);
                            a.reset_watched_cut();
                            b.reset_watched_cut();
                            // What the scheduler reads after a lookup: the hit's free blocks.
                            assert_eq!(a.watched_free(), b.watched_free(), "step {step}");
                            let h = 1 + rnd(12);
                            if let (Some(x), Some(y)) = (a.get_cached_block(h), b.get_cached_block(h)) {
                                let pos = watched.len() as u32;
                                assert_eq!(a.watch(&[x], pos), b.watch(&[y], pos), "step {step}");
                                if a.blocks[x as usize].watch_pos == pos {
                                    watched.push((x, y));
                                    assert_eq!(a.watched_free(), b.watched_free(), "step {step}");
                                }
                            }
                        }
                        // A private holder allocates.
                        0 if a.num_free() > 0 => {
                            let k = 1 + rnd(u64::from(a.num_free().min(8))) as u32;
                            a.get_new_anonymous(k);
                            let mut ids = vec![];
                            b.get_new_blocks(k, &mut ids);
                            held.push((k, vec![], ids));
                        }
                        // A sharing holder allocates and registers some of its blocks.
                        1 if a.num_free() > 0 => {
                            let k = 1 + rnd(u64::from(a.num_free().min(8))) as u32;
                            let (mut ia, mut ib) = (vec![], vec![]);
                            a.get_new_blocks(k, &mut ia);
                            b.get_new_blocks(k, &mut ib);
                            for j in 0..k as usize {
                                if rnd(3) > 0 {
                                    let h = 1 + rnd(12);
                                    a.cache_block(ia[j], h);
                                    b.cache_block(ib[j], h);
                                }
                            }
                            held.push((0, ia, ib));
                        }
                        // A prefix hit.
                        2 => {
                            let h = 1 + rnd(12);
                            match (a.get_cached_block(h), b.get_cached_block(h)) {
                                (Some(x), Some(y)) => {
                                    a.touch(&[x]);
                                    b.touch(&[y]);
                                    held.push((0, vec![x], vec![y]));
                                }
                                (None, None) => {}
                                other => panic!("lookups differ at step {step}: {other:?}"),
                            }
                        }
                        // A private holder is preempted: its first blocks registered, then freed.
                        3 if held.iter().any(|h| h.0 > 0) => {
                            let i = held.iter().position(|h| h.0 > 0).unwrap();
                            let (anon, _, ib) = held.remove(i);
                            let reg = rnd(u64::from(anon) + 1) as u32;
                            let mut ia = vec![];
                            a.name_anonymous(reg, &mut ia);
                            for j in 0..reg as usize {
                                next_unique += 1;
                                a.cache_block(ia[j], next_unique);
                                b.cache_block(ib[j], next_unique);
                            }
                            a.free_anonymous(anon - reg);
                            a.free_blocks(ia.iter().rev().copied());
                            b.free_blocks(ib.iter().rev().copied());
                        }
                        // A holder finishes.
                        4 if !held.is_empty() => {
                            let (anon, ia, ib) = held.swap_remove(rnd(held.len() as u64) as usize);
                            a.free_anonymous(anon);
                            a.free_blocks(ia.iter().rev().copied());
                            b.free_blocks(ib.iter().rev().copied());
                        }
                        _ => {}
                    }
                    assert_eq!(a.num_free(), b.num_free(), "step {step}");
                    assert_eq!(queue_by_hash(&a), queue_by_hash(&b), "step {step}");
                    for h in (1..=12).chain([next_unique, next_unique - 1]) {
                        assert_eq!(a.get_cached_block(h).is_some(), b.get_cached_block(h).is_some(), "hash {h}");
                    }
                    assert_eq!(a.num_anonymous_held(), held.iter().map(|h| h.0).sum::<u32>());
                    assert_eq!(a.watched_cut(), b.watched_cut(), "step {step}");
                    // The hit's blocks before the cut: the same ones free.
                    let cut = (a.watched_cut() as usize).min(watched.len());
                    let free_a = watched[..cut].iter().filter(|w| a.is_free(w.0)).count();
                    assert_eq!(free_a, watched[..cut].iter().filter(|w| b.is_free(w.1)).count(), "step {step}");
                    a.check().unwrap();
                    b.check().unwrap();
                }
            }
        }
    }

    /// vLLM ≥ 0.23 (`free_blocks`: `prepend_n` / `append_n`): a freed request's blocks without
    /// a hash are reused first, its hashed ones evicted last in LRU order; a request's partial
    /// last block no longer pushes a cached block out.
    #[test]
    fn from_0_23_unhashed_freed_blocks_are_reused_first_and_hashed_ones_evicted_last() {
        let mut p = BlockPool::new(9, true); // usable 1..=8
        let mut a = vec![];
        p.get_new_blocks(3, &mut a); // blocks 1, 2, 3: two full (hashed), one partial
        p.cache_block(a[0], 100);
        p.cache_block(a[1], 101);
        p.free_request_unhashed_first(&a, 0, 2);
        // The queue: the partial block's slot first (anonymous), then 4..=8, then 2, 1 (tail first).
        assert_eq!(p.free_queue_entries(), vec![None, Some(4), Some(5), Some(6), Some(7), Some(8), Some(2), Some(1)]);
        assert_eq!(p.num_free(), 8);
        // Six blocks taken: the anonymous one and 4..=8; both cached blocks survive.
        let mut b = vec![];
        p.get_new_blocks(6, &mut b);
        assert_eq!(p.get_cached_block(100), Some(1));
        assert_eq!(p.get_cached_block(101), Some(2));
        p.check().unwrap();
        // A private request's blocks, counted as hashed but not registered: the hashed two to
        // the back, its partial one to the front.
        let mut r = BlockPool::new(6, true); // usable 1..=5
        r.get_new_anonymous(3);
        r.free_request_unhashed_first(&[], 3, 2);
        r.check().unwrap();
        assert_eq!(r.free_queue_entries(), vec![None, Some(4), Some(5), None, None]);
        // Caching off: nothing is hashed, everything to the front.
        let mut q = BlockPool::new(5, false);
        let mut c = vec![];
        q.get_new_blocks(2, &mut c);
        q.free_request_unhashed_first(&c, 0, 0);
        assert_eq!(q.free_queue_entries(), vec![None, None, Some(3), Some(4)]);
        q.check().unwrap();
    }

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

    /// The free queue against a plain list of its blocks (what vLLM's linked list holds)
    /// under random allocation, frees and prefix hits from anywhere in it: the same blocks
    /// in the same order, the stale entries bounded, through many compactions.
    #[test]
    fn free_queue_keeps_the_linked_lists_order_through_hits_and_compactions() {
        let mut rnd = rng(0x2545_f491_4f6c_dd1d);
        for n in [2u32, 5, 40, 300] {
            let mut p = BlockPool::new(n, true);
            let mut list: Vec<u32> = (1..n).collect();
            let mut held: Vec<Vec<u32>> = Vec::new();
            for _ in 0..4000 {
                match rnd(3) {
                    0 if !list.is_empty() => {
                        let k = 1 + rnd(list.len() as u64) as u32;
                        let mut got = vec![];
                        p.get_new_blocks(k, &mut got);
                        assert_eq!(got, list.drain(..k as usize).collect::<Vec<_>>());
                        held.push(got);
                    }
                    1 if !held.is_empty() => {
                        let blocks = held.swap_remove(rnd(held.len() as u64) as usize);
                        p.free_blocks(blocks.iter().rev().copied());
                        list.extend(blocks.iter().rev());
                    }
                    _ if !list.is_empty() => {
                        // A hit on a free block anywhere in the queue.
                        let id = list.remove(rnd(list.len() as u64) as usize);
                        p.touch(&[id]);
                        held.push(vec![id]);
                    }
                    _ => {}
                }
                assert_eq!(p.free_queue(), list);
                assert_eq!(p.num_free() as usize, list.len());
                assert!(p.queue.len() <= 2 * list.len() + 65, "stale entries bounded");
                p.check().unwrap();
            }
        }
    }
}
