//! debug-arena: the canaries planted after every arena buffer and the
//! poison written over an iteration's buffers at reset, so an overrun or a
//! stale read shows. Its own room because it exists in one build only.
//! The raw writes here touch only blocks the bump arena still owns and that
//! no slice covers: a canary lies past the slice handed out, and poisoning
//! happens at reset, before the epoch moves and under `&mut Storage`.

use super::*;

impl Storage {
    /// debug-arena: fills the bytes after a buffer's end (its padding plus
    /// CANARY more) with a pattern checked at reset.
    pub(super) fn plant_canary(
        &mut self,
        op: &'static str,
        raw: NonNull<u8>,
        data_bytes: usize,
        total: usize,
    ) {
        // SAFETY: raw..raw+total is the block just allocated for this buffer;
        // the slice handed out covers only its first data_bytes.
        unsafe {
            std::ptr::write_bytes(
                raw.as_ptr().add(data_bytes),
                CANARY_BYTE,
                total - data_bytes,
            )
        };
        self.act.canaries.push(Canary {
            op,
            raw,
            data_bytes,
            total,
        });
    }

    /// debug-arena: verifies every canary, then poisons every buffer of the
    /// iteration with 0xFF bytes (NaN as f32) so a stale read cannot pass
    /// silently. Returns a description of the first overrun found.
    pub(super) fn check_and_poison(&mut self) -> Option<String> {
        let mut first = None;
        for c in self.act.canaries.drain(..) {
            // SAFETY: the block is still owned by the bump arena (not reset
            // yet) and no slice into it is alive (&mut self).
            let block = unsafe { std::slice::from_raw_parts_mut(c.raw.as_ptr(), c.total) };
            if first.is_none()
                && let Some(at) = block[c.data_bytes..].iter().position(|&b| b != CANARY_BYTE)
            {
                first = Some(format!(
                    "debug-arena: a buffer of {} bytes made by `{}` was overrun (byte {} past its end was written)",
                    c.data_bytes, c.op, at
                ));
            }
            block.fill(0xFF);
        }
        first
    }
}
