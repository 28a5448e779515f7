//! vLLM's `KVCacheManager` for one full-attention group
//! (`v1/core/kv_cache_manager.py`, `single_type_kv_cache_manager.py`):
//! prefix lookup, slot allocation with the admission gate, and freeing.

use super::block_pool::BlockPool;
use crate::request::{extend_block_hashes, RequestSpec};

/// A request's KV state: the blocks it holds, in token order.
#[derive(Clone, Debug, Default)]
pub struct RequestKv {
    /// The named blocks it holds (see `block_pool`'s doc on anonymous blocks).
    pub blocks: Vec<u32>,
    /// Anonymous blocks it holds, after `blocks` in token order: a request that does not
    /// register its blocks ([`RequestKv::anonymous`]) holds only these.
    pub anon: u32,
    /// How many of `blocks` have been registered in the prefix cache.
    pub num_cached_blocks: u32,
    /// Hashes of the request's full blocks known so far (prompt and output).
    pub block_hashes: Vec<u64>,
    /// The most tokens the held blocks take with no block becoming full (with caching):
    /// `KvCacheManager::fits_held`'s bound, kept where `blocks` and `num_cached_blocks`
    /// change (`allocate_slots`, `free`), so that the check is one comparison.
    fits_limit: u32,
    /// No other request of the run shares this request's first block
    /// ([`crate::engine::Engine::expect_requests`]), so no other request can hit any of its
    /// blocks: they are registered in the prefix cache only when it is preempted (its own
    /// lookup on resuming is the only one that could find them). See
    /// [`KvCacheManager::register_private`].
    pub private: bool,
    /// A private request's blocks have been registered (it was preempted): its lookups
    /// can hit. Until then they cannot, and are not made.
    pub registered_once: bool,
}

impl RequestKv {
    /// A request's KV state before its first step, `private` as told.
    pub fn with_private(private: bool) -> RequestKv {
        RequestKv { private, ..RequestKv::default() }
    }

    /// [`RequestKv::with_private`], keeping the vectors' buffers (emptied): the KV state of a
    /// new request that takes over a finished one's.
    pub fn reset(&mut self, private: bool) {
        let (mut blocks, mut block_hashes) = (std::mem::take(&mut self.blocks), std::mem::take(&mut self.block_hashes));
        blocks.clear();
        block_hashes.clear();
        *self = RequestKv { blocks, block_hashes, ..RequestKv::with_private(private) };
    }

    /// Blocks held, named and anonymous.
    #[inline]
    pub fn held(&self) -> u32 {
        self.blocks.len() as u32 + self.anon
    }

    /// Whether its new blocks are held anonymously: nothing registers them while it holds
    /// them (caching is off, or it is private and not yet registered: registering them on
    /// preemption names them first, [`KvCacheManager::register_private`]).
    #[inline]
    pub fn anonymous(&self, enable_caching: bool) -> bool {
        !enable_caching || self.lookup_cannot_hit()
    }

    /// The most tokens its decodes reach on `allocate_slots`' fast path (nothing allocated or
    /// cached): `KvCacheManager::fits_held`'s limit.
    #[inline]
    pub fn fits_limit(&self) -> u32 {
        self.fits_limit
    }

    /// A lookup of this request's blocks finds nothing: it is private and none of its
    /// blocks has been registered.
    #[inline]
    pub fn lookup_cannot_hit(&self) -> bool {
        self.private && !self.registered_once
    }

    /// Reserves, once, room for the block hashes of the request's whole length (prompt and
    /// output), so that they are not reallocated as they grow. Capacity only: no value changes.
    #[inline]
    pub fn reserve_hashes(&mut self, spec: &RequestSpec, block_size: u32) {
        let n = ((spec.prompt_len + spec.output_len) / block_size) as usize;
        if self.block_hashes.capacity() < n {
            self.block_hashes.reserve(n - self.block_hashes.len());
        }
    }
}

/// The KV cache manager.
#[derive(Clone, Debug)]
pub struct KvCacheManager {
    pub pool: BlockPool,
    pub block_size: u32,
    pub enable_caching: bool,
    /// vLLM ≥ 0.23's freeing: blocks without a hash to the front of the free queue.
    pub unhashed_freed_first: bool,
}

/// A prefix-cache hit: blocks and the tokens they cover.
#[derive(Clone, Debug, Default)]
pub struct ComputedBlocks {
    pub blocks: Vec<u32>,
    pub num_tokens: u32,
}

#[inline]
pub fn cdiv(a: u32, b: u32) -> u32 {
    a.div_ceil(b)
}

impl KvCacheManager {
    pub fn new(num_gpu_blocks: u32, block_size: u32, enable_caching: bool) -> KvCacheManager {
        KvCacheManager {
            pool: BlockPool::new(num_gpu_blocks, enable_caching),
            block_size,
            enable_caching,
            unhashed_freed_first: false,
        }
    }

    /// The same, freeing as vLLM 0.23 and later do
    /// ([`super::scheduler::VllmBehaviour::unhashed_freed_first`]).
    pub fn with_unhashed_freed_first(mut self, on: bool) -> KvCacheManager {
        self.unhashed_freed_first = on;
        self
    }

    /// `get_computed_blocks` → `find_longest_cache_hit`: the longest chain of
    /// cached full blocks, at most `num_tokens - 1` tokens (one token is always
    /// recomputed to get logits).
    pub fn get_computed_blocks(
        &self,
        spec: &RequestSpec,
        num_tokens: u32,
        kv: &mut RequestKv,
        out: &mut ComputedBlocks,
    ) {
        out.blocks.clear();
        out.num_tokens = 0;
        if !self.enable_caching || num_tokens == 0 || kv.lookup_cannot_hit() {
            return;
        }
        kv.reserve_hashes(spec, self.block_size);
        extend_block_hashes(spec, self.block_size, num_tokens, &mut kv.block_hashes);
        let max_blocks = ((num_tokens - 1) / self.block_size) as usize;
        for &h in kv.block_hashes.iter().take(max_blocks) {
            match self.pool.get_cached_block(h) {
                Some(b) => out.blocks.push(b),
                None => break,
            }
        }
        out.num_tokens = out.blocks.len() as u32 * self.block_size;
    }

    /// `allocate_slots`: reserves blocks for `num_new_tokens` more tokens
    /// after `num_computed` computed ones and the `hit` prefix. With
    /// `full_sequence_must_fit` (vLLM ≥ 0.19 for waiting requests), the free
    /// pool must also hold the request's whole current sequence. Returns false
    /// (vLLM: `None`) if the pool cannot.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn allocate_slots(
        &mut self,
        spec: &RequestSpec,
        num_tokens: u32,
        num_computed: u32,
        kv: &mut RequestKv,
        num_new_tokens: u32,
        hit: &ComputedBlocks,
        full_sequence_must_fit: bool,
    ) -> bool {
        // The fast path (most decode steps), inlined into the caller's loop; the rest is
        // `allocate_slots_counted`, kept out of line.
        if hit.blocks.is_empty() && !full_sequence_must_fit && self.fits_held(num_computed + num_new_tokens, kv) {
            return true;
        }
        let num_evictable_hits = self.num_evictable(&hit.blocks);
        self.allocate_slots_counted(
            spec,
            num_tokens,
            num_computed,
            kv,
            num_new_tokens,
            hit,
            num_evictable_hits,
            full_sequence_must_fit,
        )
    }

    /// Whether a request holding `kv` has room for `total` tokens without any block
    /// becoming full: `allocate_slots` then changes nothing.
    #[inline]
    pub(super) fn fits_held(&self, total: u32, kv: &RequestKv) -> bool {
        debug_assert_eq!(kv.fits_limit, self.fits_limit(kv));
        total <= kv.fits_limit
    }

    /// The largest `total` for which the blocks `kv` holds have room and (with caching) no
    /// block becomes full: `total ≤ held blocks × bs` and `total / bs ≤ num_cached_blocks`.
    fn fits_limit(&self, kv: &RequestKv) -> u32 {
        let bs = u64::from(self.block_size);
        let mut limit = u64::from(kv.held()) * bs;
        if self.enable_caching {
            limit = limit.min((u64::from(kv.num_cached_blocks) + 1) * bs - 1);
        }
        u32::try_from(limit).unwrap_or(u32::MAX)
    }

    /// The most tokens a decode of `kv` reaches before its `allocate_slots` does anything but
    /// count: `KvCacheManager::fits_held`'s limit, except that an anonymous request's
    /// filled blocks (caching on) are only counted (`num_cached_blocks`, registered if it is
    /// ever preempted), which [`KvCacheManager::catch_up_fills`] can do later, so its limit is
    /// its held blocks' room. The scheduler's lazy decode cohort.
    pub fn lazy_limit(&self, kv: &RequestKv) -> u32 {
        if self.enable_caching && kv.lookup_cannot_hit() {
            kv.held() * self.block_size
        } else {
            kv.fits_limit
        }
    }

    /// Sets the anonymous blocks `kv` holds (blocks the pool gave out in aggregate: the
    /// scheduler's lazy decode cohort) and its fast-path limit with them.
    pub fn set_anon(&self, kv: &mut RequestKv, anon: u32) {
        kv.anon = anon;
        kv.fits_limit = self.fits_limit(kv);
    }

    /// Counts the blocks an anonymous request (caching on) filled in decodes up to `computed`
    /// tokens whose `allocate_slots` was not called ([`KvCacheManager::lazy_limit`]), as those
    /// calls would have.
    pub fn catch_up_fills(&self, kv: &mut RequestKv, computed: u32) {
        if self.enable_caching && kv.lookup_cannot_hit() {
            kv.num_cached_blocks = kv.num_cached_blocks.max((computed / self.block_size).min(kv.anon));
            kv.fits_limit = self.fits_limit(kv);
        }
    }

    /// How many of `blocks` are in the free queue (ref 0): a hit on them takes them out of it.
    /// (A spare id has ref 0 but names no free block.)
    pub fn num_evictable(&self, blocks: &[u32]) -> u32 {
        blocks.iter().filter(|&&b| self.pool.is_free(b)).count() as u32
    }

    /// [`KvCacheManager::allocate_slots`] given `num_evictable_hits`, the number of `hit`'s
    /// blocks with ref 0 ([`KvCacheManager::num_evictable`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub fn allocate_slots_counted(
        &mut self,
        spec: &RequestSpec,
        num_tokens: u32,
        num_computed: u32,
        kv: &mut RequestKv,
        num_new_tokens: u32,
        hit: &ComputedBlocks,
        num_evictable_hits: u32,
        full_sequence_must_fit: bool,
    ) -> bool {
        let bs = self.block_size;
        let held = kv.held();
        // Fast path (most decode steps): the held blocks have room and no
        // block becomes full, so nothing is allocated or cached.
        if hit.blocks.is_empty() && !full_sequence_must_fit && self.fits_held(num_computed + num_new_tokens, kv) {
            return true;
        }
        let total = num_computed + hit.num_tokens + num_new_tokens;
        let (num_new_blocks, need) = self.blocks_needed(
            num_tokens,
            total,
            held,
            hit.blocks.len() as u32,
            num_evictable_hits,
            full_sequence_must_fit,
        );
        if need > self.pool.num_free() {
            return false;
        }
        if kv.anonymous(self.enable_caching) {
            // No hit (it cannot hit, or caching is off), nothing registered: a count.
            debug_assert!(hit.blocks.is_empty() && kv.blocks.is_empty());
            self.pool.get_new_anonymous(num_new_blocks);
            kv.anon += num_new_blocks;
            if self.enable_caching {
                // Registered when preempted (`register_private`); counted as vLLM caches them.
                let num_full = (total.min(num_tokens) / bs).min(kv.anon);
                kv.num_cached_blocks = kv.num_cached_blocks.max(num_full);
            }
            kv.fits_limit = self.fits_limit(kv);
            return true;
        }
        self.pool.touch(&hit.blocks);
        let whole = cdiv(spec.prompt_len + spec.output_len, bs) as usize;
        if kv.blocks.capacity() < whole {
            // Room for the whole request's blocks at once (capacity only).
            kv.blocks.reserve(whole - kv.blocks.len());
        }
        kv.blocks.extend_from_slice(&hit.blocks);
        self.pool.get_new_blocks(num_new_blocks, &mut kv.blocks);
        // `cache_blocks`: register the full blocks among the tokens now
        // scheduled (hashes are registered at scheduling time, not when the
        // step has run: a later request in the same step can hit them).
        if self.enable_caching && kv.private {
            // Registered when preempted (`register_private`); counted as vLLM caches them.
            let num_full = ((total.min(num_tokens) / bs) as usize).min(kv.blocks.len());
            kv.num_cached_blocks = kv.num_cached_blocks.max(num_full as u32);
        } else if self.enable_caching {
            let num_full = (total.min(num_tokens) / bs) as usize;
            kv.reserve_hashes(spec, bs);
            extend_block_hashes(spec, bs, num_tokens, &mut kv.block_hashes);
            let num_full = num_full.min(kv.block_hashes.len()).min(kv.blocks.len());
            for k in kv.num_cached_blocks as usize..num_full {
                self.pool.cache_block(kv.blocks[k], kv.block_hashes[k]);
            }
            kv.num_cached_blocks = kv.num_cached_blocks.max(num_full as u32);
        }
        kv.fits_limit = self.fits_limit(kv);
        true
    }

    /// What `allocate_slots` for `total` tokens (computed, hit and new) of a request of
    /// `num_tokens` tokens holding `held` blocks, with a prefix hit of `hit_blocks` blocks,
    /// asks of the pool: the blocks it allocates, and the free blocks it requires (those plus
    /// the hit's `num_evictable_hits` blocks with ref 0, or with `full_sequence_must_fit` the
    /// whole sequence's, if more).
    #[inline]
    pub fn blocks_needed(
        &self,
        num_tokens: u32,
        total: u32,
        held: u32,
        hit_blocks: u32,
        num_evictable_hits: u32,
        full_sequence_must_fit: bool,
    ) -> (u32, u32) {
        let bs = self.block_size;
        let num_required = cdiv(total, bs);
        let num_new_blocks = num_required.saturating_sub(held + hit_blocks);
        let mut need = num_new_blocks + num_evictable_hits;
        if full_sequence_must_fit {
            let full = cdiv(num_tokens, bs).saturating_sub(held + hit_blocks) + num_evictable_hits;
            need = need.max(full);
        }
        (num_new_blocks, need)
    }

    /// Registers a private request's cached blocks (the first `num_cached_blocks`, those
    /// vLLM's `cache_blocks` has registered by now) before it is preempted: its blocks
    /// then stay in the prefix cache, in the free queue, for its lookup on resuming.
    ///
    /// Equal to registering each at scheduling time, as vLLM does: no other request can
    /// look up or cache these hashes (each is chained on a first block no other request
    /// holds), and the request itself looks them up only after it is preempted. Blocks it
    /// holds from a hit have their hash already and are skipped; blocks it recomputed whose
    /// hash an older copy still holds queue behind that copy, as they would have at
    /// scheduling time (only this request adds copies of its hashes, in time order).
    pub fn register_private(&mut self, spec: &RequestSpec, kv: &mut RequestKv) {
        if !kv.private || !self.enable_caching {
            return;
        }
        let bs = self.block_size;
        let n = kv.num_cached_blocks as usize;
        if kv.anon > 0 {
            // Name the blocks it registers (its first `n`: it holds no named ones yet).
            debug_assert!(kv.blocks.is_empty());
            self.pool.name_anonymous(n as u32, &mut kv.blocks);
            kv.anon -= n as u32;
        }
        kv.reserve_hashes(spec, bs);
        extend_block_hashes(spec, bs, n as u32 * bs, &mut kv.block_hashes);
        for k in 0..n {
            self.pool.cache_block(kv.blocks[k], kv.block_hashes[k]);
        }
        kv.registered_once = true;
    }

    /// `free`: drops the request's blocks, tail block first, so that its
    /// prefix blocks are evicted last.
    pub fn free(&mut self, kv: &mut RequestKv) {
        if self.unhashed_freed_first {
            // Its first `num_cached_blocks` are those vLLM has hashed (`cache_blocks`; a private
            // request's are counted, not registered, until it is preempted): they go to the
            // back, the rest to the front.
            self.pool.free_request_unhashed_first(&kv.blocks, kv.anon, kv.num_cached_blocks);
        } else {
            // The anonymous blocks are the tail.
            self.pool.free_anonymous(kv.anon);
            self.pool.free_blocks(kv.blocks.iter().rev().copied());
        }
        kv.anon = 0;
        kv.blocks.clear();
        kv.num_cached_blocks = 0;
        kv.fits_limit = 0;
    }
}
