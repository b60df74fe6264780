//! Capture and replay (ids 0x80..): a whole capture, replays with new
//! input values, and forged step handles.

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
}
