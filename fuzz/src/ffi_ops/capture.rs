//! Capture and replay (ids 0x80..): a whole capture, replays with new
//! input values, forged step handles, and seeded dropout.

use super::*;

impl FfiOps<'_> {
    /// ag_capture_begin, ag_input_new and ag_input_write, loss = sum(x * x)
    /// (times a parameter when there is one), ag_backward, ag_capture_end;
    /// then replays: with the captured values the loss is bit-identical,
    /// and after ag_step_free the step is refused. Ends with ag_reset.
    /// Any call may fail (arena cap, injected allocation failure): then
    /// the scenario resets and stops.
    pub(super) fn capture_replay(&mut self) {
        let t = self.target();
        let c = self.ptr(t);
        let n = 1 + self.input.u8() as usize % 6;
        let v = self.values(n);
        let pre = self.pre(t, &[]);
        let st = ag_capture_begin(c);
        self.post("ag_capture_begin", t, &pre, st);
        if st != AG_STATUS_OK {
            return;
        }
        let Target::Live(i) = t else { return };
        let mut x = SENTINEL;
        let st = ag_input_new(c, [n].as_ptr(), 1, &mut x);
        self.post("ag_input_new", t, &pre, st);
        let mut y = SENTINEL;
        let mut loss = SENTINEL;
        let params = self.stats(i).param_count;
        let mut ok = st == AG_STATUS_OK
            && ag_input_write(c, x, v.as_ptr(), n) == AG_STATUS_OK
            && ag_mul(c, x, x, &mut y) == AG_STATUS_OK;
        if ok && params > 0 {
            let mut p = SENTINEL;
            let mut s = SENTINEL;
            ok = ag_param_at(c, 0, &mut p) == AG_STATUS_OK
                && ag_sum(c, p, &mut s) == AG_STATUS_OK
                && ag_mul(c, y, s, &mut y) == AG_STATUS_OK;
        }
        ok = ok && ag_sum(c, y, &mut loss) == AG_STATUS_OK && ag_backward(c, loss) == AG_STATUS_OK;
        let mut step = ag_step::default();
        if ok {
            let st = ag_capture_end(c, loss, &mut step);
            self.post("ag_capture_end", t, &pre, st);
            ok = st == AG_STATUS_OK;
        }
        if ok {
            let mut first = 0.0f32;
            assert_eq!(ag_tensor_item(c, loss, &mut first), AG_STATUS_OK);
            // New values, then the captured ones again: the same loss.
            let w: Vec<f32> = v.iter().map(|a| a * 0.5 + 1.0).collect();
            let st = ag_input_write(c, x, w.as_ptr(), n);
            self.post("ag_input_write", t, &pre, st);
            let st = ag_replay(c, step);
            self.post("ag_replay", t, &pre, st);
            if st == AG_STATUS_OK {
                assert_eq!(ag_input_write(c, x, v.as_ptr(), n), AG_STATUS_OK);
                assert_eq!(ag_replay(c, step), AG_STATUS_OK, "{}", last_error(c));
                let mut again = 0.0f32;
                assert_eq!(ag_tensor_item(c, loss, &mut again), AG_STATUS_OK);
                assert_eq!(
                    again.to_bits(),
                    first.to_bits(),
                    "replay of the captured values"
                );
            }
            // The step has no id buffer (no embedding, no cross-entropy).
            let ids = [0i32; 2];
            let st = ag_input_write_ids(c, step, self.input.u8() as usize % 2, ids.as_ptr(), 2);
            self.post("ag_input_write_ids", t, &pre, st);
            assert_eq!(st, AG_STATUS_INVALID_ARGUMENT);
            let mut copy = step;
            let st = ag_step_free(c, &mut step);
            self.post("ag_step_free", t, &pre, st);
            assert_eq!(st, AG_STATUS_OK);
            assert_eq!(step, ag_step::default(), "ag_step_free zeroes the handle");
            assert_eq!(ag_replay(c, copy), AG_STATUS_STALE_HANDLE);
            assert_eq!(ag_step_free(c, &mut copy), AG_STATUS_STALE_HANDLE);
        }
        assert_eq!(ag_reset(c), AG_STATUS_OK);
    }

    /// ag_replay and ag_step_free with a forged step handle: never OK
    /// (freeing the all-zero step does nothing, successfully).
    pub(super) fn step_forged(&mut self) {
        let t = self.target();
        let (a, b) = (self.input.u8(), self.input.u8());
        let context = match t {
            Target::Live(i) if a & 1 == 0 => self.ids[i],
            _ => a as u32,
        };
        let mut s = ag_step {
            index: b as u32,
            context,
            generation: (a >> 1) as u64,
        };
        if a == 0 {
            // The all-zero step: refused by ag_replay, nothing to free.
            s = ag_step::default();
        }
        let mut pre = self.pre(t, &[]);
        pre.bad_handle = true;
        let st = ag_replay(self.ptr(t), s);
        self.post("ag_replay", t, &pre, st);
        assert_ne!(st, AG_STATUS_OK, "a forged step replayed");
        // Freeing the all-zero step is a no-op that succeeds.
        pre.bad_handle = s != ag_step::default();
        let st = ag_step_free(self.ptr(t), &mut s);
        self.post("ag_step_free", t, &pre, st);
        if s != ag_step::default() {
            assert_ne!(st, AG_STATUS_OK, "a forged step freed");
        }
    }

    /// A seed slot written with a value from the input (or ag_seed_write on
    /// a fuzzed handle), then ag_dropout_seeded of a fuzzed x and p with
    /// that seed or a fuzzed handle as the seed.
    pub(super) fn dropout_seeded(&mut self) {
        let t = self.target();
        let c = self.ptr(t);
        let value = self.input.u64();
        let mut seed = SENTINEL;
        let fresh = self.input.u8() < 192;
        if fresh {
            let pre = self.pre(t, &[]);
            let st = ag_input_new(c, [4].as_ptr(), 1, &mut seed);
            self.post("ag_input_new", t, &pre, st);
            if st != AG_STATUS_OK {
                return;
            }
            self.remember(seed);
        } else {
            seed = self.handle();
        }
        let pre = self.pre(t, &[seed]);
        let st = ag_seed_write(c, seed, value);
        self.post("ag_seed_write", t, &pre, st);
        if fresh && pre.live.is_some() {
            assert_eq!(st, AG_STATUS_OK, "{}", last_error(c));
            let mut limbs = [0.0f32; 4];
            assert_eq!(ag_tensor_read(c, seed, limbs.as_mut_ptr(), 4), AG_STATUS_OK);
            let back = (0..4).fold(0u64, |a, i| a | ((limbs[i] as u64) << (16 * i)));
            assert_eq!(back, value, "the slot holds the seed's limbs");
        }
        let x = self.handle();
        let p = self.input.f32();
        if !fresh && self.input.u8() & 1 == 0 {
            seed = self.handle();
        }
        self.op("ag_dropout_seeded", t, &[x, seed], |c, o| {
            ag_dropout_seeded(c, x, p, seed, o)
        });
    }

    /// Captures loss = sum(dropout_seeded(x) * dropout_seeded(x)) with x an
    /// input slot and the seed one too; replays that keep the seed keep the
    /// loss bits, and writing another seed then the first gives them again.
    /// Any call may fail (arena cap, injected failure): then it resets.
    pub(super) fn seeded_capture(&mut self) {
        let t = self.target();
        let Target::Live(_) = t else { return };
        let c = self.ptr(t);
        let n = 1 + self.input.u8() as usize % 8;
        let v = self.values(n);
        let (s0, s1) = (self.input.u64(), self.input.u64());
        let p = (self.input.u8() % 10) as f32 / 10.0;
        let pre = self.pre(t, &[]);
        let st = ag_capture_begin(c);
        self.post("ag_capture_begin", t, &pre, st);
        if st != AG_STATUS_OK {
            return;
        }
        let (mut x, mut seed, mut d, mut sq, mut loss) =
            (SENTINEL, SENTINEL, SENTINEL, SENTINEL, SENTINEL);
        let mut step = ag_step::default();
        let ok = ag_input_new(c, [n].as_ptr(), 1, &mut x) == AG_STATUS_OK
            && ag_input_write(c, x, v.as_ptr(), n) == AG_STATUS_OK
            && ag_input_new(c, [4].as_ptr(), 1, &mut seed) == AG_STATUS_OK
            && ag_seed_write(c, seed, s0) == AG_STATUS_OK
            && ag_dropout_seeded(c, x, p, seed, &mut d) == AG_STATUS_OK
            && ag_mul(c, d, d, &mut sq) == AG_STATUS_OK
            && ag_sum(c, sq, &mut loss) == AG_STATUS_OK
            && ag_backward(c, loss) == AG_STATUS_OK
            && ag_capture_end(c, loss, &mut step) == AG_STATUS_OK;
        if ok {
            let item = |c| {
                let mut l = 0.0f32;
                assert_eq!(ag_tensor_item(c, loss, &mut l), AG_STATUS_OK);
                l.to_bits()
            };
            let first = item(c);
            let pre = self.pre(t, &[]);
            let st = ag_replay(c, step);
            self.post("ag_replay", t, &pre, st);
            if st == AG_STATUS_OK {
                assert_eq!(item(c), first, "a replay that keeps the seed");
                let st = ag_seed_write(c, seed, s1);
                self.post("ag_seed_write", t, &pre, st);
                assert_eq!(st, AG_STATUS_OK, "{}", last_error(c));
                assert_eq!(ag_replay(c, step), AG_STATUS_OK);
                assert_eq!(ag_seed_write(c, seed, s0), AG_STATUS_OK);
                assert_eq!(ag_replay(c, step), AG_STATUS_OK);
                assert_eq!(item(c), first, "the first seed again");
            }
            assert_eq!(ag_step_free(c, &mut step), AG_STATUS_OK);
            let pre = self.pre(t, &[seed]);
            let st = ag_seed_write(c, seed, s1);
            self.post("ag_seed_write", t, &pre, st);
            assert_eq!(st, AG_STATUS_STALE_HANDLE, "a freed step's seed");
        }
        assert_eq!(ag_reset(c), AG_STATUS_OK);
    }
}
