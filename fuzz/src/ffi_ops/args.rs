//! Choosing the arguments of a call from the input: the context, tensor
//! handles (remembered, mutated or forged), shapes, values, ids.

use super::{FfiOps, MAX_IDS, MAX_NUMEL, Target};
use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use std::ptr::null_mut;

impl FfiOps<'_> {
    pub(super) fn target(&mut self) -> Target {
        let b = self.input.u8();
        let t = match b {
            0..=199 => Target::Live(0),
            200..=239 => Target::Live(1),
            240..=247 => Target::Null,
            _ => Target::Invalid(self.invalid[b as usize % self.invalid.len()]),
        };
        self.resolve_target(t)
    }

    /// Maps a freed context slot, or an address reused by a live context,
    /// onto what the library will see.
    pub(super) fn resolve_target(&self, t: Target) -> Target {
        match t {
            Target::Live(i) if self.ctx[i].is_null() => Target::Invalid(self.invalid[0]),
            Target::Invalid(a) => match self.ctx.iter().position(|&c| c as usize == a) {
                Some(i) if a != 0 => Target::Live(i),
                _ => t,
            },
            _ => t,
        }
    }

    pub(super) fn ptr(&self, t: Target) -> *mut ag_context {
        match t {
            Target::Live(i) => self.ctx[i],
            Target::Null => null_mut(),
            Target::Invalid(a) => a as *mut ag_context,
        }
    }

    pub(super) fn stats(&self, i: usize) -> MemoryStats {
        let mut s = MemoryStats::default();
        assert_eq!(ag_memory_stats(self.ctx[i], &mut s), AG_STATUS_OK);
        s
    }

    pub(super) fn handle(&mut self) -> ag_tensor {
        let b = self.input.u8();
        let n = self.pool.len();
        if n > 0 && b < 224 {
            return self.pool[n - 1 - (b as usize % n)];
        }
        if n > 0 && b < 240 {
            let mut t = self.pool[n - 1 - (b as usize % n)];
            match b % 5 {
                0 => t.generation = t.generation.wrapping_add(1),
                1 => t.generation = t.generation.wrapping_sub(1),
                2 => t.index = t.index.wrapping_add(1),
                3 => t.context = t.context.wrapping_add(1),
                _ => t.generation = 0,
            }
            return t;
        }
        let sel = self.input.u8();
        let context = match sel % 4 {
            0 => self.ids[0],
            1 => self.ids[1],
            2 => 0,
            _ => self.input.u32(),
        };
        let generation = match (sel >> 2) % 4 {
            0 => 0,
            1 => self.input.u8() as u64,
            2 => u64::MAX,
            _ => self.input.u64(),
        };
        let index = match (sel >> 4) % 3 {
            0 => self.input.u8() as u32,
            1 => u32::MAX,
            _ => self.input.u32(),
        };
        ag_tensor {
            index,
            context,
            generation,
        }
    }

    /// A shape: `ndim` (possibly invalid: 0 or 7) and dimensions (possibly
    /// zero or huge). Returns (dims buffer, ndim, numel or None if it
    /// overflows or exceeds what the harness may allocate).
    pub(super) fn shape(&mut self) -> ([usize; 8], usize) {
        let mut dims = [1usize; 8];
        let b = self.input.u8();
        // Often copy the shape of a remembered tensor (so ops can match).
        if b < 96 && !self.pool.is_empty() {
            let t = self.handle();
            let mut nd = 0usize;
            let mut s = [0usize; 6];
            if ag_tensor_shape(self.ctx[0], t, s.as_mut_ptr(), &mut nd) == AG_STATUS_OK {
                dims[..nd].copy_from_slice(&s[..nd]);
                let m = self.input.u8();
                match m % 6 {
                    0 if nd >= 2 => dims.swap(nd - 1, nd - 2),
                    1 if nd < 6 => {
                        dims.copy_within(0..nd, 1);
                        dims[0] = 1 + (m as usize >> 4);
                        nd += 1;
                    }
                    2 if nd < 6 => {
                        dims[nd] = 1 + (m as usize >> 4);
                        nd += 1;
                    }
                    3 => dims[(m as usize >> 3) % nd] = 1,
                    _ => {}
                }
                self.clamp(&mut dims, nd);
                return (dims, nd);
            }
        }
        let nd = match b % 8 {
            0 => 0,
            7 => 7,
            n => n as usize,
        };
        const HUGE: [usize; 6] = [1 << 16, 1 << 31, 1 << 32, usize::MAX, 3 << 30, 1 << 62];
        for d in dims.iter_mut().take(nd.min(8)) {
            let v = self.input.u8();
            *d = match v >> 5 {
                0..=4 => (v & 7) as usize + 1,
                5 => (v & 31) as usize + 1,
                6 => 0,
                _ => HUGE[(v & 31) as usize % HUGE.len()],
            };
        }
        self.clamp(&mut dims, nd);
        (dims, nd)
    }

    /// Shrinks a shape whose element count is allocatable but above
    /// MAX_NUMEL; shapes the library must refuse (too many elements, zero
    /// dims, bad rank) are kept as they are.
    pub(super) fn clamp(&self, dims: &mut [usize; 8], nd: usize) {
        if !(1..=6).contains(&nd) || dims[..nd].contains(&0) {
            return;
        }
        let n = dims[..nd].iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        match n {
            Some(n) if n <= MAX_NUMEL => {}
            Some(n) if n > 1 << 31 => {}
            None => {}
            Some(_) => {
                for d in dims[..nd].iter_mut() {
                    *d = (*d).min(8);
                }
                let mut i = 0;
                while dims[..nd].iter().product::<usize>() > MAX_NUMEL {
                    dims[i] = 1;
                    i += 1;
                }
            }
        }
    }

    pub(super) fn numel_of(dims: &[usize]) -> Option<usize> {
        if dims.is_empty() || dims.len() > 6 || dims.contains(&0) {
            return None;
        }
        dims.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= MAX_NUMEL)
    }

    pub(super) fn values(&mut self, n: usize) -> Vec<f32> {
        let mode = self.input.u8();
        let k = self.input.u8() as f32;
        (0..n)
            .map(|i| match mode % 6 {
                0 => 0.0,
                1 => 1.0,
                2 => (i as f32 * 0.37 + k).sin(),
                3 => i as f32 - k,
                4 if i == k as usize % n.max(1) => {
                    [f32::NAN, f32::INFINITY, -0.0, 1e38][mode as usize / 64]
                }
                4 => 0.25,
                _ => ((i * 7 + k as usize) % 13) as f32 / 13.0 - 0.5,
            })
            .collect()
    }

    pub(super) fn ids(&mut self) -> ([i32; MAX_IDS], usize, bool) {
        let mut ids = [0i32; MAX_IDS];
        let n = self.input.u8() as usize % (MAX_IDS + 1);
        let null = self.input.u8() >= 248;
        let mode = self.input.u8();
        for (i, v) in ids.iter_mut().enumerate().take(n) {
            *v = match mode % 4 {
                0 | 1 => (i % (1 + mode as usize / 8)) as i32,
                2 => self.input.u8() as i32 % 20,
                _ => [-1, i32::MIN, i32::MAX, 1 << 20, 0, 3, 7, 100][self.input.u8() as usize % 8],
            };
        }
        (ids, n, null)
    }
}
